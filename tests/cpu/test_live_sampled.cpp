// The live run's sampled pass (live_session.h, sample_first): a case whose full host reference is over
// the budget shows sampled results first, then every row's; a superseded fill never publishes; a
// sampled result is never shown as the full one; the CLI's run stays one pass of what the case says.
// And the previous edit's results carried into a new session (carry_stale) with their FP8 ideals.
#include <gtest/gtest.h>

#include <atomic>

#include "attnscope/registry.h"
#include "case_gen.h"
#include "case_json.h"
#include "fp8_case_gen.h"
#include "live_session.h"

using namespace attnscope;

namespace {

// Requests longer than the sampled pass's rows (so sampling leaves rows out) and one shorter.
CaseFile long_case() {
  CaseFile f;
  f.spec = attnscope::testing::random_case(11);
  f.spec.name = "sampled-first";
  f.spec.requests = {RequestSpec{80, 200}, RequestSpec{5, 300}, RequestSpec{40, 40}};
  f.spec.attention = AttentionSpec{};
  f.spec.kv_cache = KvCacheSpec{};
  f.spec.split = SplitSpec{};
  f.spec.sample_rows.reset();
  f.spec.backends = {"cpu.reference", "cpu.lowp", "cpu.tiled"};
  f.spec.comparisons = {{"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}};
  validate_case(f.spec, &registry_ids());
  return f;
}

// A budget every case is over: the rule's cost is at least one multiply-add.
constexpr int64_t kTiny = 1;

struct Seen {
  std::shared_ptr<const Session> s;
  bool sampled_done;
};

}  // namespace

TEST(Live, SampleFirstRuleFollowsTheBudgetTheRowsAndTheBackends) {
  const CaseSpec c = long_case().spec;
  const std::vector<std::string> ids = c.backends;
  const auto f = sample_first(c, ids, kTiny);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rows_per_request, kSampleFirstRows);
  EXPECT_EQ(f->rows, kSampleFirstRows + 5 + kSampleFirstRows);
  EXPECT_EQ(f->total_rows, 125);
  const int64_t cost = (80 * 200 + 5 * 300 + 40 * 40) * int64_t{c.num_qo_heads} * (c.head_dim_qk + c.head_dim_vo);
  EXPECT_EQ(f->cost, cost);
  EXPECT_TRUE(sample_first(c, ids, cost - 1)) << "over the budget";
  EXPECT_FALSE(sample_first(c, ids, cost)) << "at the budget: every row at once";
  EXPECT_FALSE(sample_first(c, ids, 0)) << "0 turns it off";
  EXPECT_FALSE(sample_first(c, {"cpu.tiled", "cuda.flash"}, kTiny)) << "no backend that samples rows";
  CaseSpec short_rows = c;
  for (auto& r : short_rows.requests) r.q_len = std::min(r.q_len, kSampleFirstRows);
  EXPECT_FALSE(sample_first(short_rows, ids, kTiny)) << "sampling would leave no row out";
  // the default budget: the examples' host cases stay one pass; millions of query rows do not
  EXPECT_FALSE(sample_first(c, ids, kFullReferenceBudget));
  CaseSpec big = c;
  big.requests = {RequestSpec{1 << 20, 1 << 20}};
  EXPECT_TRUE(sample_first(big, ids, kFullReferenceBudget));
  // the GPU's fp64 reference samples rows too, under its own bound (cuda.naive computes every row)
  const std::vector<std::string> gpu = {"cuda.reference", "cuda.flash"};
  EXPECT_FALSE(sample_first(c, {"cuda.naive", "cuda.flash"}, kTiny, kTiny));
  EXPECT_TRUE(sample_first(c, gpu, kFullReferenceBudget, cost - 1)) << "over the GPU's bound";
  EXPECT_FALSE(sample_first(c, gpu, kTiny, cost)) << "the GPU's bound, not the host's";
  EXPECT_FALSE(sample_first(c, gpu, kTiny, 0));
  EXPECT_TRUE(sample_first(c, {"cpu.reference", "cuda.reference"}, cost - 1, 0)) << "a host reference: the host's bound";
  const CaseSpec mixed8k = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/bench/gui-mixed-8k-gpu.json").spec;
  const CaseSpec g64 = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/bench/gui-64-requests-gpu.json").spec;
  EXPECT_TRUE(sample_first(mixed8k, mixed8k.backends, kFullReferenceBudget)) << "4096 prefill rows over 8192 keys";
  EXPECT_FALSE(sample_first(g64, g64.backends, kFullReferenceBudget)) << "its reference is about 60 ms on an H200";
}

TEST(Live, ALargeReferenceShowsSampledRowsFirstThenEveryRow) {
  StageCache cache;
  const CaseFile f = long_case();
  std::vector<Seen> seen;
  LiveOptions o;
  o.cache = &cache;
  o.full_reference_budget = kTiny;
  o.publish = [&](std::shared_ptr<const Session> s) { seen.push_back({std::move(s), false}); };
  o.sampled_done = [&](std::shared_ptr<const Session> s) { seen.push_back({std::move(s), true}); };
  auto done = run_live(f, o);
  ASSERT_TRUE(done);
  size_t at = seen.size();  // where the sampled pass ended
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i].sampled_done) {
      EXPECT_EQ(at, seen.size()) << "one sampled pass";
      at = i;
    }
  ASSERT_LT(at, seen.size());
  const Session& first = *seen[at].s;
  EXPECT_EQ(first.sampled, (std::vector<std::string>{"cpu.reference", "cpu.lowp"})) << "cpu.tiled computes every row anyway";
  EXPECT_TRUE(first.diffs_sampled);
  ASSERT_EQ(first.diffs.size(), 1u);
  EXPECT_TRUE(first.diffs[0].sampled) << "the comparison read the sampled rows";
  EXPECT_NE(sampled_note(first).find("sampled 37 of 125 query rows (16 per request)"), std::string::npos) << sampled_note(first);
  // never shown as the full one: every snapshot lists each sampled result it shows, and only those
  for (const auto& v : seen)
    for (const auto& r : v.s->results) {
      EXPECT_EQ(v.s->is_sampled(r.backend), !r.row_valid.empty()) << r.backend;
      if (!r.row_valid.empty()) {
        EXPECT_NE(sampled_note(*v.s), "");
      }
    }
  for (size_t i = at + 1; i < seen.size(); ++i) EXPECT_TRUE(seen[i].s->diffs_sampled) << "until the full comparisons";
  // then every row, bit for bit the CLI's one pass
  EXPECT_TRUE(done->sampled.empty());
  EXPECT_FALSE(done->diffs_sampled);
  EXPECT_FALSE(done->shows_sampled());
  EXPECT_EQ(sampled_note(*done), "");
  const auto cli = run_session(f);
  ASSERT_EQ(cli->results.size(), done->results.size());
  for (size_t i = 0; i < cli->results.size(); ++i) {
    EXPECT_TRUE(cli->results[i].row_valid.empty()) << "the CLI computes what the case says: every row";
    EXPECT_EQ(result_digest(cli->results[i]), result_digest(done->results[i])) << cli->results[i].backend;
  }
  ASSERT_EQ(done->diffs.size(), 1u);
  EXPECT_FALSE(done->diffs[0].sampled);
  EXPECT_EQ(cli->diffs[0].verdict.detail, done->diffs[0].verdict.detail);
  // the references ran twice (sampled, then every row), the plan's twin once; the keys kept them apart
  const StageCounts n = cache.counts();
  EXPECT_EQ(n.backend_runs.at("cpu.reference"), 2);
  EXPECT_EQ(n.backend_runs.at("cpu.lowp"), 2);
  EXPECT_EQ(n.backend_runs.at("cpu.tiled"), 1);
  EXPECT_EQ(n.compares_made, 2);
  bool stage_named = false;
  for (const auto& st : done->stages) stage_named |= st.stage == "cpu.reference (sampled)";
  EXPECT_TRUE(stage_named);
  // the same edit again (undo): every row's results are cached, no sampled pass
  seen.clear();
  ASSERT_TRUE(run_live(f, o));
  for (const auto& v : seen) EXPECT_FALSE(v.sampled_done || v.s->shows_sampled());
}

