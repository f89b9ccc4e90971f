// Scalar types shared by host and device: dtypes, KV layouts, and exact fp16/bf16 rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#if defined(__CUDACC__)
#define AS_HD __host__ __device__
#else
#define AS_HD
#endif

namespace attnscope {

enum class DType { kFp32, kFp16, kBf16 };
enum class KvLayout { kNHD, kHND };  // NHD: [pages, page_size, heads, dim]; HND: [pages, heads, page_size, dim]

const char* dtype_name(DType t);
const char* layout_name(KvLayout l);
inline int dtype_bytes(DType t) { return t == DType::kFp32 ? 4 : 2; }

// Bit casts usable on host and device (memcpy is the portable, UB-free spelling; nvcc folds it).
AS_HD inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
AS_HD inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// float -> IEEE binary16, round to nearest even, with subnormals, overflow to inf and NaN kept.
// Written with integer operations only so host and device give the same bits.
AS_HD inline uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);  // rounds to zero (below half the smallest subnormal)
    mant |= 0x800000u;
    const int shift = 14 - e;  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;  // may carry into the smallest normal: correct
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is correct, up to inf
  return static_cast<uint16_t>(sign | h);
}

AS_HD inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // subnormal: value = mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

// float -> bfloat16, round to nearest even; NaN stays a quiet NaN.
AS_HD inline uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}
AS_HD inline float bf16_bits_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

// Rounds a float to the nearest value representable in `t` (identity for fp32).
AS_HD inline float round_to(DType t, float x) {
  switch (t) {
    case DType::kFp16:
      return f16_bits_to_f32(f32_to_f16_bits(x));
    case DType::kBf16:
      return bf16_bits_to_f32(f32_to_bf16_bits(x));
    default:
      return x;
  }
}

// Bits of x in dtype t, as an unsigned integer (for ULP distances and bitwise comparisons).
AS_HD inline uint32_t dtype_bits(DType t, float x) {
  switch (t) {
    case DType::kFp16:
      return f32_to_f16_bits(x);
    case DType::kBf16:
      return f32_to_bf16_bits(x);
    default:
      return f32_bits(x);
  }
}

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLog2e = 1.44269504088896340736;

}  // namespace attnscope
