// FP8 KV caches and FP8 attention (docs/conventions.md section 10): where a scale sits, how a scale is
// computed from the data, and the case rules. The bit conversions are in types.h.
#pragma once

#include <cstdint>

#include "attnscope/case_spec.h"
#include "attnscope/types.h"

namespace attnscope {

// Number of scales of one tensor (K or V) at a granularity: 1, kv_heads, or one per pool slot and
// head (the token granularity's scales live beside the pool, [num_pages * page_size, kv_heads]).
inline int64_t scale_count(ScaleGranularity g, int64_t pool_slots, int kv_heads) {
  return g == ScaleGranularity::kTensor ? 1 : g == ScaleGranularity::kHead ? kv_heads : pool_slots * kv_heads;
}

// Index of the scale of the element at (physical page, slot, KV head): layout-independent.
AS_HD inline int64_t scale_index(ScaleGranularity g, int page, int slot, int head, int page_size, int kv_heads) {
  if (g == ScaleGranularity::kTensor) return 0;
  if (g == ScaleGranularity::kHead) return head;
  return (static_cast<int64_t>(page) * page_size + slot) * kv_heads + head;
}

// The usual recipe: the group's largest magnitude maps to the format's largest finite value. Computed
// in double and rounded once to float, so every machine gets the same scale; an all-zero group gets 1.
AS_HD inline float scale_from_amax(float amax, Fp8Format f) {
  if (!(amax > 0.0f)) return 1.0f;
  return static_cast<float>(static_cast<double>(amax) / static_cast<double>(fp8_max(f)));
}

// The value FP8 format f stores for y, as a float: fp8_bits_to_f32(f, f32_to_fp8_bits(f, y)). e4m3 within
// +-448 (every clamped or scaled value of the host's quantisers) is rounded on the float's bits
// (e4m3_value), the rest through the bits; the same value either way (Fp8.ValueOnTheFloatsBits...).
float fp8_value(Fp8Format f, float y);
// y (|y| <= 448, not NaN) rounded to the nearest e4m3 value, ties to even: 3 mantissa bits kept, or a
// multiple of 2^-9 below 2^-6 (e4m3's subnormals).
float e4m3_value(float y);

// A given scale as the kernels hold it (float).
inline float scale_as_float(double s) { return static_cast<float>(s); }

// The FP8 part of validate_case: /kv_cache/dtype, /kv_cache/scales, /fp8_attention.
void validate_fp8(const CaseSpec& c);

}  // namespace attnscope
