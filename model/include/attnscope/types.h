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
AS_HD inline uint64_t f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}
AS_HD inline double bits_f64(uint64_t u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
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

// FP8 storage formats of a KV cache (docs/conventions.md section 10): e4m3 is OCP's E4M3FN (no
// infinities, one NaN pattern, max 448), e5m2 is IEEE-like (infinities, max 57344).
enum class Fp8Format { kE4M3, kE5M2 };
const char* fp8_name(Fp8Format f);  // "fp8_e4m3" / "fp8_e5m2", as the case format spells them
AS_HD inline float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

// float -> FP8 bits, round to nearest even, saturating: a finite value (or an infinity) beyond the
// format's largest finite value becomes that value, as the engines' quantisers do (NVIDIA's
// __NV_SATFINITE). NaN stays NaN (0x7f with the sign). Integer operations only: host and device agree.
AS_HD inline uint8_t f32_to_fp8_bits(Fp8Format f, float x) {
  const int mbits = f == Fp8Format::kE4M3 ? 3 : 2;
  const int bias = f == Fp8Format::kE4M3 ? 7 : 15;
  const uint32_t max_bits = f == Fp8Format::kE4M3 ? 0x7eu : 0x7bu;
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (a == 0x7f800000u) return static_cast<uint8_t>(sign | max_bits);
  const int e = static_cast<int>(a >> 23) - 127;
  if ((a >> 23) == 0) return static_cast<uint8_t>(sign);  // float subnormals are far below FP8's range
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;      // 24 significant bits
  // The FP8 quantum at this magnitude is 2^(max(e, 1 - bias) - mbits); count = |x| / quantum.
  const int qexp = (e < 1 - bias ? 1 - bias : e) - mbits;
  const int shift = 23 - (e - qexp);                  // count = mant >> shift, plus rounding
  if (shift > 25) return static_cast<uint8_t>(sign);  // below half the smallest subnormal
  uint32_t count = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (count & 1u))) ++count;
  // count * 2^qexp: subnormal (qexp == 1 - bias - mbits) bits are the count itself; a normal's bits are
  // (exponent field << mbits) + mantissa = (qexp + mbits + bias - 1) << mbits + count (count in [2^mbits, 2^(mbits+1)]).
  uint32_t bits = e < 1 - bias ? count : (static_cast<uint32_t>(qexp + mbits + bias - 1) << mbits) + count;
  if (bits > max_bits) bits = max_bits;
  return static_cast<uint8_t>(sign | bits);
}

AS_HD inline float fp8_bits_to_f32(Fp8Format f, uint8_t b) {
  const int mbits = f == Fp8Format::kE4M3 ? 3 : 2;
  const int bias = f == Fp8Format::kE4M3 ? 7 : 15;
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b & 0x7fu) >> mbits;
  const uint32_t mant = b & ((1u << mbits) - 1u);
  if (f == Fp8Format::kE4M3 && (b & 0x7fu) == 0x7fu) return bits_f32(sign | 0x7fc00000u);
  if (f == Fp8Format::kE5M2 && exp == 31u) return bits_f32(sign | (mant ? 0x7fc00000u : 0x7f800000u));
  if (exp == 0) {  // subnormal: mant * 2^(1 - bias - mbits), exact in float
    const float v = static_cast<float>(mant) * bits_f32(static_cast<uint32_t>(127 + 1 - bias - mbits) << 23);
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp - bias + 127) << 23) | (mant << (23 - mbits)));
}

// The value x / scale stored as FP8 (the engines' quantiser: one fp32 division, then the conversion).
AS_HD inline uint8_t quantize_fp8(Fp8Format f, float x, float scale) { return f32_to_fp8_bits(f, x / scale); }

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLog2e = 1.44269504088896340736;

}  // namespace attnscope
