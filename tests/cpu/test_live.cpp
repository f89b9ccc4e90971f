// The live run (app/core/live_session.h, stage_cache.h): each kind of edit re-runs exactly the stages
// it invalidates, a superseded run never publishes, stale results are never shown as current, and the
// cache stays within its bound.
#include <gtest/gtest.h>

#include <atomic>

#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "case_gen.h"
#include "live_session.h"

using namespace attnscope;

namespace {

CaseFile base_case() {
  CaseFile f;
  f.spec = attnscope::testing::random_case(11);
  f.spec.name = "live";
  f.spec.backends = {"cpu.reference", "cpu.lowp", "cpu.tiled"};
  f.spec.comparisons = {{"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}};
  validate_case(f.spec, &registry_ids());
  return f;
}

// The counts one run of `f` adds to the cache's.
struct Delta {
  int inputs_made, inputs_reused, compares_made, compares_reused;
  std::map<std::string, int> runs, reused;
};

Delta run_counted(const CaseFile& f, StageCache& cache, std::shared_ptr<const Session>* out = nullptr) {
  const StageCounts a = cache.counts();
  LiveOptions o;
  o.cache = &cache;
  auto s = run_live(f, o);
  EXPECT_TRUE(s);
  if (out) *out = s;
  const StageCounts b = cache.counts();
  Delta d{b.inputs_made - a.inputs_made,
          b.inputs_reused - a.inputs_reused,
          b.compares_made - a.compares_made,
          b.compares_reused - a.compares_reused,
          {},
          {}};
  for (const auto& [id, n] : b.backend_runs)
    if (n != (a.backend_runs.count(id) ? a.backend_runs.at(id) : 0))
      d.runs[id] = n - (a.backend_runs.count(id) ? a.backend_runs.at(id) : 0);
  for (const auto& [id, n] : b.backend_reused)
    if (n != (a.backend_reused.count(id) ? a.backend_reused.at(id) : 0))
      d.reused[id] = n - (a.backend_reused.count(id) ? a.backend_reused.at(id) : 0);
  return d;
}

const std::map<std::string, int> kNone;
const std::map<std::string, int> kAllThree = {{"cpu.lowp", 1}, {"cpu.reference", 1}, {"cpu.tiled", 1}};

}  // namespace

TEST(Live, EachEditRunsExactlyTheStagesItInvalidates) {
  StageCache cache;
  const CaseFile f = base_case();
  Delta d = run_counted(f, cache);
  EXPECT_EQ(d.inputs_made, 1);
  EXPECT_EQ(d.runs, kAllThree);
  EXPECT_EQ(d.compares_made, 1);

  d = run_counted(f, cache);  // the same case: nothing runs
  EXPECT_EQ(d.inputs_made, 0);
  EXPECT_EQ(d.runs, kNone);
  EXPECT_EQ(d.reused, kAllThree);
  EXPECT_EQ(d.compares_made, 0);
  EXPECT_EQ(d.compares_reused, 1);

  CaseFile tol = f;  // a comparison edit: no backend, one comparison
  tol.spec.comparisons[0].atol = 2e-5;
  d = run_counted(tol, cache);
  EXPECT_EQ(d.runs, kNone);
  EXPECT_EQ(d.inputs_made, 0);
  EXPECT_EQ(d.compares_made, 1);

  CaseFile split = f;  // a planner edit: the plan's twin only, never the references
  split.spec.split.partials =
      f.spec.split.partials == PartialPrecision::kFp32 ? PartialPrecision::kDtype : PartialPrecision::kFp32;
  d = run_counted(split, cache);
  EXPECT_EQ(d.runs, (std::map<std::string, int>{{"cpu.tiled", 1}}));
  EXPECT_EQ(d.reused, (std::map<std::string, int>{{"cpu.lowp", 1}, {"cpu.reference", 1}}));
  EXPECT_EQ(d.inputs_made, 0);

  // another SM budget: the twin runs again exactly when the plan it executes changed
  CaseFile sms = f;
  sms.spec.split.num_sms = 7;
  const Plan pf = plan_case(f.spec), psms = plan_case(sms.spec);
  const bool same_plan =
      backend_key(f.spec, "cpu.tiled", std::nullopt, &pf) == backend_key(sms.spec, "cpu.tiled", std::nullopt, &psms);
  d = run_counted(sms, cache);
  const std::map<std::string, int> tiled_once = {{"cpu.tiled", 1}};
  EXPECT_EQ(d.runs, same_plan ? kNone : tiled_once);
  EXPECT_EQ(d.reused.count("cpu.reference"), 1u);

  CaseFile fewer = f;  // a backend toggled off and on again: nothing runs
  fewer.spec.backends = {"cpu.reference", "cpu.tiled"};
  fewer.spec.comparisons = {};
  d = run_counted(fewer, cache);
  EXPECT_EQ(d.runs, kNone);
  d = run_counted(f, cache);
  EXPECT_EQ(d.runs, kNone);

  CaseFile seed = f;  // a data edit: new inputs, every backend
  seed.spec.data.seed += 1;
  d = run_counted(seed, cache);
  EXPECT_EQ(d.inputs_made, 1);
  EXPECT_EQ(d.runs, kAllThree);
  EXPECT_EQ(d.compares_made, 1);

  d = run_counted(f, cache);  // undo: the first seed's stages are all still cached
  EXPECT_EQ(d.inputs_made, 0);
  EXPECT_EQ(d.runs, kNone);
  EXPECT_EQ(d.compares_made, 0);

  CaseFile renamed = f;  // the name and description feed no stage
  renamed.spec.name = "other";
  renamed.spec.description = "words";
  d = run_counted(renamed, cache);
  EXPECT_EQ(d.runs, kNone);
}

TEST(Live, ReusedResultsAreTheOnePassRunsBits) {
  StageCache cache;
  const CaseFile f = base_case();
  std::shared_ptr<const Session> first, second;
  run_counted(f, cache, &first);
  run_counted(f, cache, &second);
  const auto cli = run_session(f);
  ASSERT_EQ(cli->results.size(), second->results.size());
  for (size_t i = 0; i < cli->results.size(); ++i) {
    EXPECT_EQ(result_digest(cli->results[i]), result_digest(first->results[i])) << cli->results[i].backend;
    EXPECT_EQ(result_digest(cli->results[i]), result_digest(second->results[i])) << cli->results[i].backend;
  }
  ASSERT_EQ(cli->diffs.size(), second->diffs.size());
  EXPECT_EQ(cli->diffs[0].verdict.detail, second->diffs[0].verdict.detail);
  EXPECT_EQ(cli->diffs[0].verdict.pass, second->diffs[0].verdict.pass);
}

TEST(Live, ASupersededRunNeverPublishesAgain) {
  StageCache cache;
  std::atomic<bool> superseded{false};
  int published = 0, after = 0;
  LiveOptions o;
  o.cache = &cache;
  o.superseded = &superseded;
  o.publish = [&](std::shared_ptr<const Session>) {
    ++published;
    if (superseded) ++after;
    superseded = true;  // a newer edit arrives while the first snapshot is drawn
  };
  EXPECT_FALSE(run_live(base_case(), o));
  EXPECT_EQ(published, 1);
  EXPECT_EQ(after, 0);
  EXPECT_EQ(cache.counts().compares_made, 0) << "nothing past the supersede ran";
}

TEST(Live, StaleResultsAreMarkedUntilReplaced) {
  StageCache cache;
  const CaseFile a = base_case();
  std::shared_ptr<const Session> old;
  run_counted(a, cache, &old);
  CaseFile b = a;
  b.spec.data.seed += 7;
  std::vector<std::shared_ptr<const Session>> seen;
  LiveOptions o;
  o.cache = &cache;
  o.previous = old;
  o.publish = [&](std::shared_ptr<const Session> s) { seen.push_back(std::move(s)); };
  auto done = run_live(b, o);
  ASSERT_TRUE(done);
  EXPECT_TRUE(done->stale.empty());
  EXPECT_FALSE(done->diffs_stale);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front()->stale.size(), 3u) << "at first every result shown is the previous edit's";
  EXPECT_TRUE(seen.front()->diffs_stale);
  for (const auto& s : seen)
    for (const auto& r : s->results) {
      const Result* now = done->result(r.backend);
      const Result* was = old->result(r.backend);
      if (s->is_stale(r.backend))
        EXPECT_EQ(result_digest(r), result_digest(*was)) << r.backend;
      else
        EXPECT_EQ(result_digest(r), result_digest(*now)) << r.backend << ": a result shown as current is this edit's";
    }
  CaseFile shape = a;  // another shape: nothing of the old case stands in
  shape.spec.requests[0].q_len += 1;
  seen.clear();
  ASSERT_TRUE(run_live(shape, o));
  EXPECT_TRUE(seen.front()->results.empty());
}

TEST(Live, TheCacheStaysWithinItsBound) {
  StageCache cache(1000);
  for (int i = 0; i < 50; ++i) {
    cache.put("k" + std::to_string(i), std::make_shared<int>(i), 100);
    EXPECT_LE(cache.bytes(), 1000);
  }
  EXPECT_EQ(cache.entries(), 10u);
  EXPECT_FALSE(cache.get("k0")) << "the least recently used went first";
  EXPECT_TRUE(cache.get("k49"));
  ASSERT_TRUE(cache.get("k40"));  // used: k41 is now the oldest
  cache.put("new", std::make_shared<int>(0), 100);
  EXPECT_TRUE(cache.get("k40"));
  EXPECT_FALSE(cache.get("k41"));
  cache.put("huge", std::make_shared<int>(0), 5000);  // larger than the bound: not kept, nothing evicted
  EXPECT_FALSE(cache.get("huge"));
  EXPECT_EQ(cache.entries(), 10u);
}

TEST(Live, KeysFollowTheFieldsEachStageReads) {
  const CaseSpec c = base_case().spec;
  CaseSpec mask = c;
  mask.attention.causal = !c.attention.causal;
  EXPECT_EQ(inputs_key(c), inputs_key(mask)) << "the mask generates nothing";
  // the device workload uploads the masks too, but no planner field
  EXPECT_NE(device_inputs_key(c), device_inputs_key(mask));
  CaseSpec sms = c, renamed = c;
  sms.split.num_sms += 1;
  renamed.name += " (copy)";
  EXPECT_EQ(device_inputs_key(c), device_inputs_key(sms));
  EXPECT_EQ(device_inputs_key(c), device_inputs_key(renamed));
  EXPECT_NE(backend_key(c, "cpu.reference", std::nullopt), backend_key(mask, "cpu.reference", std::nullopt));
  CaseSpec split = c;
  split.split.num_sms += 1;
  EXPECT_EQ(backend_key(c, "cpu.reference", std::nullopt), backend_key(split, "cpu.reference", std::nullopt));
  EXPECT_NE(backend_key(c, "cpu.tiled", std::nullopt), backend_key(split, "cpu.tiled", std::nullopt));
  // given the plan, the twin's key is what it executes: a planner with no split ignores the SM budget
  CaseSpec off = c, off_sms = c;
  off.split = SplitSpec{.planner = Planner::kOff};
  off_sms.split = SplitSpec{.planner = Planner::kOff, .num_sms = 11};
  const Plan po = plan_case(off), ps = plan_case(off_sms);
  EXPECT_EQ(backend_key(off, "cpu.tiled", std::nullopt, &po), backend_key(off_sms, "cpu.tiled", std::nullopt, &ps));
  CaseSpec dtype_partials = off;
  dtype_partials.split.partials = PartialPrecision::kDtype;
  const Plan pd = plan_case(dtype_partials);
  EXPECT_NE(backend_key(off, "cpu.tiled", std::nullopt, &po), backend_key(dtype_partials, "cpu.tiled", std::nullopt, &pd));
  EXPECT_NE(backend_key(c, "cpu.reference", std::nullopt), backend_key(c, "cpu.reference", 4)) << "sampled rows";
  EXPECT_NE(backend_key(c, "cpu.reference", std::nullopt), backend_key(c, "cpu.lowp", std::nullopt));
}
