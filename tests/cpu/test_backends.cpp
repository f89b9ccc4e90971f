// CPU backends against each other on fresh seeded random cases (outputs poisoned before every run
// by the backends themselves: an unwritten element stays NaN and fails the comparison).
#include <gtest/gtest.h>

#include <cmath>

#include "attnscope/compare.h"
#include "attnscope/registry.h"
#include "bench.h"
#include "case_gen.h"

using namespace attnscope;
using attnscope::testing::random_case;

namespace {

Result run(const std::string& id, const CaseSpec& c, std::optional<int> sample = std::nullopt) {
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  auto b = make_backend(id);
  RunOptions o;
  o.sample_rows = sample;
  Result r = run_backend(*b, c, p, w, o);
  EXPECT_TRUE(r.ok()) << id << ": " << r.message;
  return r;
}

void expect_no_nan(const Result& r) {
  for (size_t i = 0; i < r.o.size(); ++i) ASSERT_FALSE(std::isnan(r.o[i])) << r.backend << " O[" << i << "]";
  for (size_t i = 0; i < r.lse.size(); ++i) ASSERT_FALSE(std::isnan(r.lse[i])) << r.backend << " LSE[" << i << "]";
}

}  // namespace

// fp32 inputs, no split: cpu.tiled differs from the fp64 reference only by fp32 rounding. The
// dominant term is the logit: |s| up to ~40 here carries an absolute error ~|s| 2^-23 ~ 5e-6, which
// becomes a relative error of that size in each probability, so O's error scales with |V|
// (<= 3.5 std). atol = 1e-5 x 4 std and rtol 1e-4 keep ~10x headroom over that and stay ~1000x
// below bf16 resolution, so a real indexing or merge bug cannot hide under them.
TEST(Backends, TiledWithoutSplitMatchesReferenceInFp32) {
  int tested = 0;
  for (uint64_t seed = 0; seed < 200 && tested < 40; ++seed) {
    CaseSpec c = random_case(seed);
    c.dtype = DType::kFp32;
    c.split.planner = Planner::kOff;
    c.split.fixed_split_size.reset();
    c.split.cuda_graph = false;
    if (c.attention.soft_cap) continue;  // tanhf vs tanh adds its own ulps; covered below
    ++tested;
    SCOPED_TRACE(c.name);
    const Result t = run("cpu.tiled", c), r = run("cpu.reference", c);
    expect_no_nan(t);
    ComparisonSpec k{"cpu.tiled", "cpu.reference", CompareRule::kAllclose, 1e-4, 4e-5 * c.data.std, ""};
    const DiffReport d = compare_results(c, t, r, k, nullptr);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
    EXPECT_LT(d.lse.max_abs, 1e-4);
  }
  EXPECT_EQ(tested, 40);
}

// Low precision, any planner (split-KV, merge, partials in the dtype): the FlashAttention rule.
TEST(Backends, TiledPassesTheTwiceLowpRule) {
  for (uint64_t seed = 0; seed < 60; ++seed) {
    const CaseSpec c = random_case(seed);
    SCOPED_TRACE(c.name);
    const Result t = run("cpu.tiled", c), r = run("cpu.reference", c), l = run("cpu.lowp", c);
    expect_no_nan(t);
    expect_no_nan(l);
    // 1e-5 floor: one bf16 rounding of an O element near 1e-3 (the rule's rounding allowance)
    ComparisonSpec k{"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"};
    const DiffReport d = compare_results(c, t, r, k, &l);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
  }
}

TEST(Backends, FullyMaskedRowsGiveZeroAndMinusInf) {
  CaseSpec c = random_case(3);
  c.attention = AttentionSpec{};
  c.requests = {{6, 10}, {4, 4}};
  c.requests[0].pad_start = 7;  // queries at positions 7, 8, 9 are padding
  for (const char* id : {"cpu.reference", "cpu.lowp", "cpu.tiled"}) {
    const Result r = run(id, c);
    expect_no_nan(r);
    const int Hq = c.num_qo_heads, Dv = c.head_dim_vo;
    for (int q = 0; q < 6; ++q) {
      const bool masked = (10 - 6 + q) >= 7;
      for (int h = 0; h < Hq; ++h) {
        const float lse = r.lse[q * Hq + h];
        if (masked) {
          EXPECT_TRUE(std::isinf(lse) && lse < 0) << id;
          for (int d = 0; d < Dv; ++d) EXPECT_EQ(r.o[(q * Hq + h) * Dv + d], 0.0f) << id;
        } else {
          EXPECT_TRUE(std::isfinite(lse)) << id;
        }
      }
    }
  }
}

