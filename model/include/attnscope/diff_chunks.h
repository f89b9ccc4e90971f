// The comparison's order-defined pass (docs/architecture.md, "Where comparisons run"): the element
// arithmetic and the summation order of every statistic, written once for the host and the device, so
// a comparison computed on a GPU is the host's bit for bit.
#pragma once

#include <cstdint>

#include "attnscope/types.h"

namespace attnscope {

// Elements are summed in chunks of kDiffChunk consecutive indices (O: the raw index into [total_q,
// heads, head_dim_vo]; LSE: the row index into [total_q, heads]). Inside a chunk, lane i % kDiffLanes
// sums its elements in index order; the lanes are folded as a warp folds them (strides 16, 8, 4, 2,
// 1: fold_lanes); the chunks are added in chunk order (fold_chunks, compare.cpp).
constexpr int64_t kDiffChunk = 4096;
constexpr int kDiffLanes = 32;
static_assert(kDiffChunk % kDiffLanes == 0, "a chunk starts on lane 0");

// One lane's, one chunk's or the whole pass's statistics. Plain (no member initialisers) so a device
// can hold it in shared memory; start from empty_partial().
struct DiffPartial {
  double sum_abs, sum_sq_err, sum_sq_ref;  // over finite pairs
  double max_abs;                          // over finite pairs
  int64_t worst_index;                     // the lowest index attaining max_abs; -1: no finite pair
  uint64_t max_ulp;                        // in the case dtype, over finite pairs
  int64_t count, bit_identical, nan_a, inf_a, nan_b, inf_b, nonfinite_mismatch;
  int64_t loose_fail, tight_fail;  // elements outside allclose rtol 1e-2 atol 1e-3 / rtol 1e-3 atol 1e-4
  int64_t outside;                 // elements outside the rule's allclose(rtol, atol), NaN included
  int64_t raw_differ;              // elements whose fp32 bits differ
};

AS_HD inline DiffPartial empty_partial() {
  DiffPartial p{};
  p.worst_index = -1;
  return p;
}

// The same IEEE operations on both sides: the host builds with -ffp-contract=off, and on the device
// the intrinsics keep nvcc from fusing a multiply into an add.
AS_HD inline double diff_add(double x, double y) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(x, y);
#else
  return x + y;
#endif
}
AS_HD inline double diff_mul(double x, double y) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(x, y);
#else
  return x * y;
#endif
}
AS_HD inline float diff_fsub(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(x, y);
#else
  return x - y;
#endif
}
AS_HD inline bool diff_isnan(float x) { return (f32_bits(x) & 0x7fffffffu) > 0x7f800000u; }
AS_HD inline bool diff_isinf(float x) { return (f32_bits(x) & 0x7fffffffu) == 0x7f800000u; }
AS_HD inline float diff_fabs(float x) { return bits_f32(f32_bits(x) & 0x7fffffffu); }
AS_HD inline double diff_dabs(double x) { return x < 0 ? -x : x; }

// Maps bits b of dtype t to an integer line where adjacent values differ by 1.
AS_HD inline int64_t diff_ordered_bits(DType t, uint32_t b) {
  const int width = t == DType::kFp32 ? 32 : 16;
  const uint32_t sign = 1u << (width - 1);
  const int64_t mag = static_cast<int64_t>(b & (sign - 1));
  return (b & sign) ? -mag : mag;
}

// ULP distance in dtype t; the largest value where exactly one side is not finite or they differ.
AS_HD inline uint64_t diff_ulp(DType t, float a, float b) {
  if (diff_isnan(a) || diff_isinf(a) || diff_isnan(b) || diff_isinf(b)) return a == b ? 0 : ~uint64_t{0};
  const int64_t d = diff_ordered_bits(t, dtype_bits(t, a)) - diff_ordered_bits(t, dtype_bits(t, b));
  return static_cast<uint64_t>(d < 0 ? -d : d);
}

