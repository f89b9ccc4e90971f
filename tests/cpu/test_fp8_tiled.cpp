// cpu.tiled on FP8 KV caches (docs/conventions.md section 10): the K scale folded into the logit scale,
// the V scale applied to O at the end, as cuda.flash does. Against cpu.reference (the dequantised
// ideal) within FlashAttention's 2x rule, cpu.lowp reading the same bytes as the baseline.
#include <gtest/gtest.h>

#include <cmath>

#include "attnscope/compare.h"
#include "attnscope/registry.h"
#include "case_gen.h"

using namespace attnscope;
using attnscope::testing::random_case;

namespace {

Result run(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w) {
  auto b = make_backend(id);
  return run_backend(*b, c, p, w, RunOptions{});
}

// A random case with an FP8 cache: the format and the granularity (tensor or head) from the seed,
// scales from the data or given.
CaseSpec fp8_case(uint64_t seed) {
  CaseSpec c = random_case(seed, {4, 40, 200, false});
  c.kv_cache.fp8 = seed % 2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
  c.kv_cache.scales.granularity = seed % 3 == 0 ? ScaleGranularity::kTensor : ScaleGranularity::kHead;
  if (seed % 4 == 1) {  // given scales: each head its own
    const int n = c.kv_cache.scales.granularity == ScaleGranularity::kTensor ? 1 : c.num_kv_heads;
    for (int h = 0; h < n; ++h) {
      c.kv_cache.scales.k.push_back(0.01 * (h + 1));
      c.kv_cache.scales.v.push_back(0.02 / (h + 1));
    }
  }
  validate_case(c);
  return c;
}

}  // namespace

// Random cases (every mask, storage, planner, soft-cap, ALiBi of the generator): the kernel error of
// cpu.tiled over the FP8 bytes is within the 2x rule. Fails where a scale is dropped or applied twice.
TEST(Fp8Tiled, RandomCasesPassTheTwiceLowpRule) {
  for (uint64_t seed = 900; seed < 940; ++seed) {
    const CaseSpec c = fp8_case(seed);
    SCOPED_TRACE(c.name);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    ASSERT_TRUE(w.has_scales());
    const Result t = run("cpu.tiled", c, p, w), r = run("cpu.reference", c, p, w), l = run("cpu.lowp", c, p, w);
    ASSERT_TRUE(t.ok() && r.ok() && l.ok()) << t.message << " / " << r.message << " / " << l.message;
    for (float x : t.o) ASSERT_FALSE(std::isnan(x)) << "cpu.tiled left a NaN";
    const DiffReport d =
        compare_results(c, t, r, {"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &l);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
    EXPECT_LT(d.lse.max_abs, 1e-3);
  }
}

// Per-head scales really are per head: the same stored bytes with head 1's scales swapped for head 0's
// change head 1's output and nothing of head 0's.
TEST(Fp8Tiled, PerHeadScalesApplyToTheirHeadOnly) {
  CaseSpec c = random_case(3, {2, 8, 100, false});
  c.num_kv_heads = 2;
  c.num_qo_heads = 4;
  c.attention.soft_cap.reset();
  c.kv_cache.fp8 = Fp8Format::kE4M3;
  c.kv_cache.scales.granularity = ScaleGranularity::kHead;
  c.kv_cache.scales.k = {0.01, 0.03};
  c.kv_cache.scales.v = {0.02, 0.05};
  validate_case(c);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  Workload w2 = w;
  w2.k_scale[1] = w.k_scale[0];
  w2.v_scale[1] = w.v_scale[0];
  const Result a = run("cpu.tiled", c, p, w), b = run("cpu.tiled", c, p, w2);
  ASSERT_TRUE(a.ok() && b.ok());
  const int D = c.head_dim_vo, Hq = c.num_qo_heads, G = c.group_size();
  int head0_diff = 0, head1_diff = 0;
  for (size_t i = 0; i < a.o.size(); ++i) {
    const int h = static_cast<int>((i / D) % Hq);
    const bool diff = a.o[i] != b.o[i];
    (h / G == 0 ? head0_diff : head1_diff) += diff;
  }
  EXPECT_EQ(head0_diff, 0);
  EXPECT_GT(head1_diff, 0);
}

// Per-token scales: refused, naming the granularities cpu.tiled takes.
TEST(Fp8Tiled, PerTokenScalesAreRefusedNamingWhatIsTaken) {
  CaseSpec c = random_case(5, {2, 8, 100, false});
  c.kv_cache.fp8 = Fp8Format::kE4M3;
  c.kv_cache.scales.granularity = ScaleGranularity::kToken;
  validate_case(c);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result t = run("cpu.tiled", c, p, w);
  EXPECT_FALSE(t.ok());
  EXPECT_NE(t.message.find("tensor, head"), std::string::npos) << t.message;
}
