// fp16 / bf16 rounding: exact round-to-nearest-even against the compiler's own conversions and
// a brute-force nearest-value search.
#include <gtest/gtest.h>

#include <cmath>

#include "attnscope/rng.h"
#include "attnscope/types.h"

using namespace attnscope;

TEST(Types, HalfRoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_bits_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16_bits(f), h) << "bits " << h;
  }
}

TEST(Types, HalfMatchesCompilerConversion) {
  SplitMix64 g(42);
  for (int i = 0; i < 2000000; ++i) {
    // random bit patterns cover normals, subnormals, ties, overflow
    const uint32_t u = static_cast<uint32_t>(g.next());
    const float f = bits_f32(u);
    if (std::isnan(f)) continue;
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t rb;
    memcpy(&rb, &ref, 2);
    ASSERT_EQ(f32_to_f16_bits(f), rb) << "float bits " << std::hex << u;
    ASSERT_EQ(f16_bits_to_f32(rb), static_cast<float>(ref));
  }
}

TEST(Types, Bf16IsNearestEven) {
  SplitMix64 g(7);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t u = static_cast<uint32_t>(g.next());
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact ties
    const float f = bits_f32(u);
    if (!std::isfinite(f) || std::fabs(f) > 3.3e38f) continue;
    const uint16_t b = f32_to_bf16_bits(f);
    const float v = bf16_bits_to_f32(b);
    const float lo = bf16_bits_to_f32(static_cast<uint16_t>(u >> 16));
    const float hi = bf16_bits_to_f32(static_cast<uint16_t>((u >> 16) + 1));
    const double dlo = std::fabs(static_cast<double>(f) - lo), dhi = std::fabs(static_cast<double>(f) - hi);
    const float want = dlo < dhi ? lo : dhi < dlo ? hi : (((u >> 16) & 1) ? hi : lo);
    ASSERT_EQ(v, want) << std::hex << u;
  }
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(NAN))));
  EXPECT_EQ(round_to(DType::kBf16, 1.0f), 1.0f);
  EXPECT_EQ(round_to(DType::kFp32, 0.1f), 0.1f);
}