// A score_mod that is -inf on every key of some rows (here every query at an odd position) masks
// those rows as fully as the mask does: every CPU backend gives O = 0 and LSE = -inf there, not NaN.
TEST(Backends, ScoreModMinusInfOnEveryKeyIsAFullyMaskedRow) {
  CaseSpec c = random_case(3);
  c.attention = AttentionSpec{};
  c.attention.score_mod = "where(q_idx % 2 == 1, -1 / 0, score)";
  c.requests = {{6, 10}, {4, 4}};
  for (auto& r : c.requests) r.pad_start.reset();
  for (const char* id : {"cpu.reference", "cpu.lowp", "cpu.tiled"}) {
    const Result r = run(id, c);
    expect_no_nan(r);
    const int Hq = c.num_qo_heads, Dv = c.head_dim_vo;
    int64_t t = 0, masked_rows = 0;
    for (const auto& rq : c.requests)
      for (int q = 0; q < rq.q_len; ++q, ++t) {
        const bool masked = (rq.kv_len - rq.q_len + q) % 2 == 1;
        masked_rows += masked;
        for (int h = 0; h < Hq; ++h) {
          const float lse = r.lse[t * Hq + h];
          if (masked) {
            EXPECT_TRUE(std::isinf(lse) && lse < 0) << id << " token " << t;
            for (int d = 0; d < Dv; ++d) EXPECT_EQ(r.o[(t * Hq + h) * Dv + d], 0.0f) << id << " token " << t;
          } else {
            EXPECT_TRUE(std::isfinite(lse)) << id << " token " << t;
          }
        }
      }
    EXPECT_EQ(masked_rows, 5);
  }
}

TEST(Backends, SingleKeyGivesItsValueExactly) {
  CaseSpec c = random_case(4);
  c.attention = AttentionSpec{};
  c.attention.causal = false;
  c.requests = {{1, 1}};
  for (auto& r : c.requests) r.pad_start.reset();
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result r = run("cpu.reference", c);
  const int G = c.group_size();
  for (int h = 0; h < c.num_qo_heads; ++h) {
    const float* v = w.v_pool.data() + kv_offset(c.kv_cache.layout, p.pages.page_of(0, 0), 0, h / G, 0, p.pages.page_size,
                                                 c.num_kv_heads, c.head_dim_vo);
    for (int d = 0; d < c.head_dim_vo; ++d) EXPECT_EQ(r.o[h * c.head_dim_vo + d], v[d]);
    const float* k = w.k_pool.data() + kv_offset(c.kv_cache.layout, p.pages.page_of(0, 0), 0, h / G, 0, p.pages.page_size,
                                                 c.num_kv_heads, c.head_dim_qk);
    double s = 0;
    for (int d = 0; d < c.head_dim_qk; ++d) s += static_cast<double>(w.q[h * c.head_dim_qk + d]) * k[d];
    EXPECT_NEAR(r.lse[h], s * c.sm_scale_or_default(), 1e-5);
  }
}

