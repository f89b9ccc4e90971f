// cuda.reference and cuda.naive on FP8 cases (docs/conventions.md section 10): random cases across
// scale granularities, formats, page sizes, GQA ratios, head dims 64 / 128 / 256, poisoned pages and
// fully masked rows, with FP8 attention on some. Skips without CUDA or a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "case_json.h"
#include "fp8_case_gen.h"
#include "gpu_test_util.h"

using namespace attnscope;
using attnscope::testing::force_fp8;
using attnscope::testing::GenLimits;
using attnscope::testing::gpu_cases;
using attnscope::testing::random_fp8_case;
using attnscope::testing::run_id;
using attnscope::testing::set_head_dim;

namespace {

// A sweep's case: the granularity, the format and the head dim cycle with the seed (every pair in 6
// seeds), the rest is random_fp8_case's.
CaseSpec sweep_case(uint64_t seed) {
  CaseSpec c = random_fp8_case(seed, GenLimits{4, 48, 260});
  const int dims[] = {64, 128, 256};
  set_head_dim(c, dims[(seed / 6) % 3]);
  for (int& ch : c.data.outlier_channels) ch %= c.head_dim_qk;
  force_fp8(c, (seed / 3) % 2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3, static_cast<ScaleGranularity>(seed % 3));
  return c;
}

int64_t masked_rows(const Result& r) {
  int64_t n = 0;
  for (float x : r.lse) n += std::isinf(x) && x < 0;
  return n;
}

void expect_finite(const Result& r) {
  int64_t nan = 0;
  for (float x : r.o) nan += std::isnan(x);
  for (float x : r.lse) nan += std::isnan(x);
  EXPECT_EQ(nan, 0) << r.backend << " wrote NaN (or left poisoned elements)";
}

}  // namespace

TEST(GpuFp8, ReferenceAgreesWithTheCpuReference) {
  REQUIRE_GPU();
  int covered[3][2] = {}, fp8_attn = 0, poisoned = 0, masked = 0;
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(gpu_cases(36, 6)); ++seed) {
    const CaseSpec c = sweep_case(seed);
    SCOPED_TRACE(c.name + " head_dim " + std::to_string(c.head_dim_qk));
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result g = run_id("cuda.reference", c, p, w), h = run_id("cpu.reference", c, p, w);
    ASSERT_TRUE(g.ok() && h.ok()) << g.message << h.message;
    expect_finite(g);
    // both fp64 over the same stored values and the same float scales, applied in the same order, then
    // stored as fp32: only the order of the sums differs (~1e-15 relative), so 1e-6 (a few fp32 ulps of
    // outputs of magnitude <= 4) holds with room; a scale applied wrongly moves outputs by far more.
    const DiffReport d =
        compare_results(c, g, h, {"cuda.reference", "cpu.reference", CompareRule::kAllclose, 1e-6, 1e-6, ""}, nullptr);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
    EXPECT_EQ(masked_rows(g), masked_rows(h));
    ++covered[static_cast<int>(c.kv_cache.scales.granularity)][*c.kv_cache.fp8 == Fp8Format::kE5M2];
    fp8_attn += c.fp8_attention.has_value();
    poisoned += c.kv_cache.poison_unused;
    masked += masked_rows(h) > 0;
  }
  for (auto& g : covered)
    for (int n : g) EXPECT_GT(n, 0) << "a granularity / format pair the sweep never drew";
  EXPECT_GT(fp8_attn, 0);
  EXPECT_GT(poisoned, 0);
  RecordProperty("cases_with_fully_masked_rows", masked);
}

TEST(GpuFp8, NaivePassesTheTwiceLowpRule) {
  REQUIRE_GPU();
  for (uint64_t seed = 100; seed < 100 + static_cast<uint64_t>(gpu_cases(36, 6)); ++seed) {
    const CaseSpec c = sweep_case(seed);
    SCOPED_TRACE(c.name + " head_dim " + std::to_string(c.head_dim_qk));
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result a = run_id("cuda.naive", c, p, w), ref = run_id("cpu.reference", c, p, w), lowp = run_id("cpu.lowp", c, p, w);
    ASSERT_TRUE(a.ok() && ref.ok() && lowp.ok()) << a.message << ref.message << lowp.message;
    expect_finite(a);
    // the kernel error (against the dequantised ideal) within twice cpu.lowp's, which reads the same
    // bytes; 1e-5: FlashAttention's rounding floor, as in test_gpu.cpp
    const DiffReport d =
        compare_results(c, a, ref, {"cuda.naive", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
  }
}

// The fully-masked-rows example with an FP8 cache (per-token scales, poisoned pages): O = 0 and
// LSE = -inf exactly where cpu.reference has them, no NaN from the unused slots' NaN scales.
TEST(GpuFp8, FullyMaskedRowsWithPoisonedTokenScales) {
  REQUIRE_GPU();
  CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/fully-masked-rows.json").spec;
  if (c.dtype == DType::kFp32) c.dtype = DType::kBf16;
  c.kv_cache.poison_unused = c.kv_cache.storage == KvStorage::kPaged;
  c.kv_cache.scales = KvScalesSpec{};
  force_fp8(c, Fp8Format::kE4M3, ScaleGranularity::kToken);
  c.fp8_attention = Fp8AttentionSpec{};
  validate_case(c);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result cpu = run_id("cpu.reference", c, p, w);
  ASSERT_GT(masked_rows(cpu), 0);
  for (const char* id : {"cuda.naive", "cuda.reference"}) {
    const Result g = run_id(id, c, p, w);
    ASSERT_TRUE(g.ok()) << g.message;
    expect_finite(g);
    for (size_t i = 0; i < g.lse.size(); ++i) {
      ASSERT_EQ(std::isinf(g.lse[i]), std::isinf(cpu.lse[i])) << id << " row " << i;
      if (!std::isinf(g.lse[i])) continue;
      for (int d = 0; d < c.head_dim_vo; ++d) ASSERT_EQ(g.o[i * c.head_dim_vo + d], 0.0f) << id;
    }
  }
}
