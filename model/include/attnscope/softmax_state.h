// Online-softmax state of one query row and the merge of two partial states, in base 2 (logits
// pre-multiplied by log2(e), exp2 used), as FlashInfer keeps them. LSE is converted to natural log
// only when a backend writes its result.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "attnscope/types.h"

namespace attnscope {

// exp2 and log2 with the same bits on host and device, for the merges that promise them (partition.h):
// exp2f / log2f differ there (glibc's are within about 0.5 ulp, CUDA's within 2 and 1 ulp), so these
// are written out in double arithmetic (explicit fma, no library call, no contractible a * b + c) and
// rounded to float once; within 1 ulp of the exact value.
AS_HD inline float exp2_portable(float x) {
  if (x != x) return x;
  if (x >= 128.f) return INFINITY;
  if (x < -151.f) return 0.f;  // below half the smallest subnormal (and -inf)
  const double k = floor(static_cast<double>(x) + 0.5);
  const double r = static_cast<double>(x) - k;  // exact, |r| <= 0.5
  // 2^r = sum (ln 2)^n / n! r^n, n <= 11: the next term is below 1e-15 of the sum
  double p = 0x1.e8cac7351bb25p-32;
  p = fma(p, r, 0x1.e4cf5158b8ecap-28);
  p = fma(p, r, 0x1.b5253d395e7c4p-24);
  p = fma(p, r, 0x1.62c0223a5c824p-20);
  p = fma(p, r, 0x1.ffcbfc588b0c7p-17);
  p = fma(p, r, 0x1.430912f86c787p-13);
  p = fma(p, r, 0x1.5d87fe78a6731p-10);
  p = fma(p, r, 0x1.3b2ab6fba4e77p-7);
  p = fma(p, r, 0x1.c6b08d704a0c0p-5);
  p = fma(p, r, 0x1.ebfbdff82c58fp-3);
  p = fma(p, r, 0x1.62e42fefa39efp-1);
  p = fma(p, r, 1.0);
  const double scale = bits_f64(static_cast<uint64_t>(static_cast<int64_t>(k) + 1023) << 52);  // 2^k, exact
  return static_cast<float>(p * scale);  // one rounding (to a subnormal where the value is one)
}
AS_HD inline float log2_portable(float x) {
  if (x != x || x < 0.f) return x != x ? x : NAN;
  if (x == 0.f) return -INFINITY;
  if (x == INFINITY) return x;
  const uint64_t b = f64_bits(static_cast<double>(x));  // a float subnormal is a normal double
  int e = static_cast<int>((b >> 52) & 0x7ff) - 1023;
  double m = bits_f64((b & ((uint64_t{1} << 52) - 1)) | (uint64_t{1023} << 52));  // [1, 2)
  // m over sqrt(2) halved: m in [sqrt(1/2), sqrt(2)], where the series below converges fastest
  if (m > 0x1.6a09e667f3bcdp+0) {
    m *= 0.5;
    ++e;
  }
  // ln m = 2 atanh(t) = 2 t sum t^2k / (2k + 1), t = (m - 1) / (m + 1), |t| <= 0.172: k <= 10
  const double t = (m - 1.0) / (m + 1.0);
  const double t2 = t * t;
  double s = 0x1.8618618618618p-5;
  s = fma(s, t2, 0x1.af286bca1af28p-5);
  s = fma(s, t2, 0x1.e1e1e1e1e1e1ep-5);
  s = fma(s, t2, 0x1.1111111111111p-4);
  s = fma(s, t2, 0x1.3b13b13b13b14p-4);
  s = fma(s, t2, 0x1.745d1745d1746p-4);
  s = fma(s, t2, 0x1.c71c71c71c71cp-4);
  s = fma(s, t2, 0x1.2492492492492p-3);
  s = fma(s, t2, 0x1.999999999999ap-3);
  s = fma(s, t2, 0x1.5555555555555p-2);
  s = fma(s, t2, 1.0);
  const double ln_m = (2.0 * t) * s;
  return static_cast<float>(fma(ln_m, 0x1.71547652b82fep+0, static_cast<double>(e)));  // e + ln m / ln 2
}

// Weights to merge partial states a and b, each given by its LSE (base 2) and its normalised
// output: o = wa * o_a + wb * o_b, lse = *lse_out.
// Both empty (-inf, -inf): max is -inf and lse - max would be NaN, so that case is caught first and
// gives weights 0 and lse -inf: the merged row stays "fully masked" (O = 0, LSE = -inf).
// kPortable: exp2_portable / log2_portable, the same bits on host and device (the partition merges);
// otherwise exp2f / log2f, as the kernels and cpu.tiled have always merged their splits.
template <bool kPortable = false>
AS_HD inline void merge_weights(float lse_a, float lse_b, float* wa, float* wb, float* lse_out) {
  const float m = lse_a > lse_b ? lse_a : lse_b;
  if (m == -INFINITY) {
    *wa = 0.f;
    *wb = 0.f;
    *lse_out = -INFINITY;
    return;
  }
  const float ea = kPortable ? exp2_portable(lse_a - m) : exp2f(lse_a - m);  // exp2(-inf) = 0 for an empty side
  const float eb = kPortable ? exp2_portable(lse_b - m) : exp2f(lse_b - m);
  const float s = ea + eb;  // >= 1: the larger side contributes exp2(0)
  *wa = ea / s;
  *wb = eb / s;
  *lse_out = m + (kPortable ? log2_portable(s) : log2f(s));
}

// Converts a base-2 LSE to the natural log (FlashAttention, vLLM, PyTorch convention).
AS_HD inline float lse2_to_e(float lse2) { return lse2 == -INFINITY ? -INFINITY : lse2 * static_cast<float>(kLn2); }

}  // namespace attnscope
