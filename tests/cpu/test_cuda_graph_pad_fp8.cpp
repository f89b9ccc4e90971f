// The padded-row expectation of a FlashInfer CUDA-graph replay for an entry that reads one key with a
// zero query row (cuda_graph_pad.h pad_one_key_row): an FP8 cache's stored value dequantised without
// scale, the wrapper's `out *= v_scale` rounded to the dtype, the sink's weight 1 / (1 + e^sink), GQA's
// head mapping. Values worked by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "attnscope/cuda_graph_pad.h"

using namespace attnscope;

namespace {

// kv heads [2 x d 2]: head 0 = (1.125, -3.5), head 1 = (0.4375, 2): e4m3 values (0x39 = 1.125)
std::vector<float> v_key() { return {fp8_bits_to_f32(Fp8Format::kE4M3, 0x39), -3.5f, 0.4375f, 2.0f}; }

}  // namespace

TEST(CudaGraphPadFp8, OneKeyRowIsTheDequantisedValueTimesVScaleRoundedToTheDtype) {
  ASSERT_EQ(v_key()[0], 1.125f);
  // 1.125 * 1.1 = 1.2375 lies between the bf16 neighbours 1.234375 and 1.2421875: nearer the first
  const std::vector<float> o = pad_one_key_row(v_key(), 4, 2, 2, DType::kBf16, {}, 1.1f);
  ASSERT_EQ(o.size(), 8u);
  EXPECT_EQ(o[0], 1.234375f);
  EXPECT_NE(o[0], v_key()[0]) << "the unscaled stored value is not what the wrapper leaves in O";
  EXPECT_EQ(o[2], o[0]) << "q heads 0 and 1 share kv head 0";
  EXPECT_EQ(o[4], round_to(DType::kBf16, 0.4375f * 1.1f));
  EXPECT_EQ(o[6], o[4]) << "q heads 2 and 3 share kv head 1";
  // v_scale 3: exact products
  const std::vector<float> t = pad_one_key_row(v_key(), 4, 2, 2, DType::kBf16, {}, 3.f);
  EXPECT_EQ(t[0], 3.375f);
  EXPECT_EQ(t[1], -10.5f);
  EXPECT_EQ(t[7], 6.f);
  // no FP8 (v_scale 1): the key's V itself
  EXPECT_EQ(pad_one_key_row(v_key(), 2, 2, 2, DType::kFp16, {}, 1.f), v_key());
}

TEST(CudaGraphPadFp8, TheSinkWeighsTheOneKey) {
  // the key's logit is 0 (zero query row): weight 1 / (1 + e^sink); sink 0 -> 1/2, ln 3 -> 1/4
  const std::vector<float> sinks = {0.f, 0.f, std::log(3.f), std::log(3.f)};
  const std::vector<float> o = pad_one_key_row(v_key(), 4, 2, 2, DType::kBf16, sinks, 1.f);
  EXPECT_EQ(o[0], 0.5625f);
  EXPECT_EQ(o[1], -1.75f);
  EXPECT_NEAR(o[4], 0.109375f, pad_row_tolerance(DType::kBf16, 0.109375f));
  EXPECT_NEAR(o[5], 0.5f, pad_row_tolerance(DType::kBf16, 0.5f));
  // with v_scale 2 on top: twice the weighted value
  const std::vector<float> s2 = pad_one_key_row(v_key(), 4, 2, 2, DType::kBf16, sinks, 2.f);
  EXPECT_EQ(s2[0], 1.125f);
}

TEST(CudaGraphPadFp8, ToleranceIsTwoUnitsInTheLastPlace) {
  EXPECT_EQ(pad_row_tolerance(DType::kBf16, 1.f), std::ldexp(1.f, -6) + 1e-30f);
  EXPECT_EQ(pad_row_tolerance(DType::kFp16, -2.f), std::ldexp(1.f, -8) + 1e-30f);
  EXPECT_LT(pad_row_tolerance(DType::kBf16, 1.f), 1.f / 32) << "an unweighted V (weight 1 for 1/2) must not pass";
}
