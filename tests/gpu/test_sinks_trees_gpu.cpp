// Attention sinks and speculative-decoding trees (docs/conventions.md section 12) on the cuda family:
// cuda.reference against cpu.reference (both fp64), cuda.naive and cuda.flash within the 2x rule against
// cuda.reference with cpu.lowp as the baseline, cuda.flash against its twin cpu.tiled; random seeded cases
// with windows, GQA, paged storage, split-KV on and off (the sink joins a row once: at the store or after
// the merge of its partials), fully masked rows (O = 0, LSE = the sink). Skips with the reason without
// CUDA or a device.
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

// A case cuda.flash takes (bf16 / fp16, a compiled head dim), with sinks (seeded, or given with some
// larger than any logit so the sink holds most of the mass) and, every other seed, split-KV forced off.
CaseSpec sink_case(CaseSpec c, uint64_t seed) {
  const int dims[] = {64, 128, 32, 256, 96};
  set_head_dim(c, dims[seed % 5]);
  if (c.dtype == DType::kFp32) c.dtype = DType::kBf16;
  c.data.outlier_channels.clear();
  c.attention.sinks = SinksSpec{};
  if (seed % 2) {
    for (int h = 0; h < c.num_qo_heads; ++h) c.attention.sinks->logits.push_back(-3.0 + 1.75 * ((seed + h) % 7));
  }
  if (seed % 4 == 0) {
    c.split = SplitSpec{};
    c.split.planner = Planner::kOff;
  } else if (seed % 4 == 1) {
    c.split.planner = Planner::kFixed;
    c.split.fixed_split_size = 8;  // pages per chunk: most requests split
  }
  validate_case(c);
  return c;
}

// Every request with q_len >= 2 gets a random tree over its new tokens (case_gen.h).
CaseSpec tree_case(CaseSpec c, uint64_t seed) { return attnscope::testing::with_random_trees(std::move(c), seed * 31 + 5); }

// The checks of one case: cuda.reference ~ cpu.reference, the 2x rule for cuda.naive and cuda.flash,
// cuda.flash ~ cpu.tiled. Returns whether the plan split the KV.
bool check_case(const CaseSpec& c) {
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result ref = run_id("cpu.reference", c, p, w), lowp = run_id("cpu.lowp", c, p, w), tiled = run_id("cpu.tiled", c, p, w);
  EXPECT_TRUE(ref.ok() && lowp.ok() && tiled.ok()) << ref.message << " / " << lowp.message << " / " << tiled.message;
  const Result gref = run_id("cuda.reference", c, p, w);
  EXPECT_TRUE(gref.ok()) << gref.message;
  if (!gref.ok() || !ref.ok()) return false;
  // both fp64 on the same inputs, stored as fp32 (Gpu.ReferenceAgreesWithTheCpuReference's bound)
  const DiffReport dr =
      compare_results(c, gref, ref, {"cuda.reference", "cpu.reference", CompareRule::kAllclose, 1e-6, 1e-6, ""}, nullptr);
  EXPECT_TRUE(dr.verdict.pass) << c.name << ": " << dr.verdict.detail;
  for (const char* id : {"cuda.naive", "cuda.flash"}) {
    const Result a = run_id(id, c, p, w);
    EXPECT_TRUE(a.ok()) << id << ": " << a.message;
    if (!a.ok()) continue;
    for (float x : a.o) EXPECT_FALSE(std::isnan(x)) << c.name << ": " << id << " wrote NaN";
    // 1e-5 floor: FlashAttention's rounding allowance, as every GPU test of the 2x rule
    const DiffReport d = compare_results(c, a, gref, {id, "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
    EXPECT_TRUE(d.verdict.pass) << c.name << " " << id << ": " << d.verdict.detail;
    if (std::string(id) == "cuda.flash") {
      // Gpu.FlashAgreesWithTheCpuTwin's bound: two bf16 ulps (MMA sum order, exp2f's last bits)
      const DiffReport t = compare_results(c, a, tiled, {id, "cpu.tiled", CompareRule::kAllclose, 1.6e-2, 2e-3, ""}, nullptr);
      EXPECT_TRUE(t.verdict.pass) << c.name << ": " << t.verdict.detail;
      EXPECT_LT(t.lse.max_abs, 1e-3) << c.name;
    }
  }
  return p.split.split_kv;
}

}  // namespace

// All 36 cases also under ATTNSCOPE_GPU_QUICK (compute-sanitizer): a sixth of them held no window.
TEST(SinksTreesGpu, SinksOnEveryCudaBackendWithAndWithoutSplitKv) {
  REQUIRE_GPU();
  int split = 0, unsplit = 0, windowed = 0;
  for (uint64_t seed = 900; seed < 900 + static_cast<uint64_t>(gpu_cases(36, 36)); ++seed) {
    const CaseSpec c = sink_case(random_case(seed, {4, 64, 300, false}), seed);
    SCOPED_TRACE(c.name + " head_dim " + std::to_string(c.head_dim_qk));
    (check_case(c) ? split : unsplit)++;
    windowed += c.attention.window.has_value();
  }
  EXPECT_GT(split, 0);
  EXPECT_GT(unsplit, 0);
  EXPECT_GT(windowed, 0);
}

// The sink changes the output: the same case without it differs (so the checks above cannot pass by
// ignoring it), and a sink far above every logit leaves O near 0.
TEST(SinksTreesGpu, TheSinkIsNotIgnored) {
  REQUIRE_GPU();
  CaseSpec c = sink_case(random_case(4242, {3, 32, 200, false}), 1);
  CaseSpec none = c;
  none.attention.sinks.reset();
  CaseSpec huge = c;
  huge.attention.sinks->logits.assign(c.num_qo_heads, 60.0);
  validate_case(none);
  validate_case(huge);
  const Plan p = make_plan(c), pn = make_plan(none), ph = make_plan(huge);
  const Workload w = make_workload(c, p.pages);
  const Result a = run_id("cuda.flash", c, p, w), b = run_id("cuda.flash", none, pn, w), h = run_id("cuda.flash", huge, ph, w);
  ASSERT_TRUE(a.ok() && b.ok() && h.ok()) << a.message << b.message << h.message;
  double diff = 0, big = 0;
  for (size_t i = 0; i < a.o.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(a.o[i] - b.o[i])));
  for (float x : h.o) big = std::max(big, static_cast<double>(std::fabs(x)));
  EXPECT_GT(diff, 1e-2);
  EXPECT_LT(big, 1e-6);  // e^(60 - logit) swamps every key: O is the keys' mass (< e^-40) times V
}