// Storage must not matter: poisoned unused pages, layouts, allocation and paged vs ragged give
// bit-identical results (split off so the chunking is the same in pages and tokens).
TEST(Backends, StorageDoesNotChangeTheBits) {
  for (uint64_t seed = 0; seed < 30; ++seed) {
    CaseSpec c = random_case(seed);
    c.split = SplitSpec{};
    c.split.planner = Planner::kOff;
    if (c.attention.local_chunk) continue;
    SCOPED_TRACE(c.name);
    CaseSpec ragged = c;
    ragged.kv_cache = KvCacheSpec{};
    ragged.kv_cache.storage = KvStorage::kRagged;
    ragged.kv_cache.page_size = 1;
    ragged.kv_cache.null_page = false;
    CaseSpec messy = c;
    messy.kv_cache.storage = KvStorage::kPaged;
    messy.kv_cache.page_size = 16;
    messy.kv_cache.layout = KvLayout::kHND;
    messy.kv_cache.allocation = PageAlloc::kFragmented;
    messy.kv_cache.poison_unused = true;
    for (const char* id : {"cpu.reference", "cpu.tiled"}) {
      const Result a = run(id, ragged), b = run(id, messy);
      ComparisonSpec k{id, id, CompareRule::kBitwise, 0, 0, ""};
      EXPECT_TRUE(compare_results(c, a, b, k, nullptr).verdict.pass) << id;
    }
  }
}

TEST(Backends, SampledRowsEqualTheFullRun) {
  const CaseSpec c = random_case(12);
  const Result full = run("cpu.reference", c), part = run("cpu.reference", c, 3);
  ASSERT_FALSE(part.row_valid.empty());
  int64_t checked = 0;
  const int64_t per = c.num_qo_heads * c.head_dim_vo;
  for (int64_t t = 0; t < c.total_q(); ++t) {
    if (!part.row_ok(t)) {
      EXPECT_TRUE(std::isnan(part.o[t * per]));  // not computed rows stay poisoned
      continue;
    }
    for (int64_t i = t * per; i < (t + 1) * per; ++i) ASSERT_EQ(f32_bits(full.o[i]), f32_bits(part.o[i]));
    ++checked;
  }
  EXPECT_GT(checked, 0);
  EXPECT_EQ(sampled_rows(10, 3), (std::vector<int>{0, 4, 9}));
}

TEST(Backends, SoftCapBoundsEveryLogit) {
  CaseSpec c = random_case(21);
  c.attention = AttentionSpec{};
  c.attention.soft_cap = 0.5;  // every |logit| <= 0.5, so LSE <= 0.5 + log(kv_len)
  c.data.std = 3.0;
  const Result r = run("cpu.reference", c);
  int64_t t = 0;
  for (const auto& rq : c.requests)
    for (int q = 0; q < rq.q_len; ++q, ++t)
      for (int h = 0; h < c.num_qo_heads; ++h) EXPECT_LE(r.lse[t * c.num_qo_heads + h], 0.5 + std::log(rq.kv_len) + 1e-5);
}

TEST(Backends, GpuBackendsWithoutCudaSayNotCompiled) {
  if (cuda_compiled()) GTEST_SKIP() << "this build has CUDA; the stub is not linked";
  const CaseSpec c = random_case(1);
  const Plan p = make_plan(c);
  auto b = make_backend("cuda.flash");
  ASSERT_TRUE(b);
  const Result r = run_backend(*b, c, p, Workload{}, RunOptions{});
  EXPECT_EQ(r.status, Status::kNotCompiled);
  EXPECT_NE(r.message.find("not compiled"), std::string::npos);
}

// bench --json carries what a backend says of a timed run (cuda.flash: the kernel that ran) beside the
// numbers, and an empty note for a row that did not run.
TEST(Bench, JsonRowsCarryTheBackendsNote) {
  BenchReport r;
  r.case_name = "x";
  BenchRow ok;
  ok.backend = "cuda.flash";
  ok.status = "ok";
  ok.note = "kernel flash_sm90_kernel<128, bf16, 2 warpgroups> (wgmma)";
  ok.median_ms = 1.5;
  BenchRow refused;
  refused.backend = "cudnn.sdpa";
  refused.status = "unsupported: no soft-cap";
  r.rows = {ok, refused};
  const auto j = bench_to_json(r);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["note"], ok.note);
  EXPECT_EQ(j["rows"][0]["median_ms"], 1.5);
  EXPECT_EQ(j["rows"][1]["note"], "");
  EXPECT_EQ(j["rows"][1]["status"], refused.status);
}