// One pair (a of the backend, b of the baseline) at `index`, into a lane's partial. rtol / atol are the
// rule's allclose bounds (`outside`).
AS_HD inline void diff_element(DiffPartial& s, DType t, float a, float b, int64_t index, double rtol, double atol) {
  ++s.count;
  const bool na = diff_isnan(a), ia = diff_isinf(a), nb = diff_isnan(b), ib = diff_isinf(b);
  s.nan_a += na;
  s.inf_a += ia;
  s.nan_b += nb;
  s.inf_b += ib;
  s.raw_differ += f32_bits(a) != f32_bits(b);
  const float fb = diff_fabs(b);
  s.outside += !(static_cast<double>(diff_fabs(diff_fsub(a, b))) <= diff_add(atol, diff_mul(rtol, fb)));
  if (na || ia || nb || ib) {
    // equal infinities (LSE -inf of a fully masked row on both sides) agree exactly
    if (ia && ib && (a > 0) == (b > 0)) {
      ++s.bit_identical;
    } else {
      ++s.nonfinite_mismatch;
      ++s.loose_fail;
      ++s.tight_fail;
    }
    return;
  }
  const double e = diff_dabs(diff_add(static_cast<double>(a), -static_cast<double>(b)));
  if (s.worst_index < 0 || e > s.max_abs) {
    s.max_abs = e;
    s.worst_index = index;
  }
  s.sum_abs = diff_add(s.sum_abs, e);
  s.sum_sq_err = diff_add(s.sum_sq_err, diff_mul(e, e));
  s.sum_sq_ref = diff_add(s.sum_sq_ref, diff_mul(b, b));
  s.loose_fail += e > diff_add(1e-3, diff_mul(1e-2, fb));
  s.tight_fail += e > diff_add(1e-4, diff_mul(1e-3, fb));
  // diff_ulp of a finite pair, each side's dtype bits made once
  const uint32_t ta = dtype_bits(t, a), tb = dtype_bits(t, b);
  s.bit_identical += ta == tb;
  const int64_t d = diff_ordered_bits(t, ta) - diff_ordered_bits(t, tb);
  const uint64_t u = static_cast<uint64_t>(d < 0 ? -d : d);
  if (u > s.max_ulp) s.max_ulp = u;
}

// d = d then s: sums added (d's first), counts added, maxima kept (the lower index on a tie).
AS_HD inline void merge_partial(DiffPartial& d, const DiffPartial& s) {
  d.sum_abs = diff_add(d.sum_abs, s.sum_abs);
  d.sum_sq_err = diff_add(d.sum_sq_err, s.sum_sq_err);
  d.sum_sq_ref = diff_add(d.sum_sq_ref, s.sum_sq_ref);
  if (s.worst_index >= 0 &&
      (d.worst_index < 0 || s.max_abs > d.max_abs || (s.max_abs == d.max_abs && s.worst_index < d.worst_index))) {
    d.max_abs = s.max_abs;
    d.worst_index = s.worst_index;
  }
  if (s.max_ulp > d.max_ulp) d.max_ulp = s.max_ulp;
  d.count += s.count;
  d.bit_identical += s.bit_identical;
  d.nan_a += s.nan_a;
  d.inf_a += s.inf_a;
  d.nan_b += s.nan_b;
  d.inf_b += s.inf_b;
  d.nonfinite_mismatch += s.nonfinite_mismatch;
  d.loose_fail += s.loose_fail;
  d.tight_fail += s.tight_fail;
  d.outside += s.outside;
  d.raw_differ += s.raw_differ;
}

// The lanes of one chunk folded into lanes[0], as a warp's shuffle-down reduction pairs them.
AS_HD inline void fold_lanes(DiffPartial* lanes) {
  for (int off = kDiffLanes / 2; off > 0; off /= 2)
    for (int l = 0; l < off; ++l) merge_partial(lanes[l], lanes[l + off]);
}

// One (token, head) row's error-map cell: max |a - b| in float over its elements, +inf where a
// difference is NaN. Order-free (a maximum), so host and device may visit the elements in any order.
AS_HD inline float error_cell(float worst, float a, float b) {
  const float e = diff_fabs(diff_fsub(a, b));
  if (diff_isnan(e) || diff_isinf(worst)) return bits_f32(0x7f800000u);
  return e > worst ? e : worst;
}

}  // namespace attnscope
