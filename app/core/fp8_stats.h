// The numbers of an FP8 case's KV cache (docs/conventions.md section 10): the scales, per pool slot
// and KV head the largest |value| and the elements that saturated, and per head-dim channel the
// quantisation error |orig - stored * scale|. Built from the host workload (regenerated: bit-identical
// by construction); the GUI's FP8 views draw them and the CLI's `fp8` line prints the saturated counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/paging.h"

namespace attnscope {

// One tensor's (K's or V's) numbers.
struct Fp8TensorData {
  std::vector<float> scale;  // as the workload holds them: [1], [kv_heads] or [pool slots * kv_heads]
  bool given = false;        // the case gave the numbers (else amax / the format's max)
  // per (pool slot, KV head), [pool slots * kv_heads]; 0 for a slot no request uses
  std::vector<float> amax;        // largest |value before quantisation| over head_dim
  std::vector<int32_t> sat;       // elements that saturated (fp8_clamped)
  int64_t saturated = 0;          // their total
  int64_t elements = 0;           // real elements (keys of a request x kv_heads x head_dim)
  int64_t saturated_slots = 0;    // (slot, head) cells with a saturated element
  std::vector<int64_t> head_sat;  // [kv_heads] saturated elements per KV head
  // per head-dim channel over every real element: max and RMS of |orig - stored * scale|, and how
  // many of its elements saturated
  std::vector<double> chan_max, chan_rms;
  std::vector<int64_t> chan_sat;
  double err_max = 0;  // over all channels
};

struct Fp8Data {
  bool available = false;
  std::string why;  // when not available
  Fp8Format format = Fp8Format::kE4M3;
  ScaleGranularity granularity = ScaleGranularity::kTensor;
  float max_finite = 448;
  int page_size = 1, num_pages = 0, kv_heads = 1;
  std::vector<uint8_t> used;  // [pool slots]: a request's key lives there
  Fp8TensorData k, v;
  bool fp8_attention = false;
  float q_scale = 1;  // Q's scale with FP8 attention (1 otherwise)

  int64_t slots() const { return static_cast<int64_t>(num_pages) * page_size; }
  const Fp8TensorData& of(bool v_tensor) const { return v_tensor ? v : k; }
  // the scale of the element at (physical page, slot, KV head)
  float scale_at(bool v_tensor, int page, int slot, int head) const;
};

// Whether the quantiser's clamp changed x / scale: round to nearest even would have gone past the
// format's largest finite value. A value a hair above it (an amax scale rounded down to float puts
// its group's largest element at 448.00003) rounds to that value anyway and is not counted.
bool fp8_clamped(Fp8Format f, float x_over_scale);

// The host workload is regenerated for these numbers up to this size (workload_bytes).
constexpr int64_t kFp8ViewMaxBytes = int64_t{2} << 30;

// The data of an FP8 case (not available, with `why`, for another case or one over the limit).
Fp8Data build_fp8_data(const CaseSpec& c, const PageTable& pt, int64_t max_bytes = kFp8ViewMaxBytes);

// "K: 4090 of 4096 elements saturated, V: ... (clamped to +-448)" for a case whose given scales
// saturate elements; "" where none did.
std::string fp8_saturation_text(const Fp8Data& d);

}  // namespace attnscope
