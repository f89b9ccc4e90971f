// The counter-based generator of a case's values: element `index` of tensor `t` under a seed, written
// with exactly rounded integer and IEEE operations only, so the host and a GPU produce the same bits.
// Its own header so that mla.h builds on it without the Workload (workload.h builds on both).
#pragma once

#include <cstdint>

#include "attnscope/types.h"

#if defined(__CUDA_ARCH__)
#define AS_DMUL(a, b) __dmul_rn((a), (b))
#define AS_DADD(a, b) __dadd_rn((a), (b))
#define AS_FMUL(a, b) __fmul_rn((a), (b))
#else
// The host build uses -ffp-contract=off, so these are single, correctly rounded operations.
#define AS_DMUL(a, b) ((a) * (b))
#define AS_DADD(a, b) ((a) + (b))
#define AS_FMUL(a, b) ((a) * (b))
#endif

namespace attnscope {

// kIdx*: DeepSeek Sparse Attention's indexer inputs (sparse.h), streams of their own so that no other
// tensor's values change.
enum class TensorId : uint32_t { kQ = 1, kK = 2, kV = 3, kSink = 4, kWuk = 5, kWuv = 6, kIdxQ = 7, kIdxW = 8, kIdxK = 9 };

AS_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Approximately standard normal: the centred sum of four 24-bit uniforms (Irwin-Hall, bounded at
// about +-3.46 sd). The sum is an exact integer; its conversion and the one scaling multiply are
// correctly rounded on host and device alike, which makes the value bit-reproducible.
AS_HD inline float gen_standard(uint64_t seed, TensorId t, uint64_t index) {
  const uint64_t base = seed * 0x9e3779b97f4a7c15ull + (static_cast<uint64_t>(t) << 58);
  const uint64_t h1 = mix64(base + 2 * index + 1);
  const uint64_t h2 = mix64(base + 2 * index + 2 + 0x632be59bd9b4e019ull);
  const int64_t s = static_cast<int64_t>(h1 & 0xffffff) + static_cast<int64_t>((h1 >> 32) & 0xffffff) +
                    static_cast<int64_t>(h2 & 0xffffff) + static_cast<int64_t>((h2 >> 32) & 0xffffff);
  const int64_t v = 2 * s - 4 * (int64_t{0xffffff});  // symmetric about 0, |v| < 2^26
  // sd of v is 2^26 / sqrt(12); sqrt(12) / 2^26 = sqrt(3) / 2^25
  return AS_FMUL(static_cast<float>(v), 5.1619136e-08f);
}

// One input element: mean + std * z (times the outlier scale), rounded to the case dtype.
AS_HD inline float gen_value(uint64_t seed, TensorId t, uint64_t index, double mean, double std, double scale, DType dt) {
  const double z = static_cast<double>(gen_standard(seed, t, index));
  const double x = AS_DMUL(AS_DADD(mean, AS_DMUL(std, z)), scale);
  return round_to(dt, static_cast<float>(x));
}

}  // namespace attnscope
