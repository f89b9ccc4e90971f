// Comparison statistics and verdicts on hand-made results.
#include <gtest/gtest.h>

#include <cmath>

#include "attnscope/compare.h"

using namespace attnscope;

namespace {

CaseSpec tiny() {
  CaseSpec c;
  c.requests = {{2, 2}};
  c.num_qo_heads = c.num_kv_heads = 1;
  c.head_dim_qk = c.head_dim_vo = 2;
  c.dtype = DType::kBf16;
  return c;
}

Result make(const std::string& id, std::vector<float> o, std::vector<float> lse) {
  Result r;
  r.backend = id;
  r.o = std::move(o);
  r.lse = std::move(lse);
  return r;
}

}  // namespace

TEST(Compare, UlpDistance) {
  EXPECT_EQ(ulp_distance(DType::kBf16, 1.0f, 1.0f), 0u);
  EXPECT_EQ(ulp_distance(DType::kBf16, 1.0f, 1.0078125f), 1u);  // bf16 spacing at 1 is 2^-7
  EXPECT_EQ(ulp_distance(DType::kFp16, 1.0f, 1.0009765625f), 1u);
  EXPECT_EQ(ulp_distance(DType::kFp32, -0.0f, 0.0f), 0u);
}

TEST(Compare, StatisticsAndAllclose) {
  const CaseSpec c = tiny();
  const Result b = make("base", {1, 2, 3, 4}, {0.5f, 0.25f});
  const Result a = make("a", {1, 2.01f, 3, 4}, {0.5f, 0.25f});
  ComparisonSpec k{"a", "base", CompareRule::kAllclose, 1e-2, 1e-3, ""};
  const DiffReport d = compare_results(c, a, b, k, nullptr);
  EXPECT_NEAR(d.o.max_abs, 0.01, 1e-6);
  EXPECT_NEAR(d.o.mean_abs, 0.0025, 1e-6);
  EXPECT_EQ(d.o.bit_identical, 3);
  EXPECT_TRUE(d.o.allclose_loose);
  EXPECT_FALSE(d.o.allclose_tight);
  EXPECT_TRUE(d.verdict.pass);
  EXPECT_EQ(d.o.worst_index, 1);
  EXPECT_NEAR(d.error_map[0], 0.01, 1e-6);  // token 0, head 0 holds the error
  EXPECT_EQ(d.error_map[1], 0.0f);
  k.rtol = 1e-3;
  k.atol = 1e-4;
  EXPECT_FALSE(compare_results(c, a, b, k, nullptr).verdict.pass);
}

TEST(Compare, NanIsNeverClose) {
  const CaseSpec c = tiny();
  const Result b = make("base", {1, 2, 3, 4}, {0.5f, 0.25f});
  const Result a = make("a", {1, NAN, 3, 4}, {0.5f, 0.25f});
  ComparisonSpec k{"a", "base", CompareRule::kMaxAbs, 0, 1.0, ""};
  const DiffReport d = compare_results(c, a, b, k, nullptr);
  EXPECT_EQ(d.o.nan_a, 1);
  EXPECT_EQ(d.o.nonfinite_mismatch, 1);
  EXPECT_FALSE(d.verdict.pass);
  EXPECT_TRUE(std::isinf(d.error_map[0]));
}

TEST(Compare, MinusInfLseOnBothSidesAgrees) {
  const CaseSpec c = tiny();
  const Result b = make("base", {0, 0, 3, 4}, {-INFINITY, 0.25f});
  const Result a = make("a", {0, 0, 3, 4}, {-INFINITY, 0.25f});
  ComparisonSpec k{"a", "base", CompareRule::kBitwise, 0, 0, ""};
  EXPECT_TRUE(compare_results(c, a, b, k, nullptr).verdict.pass);
  const Result a2 = make("a", {0, 0, 3, 4}, {0.0f, 0.25f});
  EXPECT_FALSE(compare_results(c, a2, b, k, nullptr).verdict.pass);
}

TEST(Compare, TwiceLowpRule) {
  const CaseSpec c = tiny();
  const Result ref = make("ref", {1, 2, 3, 4}, {0, 0});
  const Result lowp = make("lowp", {1.01f, 2, 3, 4}, {0, 0});
  ComparisonSpec k{"a", "ref", CompareRule::kTwiceLowp, 0, 0, "lowp"};
  EXPECT_TRUE(compare_results(c, make("a", {1, 2.019f, 3, 4}, {0, 0}), ref, k, &lowp).verdict.pass);
  EXPECT_FALSE(compare_results(c, make("a", {1, 2.03f, 3, 4}, {0, 0}), ref, k, &lowp).verdict.pass);
  EXPECT_FALSE(compare_results(c, make("a", {1, 2, 3, 4}, {0, 0}), ref, k, nullptr).verdict.pass);  // no lowp result
}

TEST(Compare, SampledRowsAreTheOnlyOnesCompared) {
  const CaseSpec c = tiny();
  Result b = make("base", {1, 2, NAN, NAN}, {0.5f, NAN});
  b.row_valid = {1, 0};
  const Result a = make("a", {1, 2, 7, 7}, {0.5f, 1.0f});
  ComparisonSpec k{"a", "base", CompareRule::kBitwise, 0, 0, ""};
  const DiffReport d = compare_results(c, a, b, k, nullptr);
  EXPECT_TRUE(d.verdict.pass);
  EXPECT_TRUE(d.sampled);
  EXPECT_EQ(d.rows_compared, 1);
}

TEST(Compare, UnavailableBackendIsSkippedNotPassed) {
  const CaseSpec c = tiny();
  Result a;
  a.backend = "cuda.flash";
  a.status = Status::kNotCompiled;
  const Result b = make("base", {1, 2, 3, 4}, {0, 0});
  const DiffReport d = compare_results(c, a, b, ComparisonSpec{}, nullptr);
  EXPECT_FALSE(d.verdict.pass);
  EXPECT_TRUE(d.verdict.skipped);
  Result e = a;
  e.status = Status::kError;
  EXPECT_FALSE(compare_results(c, e, b, ComparisonSpec{}, nullptr).verdict.skipped);
}

TEST(Compare, DigestSeesEveryBit) {
  const Result a = make("a", {1, 2, 3, 4}, {0, 0});
  Result b = a;
  EXPECT_EQ(result_digest(a), result_digest(b));
  b.o[3] = std::nextafter(4.0f, 5.0f);
  EXPECT_NE(result_digest(a), result_digest(b));
}
