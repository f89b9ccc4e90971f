// cuda.flash on FP8 KV caches (FlashMode::kPlainFp8: the FP8 bytes copied into shared memory and
// converted to the dtype there; the K scale folded into the logit scale, the V scale applied to O at
// the end): against cpu.reference (the dequantised ideal) within FlashAttention's 2x rule with cpu.lowp
// as the baseline, and against its CPU twin cpu.tiled, on random cases across formats, granularities,
// page sizes, GQA ratios, head dims, poisoned pages, fully masked rows and split-KV on and off. Skips
// with the reason without CUDA or a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "case_gen.h"
#include "case_json.h"
#include "gpu_test_util.h"

using namespace attnscope;
using attnscope::testing::gpu_cases;
using attnscope::testing::random_case;
using attnscope::testing::run_id;
using attnscope::testing::set_head_dim;

namespace {

// Gives a case an FP8 cache the FP8 kernel takes: format and granularity from the seed, the plain
// logit, a head dim of 64 / 128 / 256, pages of 1, 16 or 5 slots (ragged stays ragged), split-KV
// on (the planners) or off.
CaseSpec fp8_case(CaseSpec c, uint64_t seed) {
  const int dims[] = {64, 128, 256};
  set_head_dim(c, dims[seed % 3]);
  if (c.dtype == DType::kFp32) c.dtype = seed % 2 ? DType::kFp16 : DType::kBf16;
  c.attention.soft_cap.reset();
  c.attention.alibi = false;
  c.data.outlier_channels.clear();
  c.kv_cache.fp8 = (seed / 3) % 2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
  c.kv_cache.scales.granularity = (seed / 2) % 2 ? ScaleGranularity::kHead : ScaleGranularity::kTensor;
  if (c.kv_cache.storage == KvStorage::kPaged) {
    const int pages[] = {1, 16, 5};
    c.kv_cache.page_size = pages[(seed / 5) % 3];
    c.kv_cache.poison_unused = seed % 4 != 0;
    if (c.attention.local_chunk) c.attention.local_chunk = c.kv_cache.page_size * 8;  // a whole number of pages
  }
  if (seed % 5 == 0) {
    c.split = SplitSpec{};
    c.split.planner = Planner::kOff;
  }
  if (c.split.planner == Planner::kFixed && !c.split.fixed_split_size) c.split.fixed_split_size = 16;
  validate_case(c);
  return c;
}

// cpu.tiled's tolerance against cuda.flash (tests/gpu/test_flash_sm90.cpp's twin_atol): a flip of
// one P's dtype rounding moves O by an ulp of P at 1 times |V|, |V| here the dequantised values.
double twin_atol(const CaseSpec& c, const Workload& w) {
  float vmax = 0.f, smax = 0.f;
  for (float v : w.v_pool)
    if (std::isfinite(v)) vmax = std::max(vmax, std::fabs(v));
  for (float s : w.v_scale) smax = std::max(smax, s);
  return 2e-3 + 2.0 * std::ldexp(1.0, c.dtype == DType::kFp16 ? -11 : -8) * vmax * smax;
}

// One case: the FP8 kernel ran (its name), no NaN, the 2x rule against cpu.reference, cpu.tiled's
// tolerance. Returns whether the plan split the KV.
bool check_fp8_case(const CaseSpec& c) {
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result f = run_id("cuda.flash", c, p, w);
  EXPECT_TRUE(f.ok()) << c.name << ": " << f.message;
  if (!f.ok()) return false;
  EXPECT_NE(f.message.find(std::string(fp8_name(*c.kv_cache.fp8)) + " K / V"), std::string::npos) << c.name << ": " << f.message;
  for (float x : f.o) EXPECT_FALSE(std::isnan(x)) << c.name << ": cuda.flash wrote NaN (or left a poisoned element)";
  const Result ref = run_id("cpu.reference", c, p, w), lowp = run_id("cpu.lowp", c, p, w), t = run_id("cpu.tiled", c, p, w);
  EXPECT_TRUE(ref.ok() && lowp.ok() && t.ok()) << ref.message << " / " << lowp.message << " / " << t.message;
  // 1e-5 floor: FlashAttention's rounding allowance, as the bf16 tests
  const DiffReport dr =
      compare_results(c, f, ref, {"cuda.flash", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  EXPECT_TRUE(dr.verdict.pass) << c.name << ": " << dr.verdict.detail;
  const DiffReport dt =
      compare_results(c, f, t, {"cuda.flash", "cpu.tiled", CompareRule::kAllclose, 1.6e-2, twin_atol(c, w), ""}, nullptr);
  EXPECT_TRUE(dt.verdict.pass) << c.name << ": " << dt.verdict.detail;
  EXPECT_LT(dt.lse.max_abs, 1e-3) << c.name;
  return p.split.split_kv;
}

}  // namespace

TEST(FlashFp8, RandomCasesPassTheTwiceLowpRuleAndMatchTheCpuTwin) {
  REQUIRE_GPU();
  int split = 0, unsplit = 0;
  for (uint64_t seed = 700; seed < 700 + static_cast<uint64_t>(gpu_cases(48, 3)); ++seed) {
    const CaseSpec c = fp8_case(random_case(seed, {4, 64, 300, false}), seed);
    SCOPED_TRACE(c.name);
    (check_fp8_case(c) ? split : unsplit)++;
  }
  EXPECT_GT(split, 0);
  EXPECT_GT(unsplit, 0);
}

// A decode batch as the benchmark's, smaller: 16-row tiles on the key-split warp layout, split-KV.
TEST(FlashFp8, DecodeBatchesPassTheTwiceLowpRule) {
  REQUIRE_GPU();
  for (uint64_t seed = 0; seed < 4; ++seed) {
    CaseSpec c;
    c.name = "fp8-decode-" + std::to_string(seed);
    c.num_qo_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim_qk = c.head_dim_vo = 128;
    c.dtype = seed % 2 ? DType::kFp16 : DType::kBf16;
    c.kv_cache.page_size = 16;
    c.kv_cache.allocation = PageAlloc::kShuffled;
    c.kv_cache.poison_unused = true;
    c.kv_cache.fp8 = seed / 2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
    c.kv_cache.scales.granularity = seed % 3 ? ScaleGranularity::kHead : ScaleGranularity::kTensor;
    c.attention.causal = true;
    for (int r = 0; r < 6; ++r) c.requests.push_back(RequestSpec{1, 700 + 111 * r});
    c.split.planner = Planner::kFlashInfer;
    c.split.num_sms = 132;
    c.data.seed = 40 + seed;
    validate_case(c);
    SCOPED_TRACE(c.name);
    check_fp8_case(c);
  }
}

TEST(FlashFp8, FullyMaskedRowsGiveZeroAndMinusInf) {
  REQUIRE_GPU();
  CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/fully-masked-rows.json").spec;
  c.kv_cache.fp8 = Fp8Format::kE4M3;
  c.kv_cache.poison_unused = true;
  validate_case(c);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result g = run_id("cuda.flash", c, p, w), cpu = run_id("cpu.reference", c, p, w);
  ASSERT_TRUE(g.ok()) << g.message;
  int64_t masked = 0;
  for (size_t i = 0; i < g.lse.size(); ++i) {
    ASSERT_EQ(std::isinf(g.lse[i]), std::isinf(cpu.lse[i])) << "row " << i;
    if (!std::isinf(g.lse[i])) continue;
    ++masked;
    for (int d = 0; d < c.head_dim_vo; ++d) ASSERT_EQ(g.o[i * c.head_dim_vo + d], 0.0f) << "row " << i;
  }
  EXPECT_GT(masked, 0);
  check_fp8_case(c);
}

// What the FP8 kernel does not take is refused with the reason; cuda.flash_padded takes no FP8 cache.
TEST(FlashFp8, UnsupportedFp8ConfigurationsAreRefusedWithAReason) {
  REQUIRE_GPU();
  CaseSpec c = fp8_case(random_case(11, {2, 8, 100, false}), 11);
  auto flash = make_backend("cuda.flash");
  EXPECT_EQ(flash->check(c), "");
  CaseSpec capped = c;
  capped.attention.soft_cap = 30.0;
  EXPECT_NE(flash->check(capped).find("plain logit"), std::string::npos);
  CaseSpec d96 = c;
  set_head_dim(d96, 96);
  EXPECT_NE(flash->check(d96).find("head_dim 96"), std::string::npos);
  CaseSpec padded = c;
  set_head_dim(padded, 32);
  padded.pad_head_dim_to = 64;
  EXPECT_NE(make_backend("cuda.flash_padded")->check(padded).find("FP8"), std::string::npos);
  CaseSpec token = c;
  token.kv_cache.scales.granularity = ScaleGranularity::kToken;
  validate_case(token);
  const Plan p = make_plan(token);
  const Result r = run_id("cuda.flash", token, p, Workload{});
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message.find("tensor, head"), std::string::npos) << r.message;
}