TEST(SinksTreesGpu, FullyMaskedRowsGiveZeroAndTheSink) {
  REQUIRE_GPU();
  CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/fully-masked-rows.json").spec;
  c.attention.sinks = SinksSpec{};
  c.kv_cache.poison_unused = c.kv_cache.storage == KvStorage::kPaged;
  validate_case(c);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const std::vector<float> sinks = sink_logits(c);
  const Result cpu = run_id("cpu.reference", c, p, w);
  ASSERT_TRUE(cpu.ok()) << cpu.message;
  for (const char* id : {"cuda.reference", "cuda.naive", "cuda.flash"}) {
    SCOPED_TRACE(id);
    const Result g = run_id(id, c, p, w);
    ASSERT_TRUE(g.ok()) << g.message;
    int64_t masked = 0;
    for (size_t row = 0; row < g.lse.size(); ++row) {
      const int h = static_cast<int>(row % c.num_qo_heads);
      bool zero = true;
      for (int d = 0; d < c.head_dim_vo; ++d) zero = zero && cpu.o[row * c.head_dim_vo + d] == 0.f;
      if (!zero || cpu.lse[row] != sinks[h]) continue;  // a row with visible keys
      ++masked;
      for (int d = 0; d < c.head_dim_vo; ++d) ASSERT_EQ(g.o[row * c.head_dim_vo + d], 0.0f) << "row " << row;
      // cuda.flash keeps the LSE in base 2: x log2(e) x ln(2) is within 2 fp32 ulps of x
      EXPECT_NEAR(g.lse[row], sinks[h], 4e-7 * std::max(1.f, std::fabs(sinks[h]))) << "row " << row;
    }
    EXPECT_GT(masked, 0);
  }
  check_case(c);
}

TEST(SinksTreesGpu, TreesOnEveryCudaBackend) {
  REQUIRE_GPU();
  int trees = 0;
  for (uint64_t seed = 950; seed < 950 + static_cast<uint64_t>(gpu_cases(24, 3)); ++seed) {
    CaseSpec c = tree_case(sink_case(random_case(seed, {4, 12, 300, false}), seed), seed);
    if (seed % 3) c.attention.sinks.reset();  // trees alone, and trees with sinks
    validate_case(c);
    SCOPED_TRACE(c.name + " head_dim " + std::to_string(c.head_dim_qk));
    trees += c.has_trees();
    check_case(c);
  }
  EXPECT_GT(trees, 0);
}

// A tree is not the causal chain: on the tree example, cuda.flash's output differs from the same case
// without tree_parents (every token then sees all earlier new tokens).
TEST(SinksTreesGpu, ATreeIsNotTheChain) {
  REQUIRE_GPU();
  CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/eagle-tree-verify.json").spec;
  ASSERT_TRUE(c.has_trees());
  CaseSpec chain = c;
  for (auto& r : chain.requests) r.tree_parents.clear();
  validate_case(chain);
  const Plan p = make_plan(c), pc = make_plan(chain);
  const Workload w = make_workload(c, p.pages);
  const Result a = run_id("cuda.flash", c, p, w), b = run_id("cuda.flash", chain, pc, w);
  ASSERT_TRUE(a.ok() && b.ok()) << a.message << b.message;
  double diff = 0;
  for (size_t i = 0; i < a.o.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(a.o[i] - b.o[i])));
  EXPECT_GT(diff, 1e-3);
  check_case(c);
}