TEST(Live, ASupersededFillNeverPublishes) {
  StageCache cache;
  const CaseFile f = long_case();
  std::atomic<bool> superseded{false};
  int after = 0;
  LiveOptions o;
  o.cache = &cache;
  o.superseded = &superseded;
  o.full_reference_budget = kTiny;
  o.publish = [&](std::shared_ptr<const Session>) { after += superseded ? 1 : 0; };
  o.sampled_done = [&](std::shared_ptr<const Session>) { superseded = true; };  // a newer edit, as the runner's would
  EXPECT_FALSE(run_live(f, o));
  EXPECT_EQ(after, 0);
  EXPECT_EQ(cache.counts().backend_runs.at("cpu.reference"), 1) << "only the sampled pass ran";
  EXPECT_FALSE(cache.get(backend_key(f.spec, "cpu.reference", std::nullopt))) << "no result of every row was kept";
  EXPECT_TRUE(cache.get(backend_key(f.spec, "cpu.reference", kSampleFirstRows)));
}

TEST(Live, StaleResultsCarryTheirFp8IdealsAndCompareNeverReadsThem) {
  CaseFile a;
  a.spec = attnscope::testing::random_fp8_case(5);
  a.spec.backends = {"cpu.reference", "cpu.lowp", "cpu.tiled"};
  a.spec.comparisons = {{"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}};
  validate_case(a.spec, &registry_ids());
  StageCache cache;
  LiveOptions o;
  o.cache = &cache;
  auto old = run_live(a, o);
  ASSERT_TRUE(old && old->original_ideal && old->quantisation);
  EXPECT_FALSE(old->ideals_stale);
  // the GUI's frame of the edit and the live run carry the same: results, comparisons and ideals, stale
  CaseFile b = a;
  b.spec.data.seed += 3;
  Session planned;
  planned.file = b;
  auto shown = with_stale_results(planned, *old);
  EXPECT_EQ(shown->stale.size(), 3u);
  EXPECT_TRUE(shown->diffs_stale);
  EXPECT_TRUE(shown->ideals_stale);
  EXPECT_EQ(shown->original_ideal, old->original_ideal);
  std::vector<std::shared_ptr<const Session>> seen;
  o.previous = old;
  o.publish = [&](std::shared_ptr<const Session> s) { seen.push_back(std::move(s)); };
  auto done = run_live(b, o);
  ASSERT_TRUE(done);
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.front()->ideals_stale);
  EXPECT_EQ(seen.front()->original_ideal, old->original_ideal);
  EXPECT_FALSE(done->ideals_stale);
  EXPECT_NE(done->original_ideal, old->original_ideal);
  for (const auto& s : seen)
    if (!s->ideals_stale && s->original_ideal) {
      EXPECT_EQ(s->original_ideal, done->original_ideal) << "fresh ideals are this edit's";
    }
  // a case of the same shape without FP8: the old ideals stand in until the comparisons, never inside them
  CaseFile plain = b;
  plain.spec.kv_cache.fp8.reset();
  plain.spec.kv_cache.scales = {};
  plain.spec.fp8_attention.reset();
  validate_case(plain.spec, &registry_ids());
  o.previous = done;
  seen.clear();
  auto p = run_live(plain, o);
  ASSERT_TRUE(p);
  EXPECT_TRUE(seen.front()->ideals_stale);
  EXPECT_FALSE(p->original_ideal);
  EXPECT_FALSE(p->ideals_stale);
  for (const auto& d : p->diffs) EXPECT_FALSE(d.vs_original.has_value()) << "a comparison against a stale ideal";
}
