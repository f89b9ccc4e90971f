// FlashInfer's MLA planner (MLAPlan compiled from the pinned headers, its device queries answered by
// the H100 SXM profile with the case's SM count) beside attnscope's model of it (mla_plan.h): on
// several hundred seeded random absorbed batches every field must agree. Skips the library side when
// the flashinfer family is not compiled; the model's own checks run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "attnscope/library_plan.h"
#include "attnscope/mla_plan.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "fi_library_plan.h"
#include "report_json.h"

using namespace attnscope;

namespace {

#define REQUIRE_FLASHINFER_PLANNER()                                                                                    \
  do {                                                                                                                  \
    if (!flashinfer_planner_compiled())                                                                                 \
      GTEST_SKIP() << "FlashInfer's planner is not in this build: " << flashinfer_mla_library_plan(mla_case(), {}).why; \
  } while (0)

CaseSpec mla_case() {
  CaseSpec c;
  c.mla = MlaSpec{};
  c.num_qo_heads = 16;
  c.num_kv_heads = 1;
  c.head_dim_qk = 576;
  c.head_dim_vo = 512;
  c.requests = {{1, 1}};
  return c;
}

// A random absorbed batch: what MLAPlan reads is drawn wide (batch 1..256, q_len 1..8, kv_len
// 1..20000 with short and long ones mixed, 16..128 heads, page sizes, causal or not, SM counts).
CaseSpec random_batch(uint64_t seed) {
  SplitMix64 g(seed * 7919 + 3);
  CaseSpec c = mla_case();
  c.name = "mla-plan-" + std::to_string(seed);
  const int heads[] = {16, 32, 64, 128};
  c.num_qo_heads = heads[g.range(0, 3)];
  const int pages[] = {1, 16, 32, 64, 64};
  c.kv_cache.page_size = pages[g.range(0, 4)];
  c.attention.causal = g.range(0, 2) != 0;
  const int sms[] = {132, 132, 114, 78, 133, 8};
  c.split.num_sms = sms[g.range(0, 5)];
  const int shape = g.range(0, 3);  // batch size: 1..4, 5..32, 33..256, 1..256
  const int nreq = shape == 0 ? g.range(1, 4) : shape == 1 ? g.range(5, 32) : shape == 2 ? g.range(33, 256) : g.range(1, 256);
  const bool decode = g.coin();
  c.requests.clear();
  for (int i = 0; i < nreq; ++i) {
    RequestSpec r;
    r.kv_len = g.range(1, g.range(0, 3) == 0 ? 64 : g.coin() ? 2000 : 20000);
    r.q_len = decode ? 1 : g.range(1, std::min(8, r.kv_len));
    c.requests.push_back(r);
  }
  return c;
}

std::vector<WorkUnit> units_of(const CaseSpec& c) {
  std::vector<WorkUnit> u;
  for (size_t r = 0; r < c.requests.size(); ++r)
    u.push_back({static_cast<int>(r), 0, c.requests[r].q_len, 0, c.requests[r].kv_len});
  return u;
}

FlashInferMlaPlan library_plan(const CaseSpec& c) {
  const DeviceProfile prof = h100_profile(c.split.num_sms, "forced by the test");
  return flashinfer_mla_library_plan(c, units_of(c), &prof);
}

MlaPlanModel model_plan(const CaseSpec& c) { return model_mla_plan(mla_plan_inputs(c, units_of(c), c.split.num_sms)); }

// Every field, with the first difference readable.
void expect_same(const MlaPlanModel& m, const FlashInferMlaPlan& lib) {
  ASSERT_TRUE(lib.available) << lib.why;
  ASSERT_TRUE(m.refusal.empty()) << m.refusal;
  const MlaSchedule &a = m.schedule, &b = lib.schedule;
  EXPECT_EQ(a.num_blks_x, b.num_blks_x);
  EXPECT_EQ(a.num_blks_y, b.num_blks_y);
  EXPECT_EQ(a.work_indptr, b.work_indptr);
  ASSERT_EQ(a.works.size(), b.works.size());
  for (size_t i = 0; i < a.works.size(); ++i) {
    const MlaWork &x = a.works[i], &y = b.works[i];
    ASSERT_EQ(x.q_indptr, y.q_indptr) << "item " << i;
    ASSERT_EQ(x.kv_indptr, y.kv_indptr) << "item " << i;
    ASSERT_EQ(x.partial_indptr, y.partial_indptr) << "item " << i;
    ASSERT_EQ(x.q_len, y.q_len) << "item " << i;
    ASSERT_EQ(x.kv_len, y.kv_len) << "item " << i;
    ASSERT_EQ(x.q_start, y.q_start) << "item " << i;
    ASSERT_EQ(x.kv_start, y.kv_start) << "item " << i;
    ASSERT_EQ(x.kv_end, y.kv_end) << "item " << i;
  }
  EXPECT_EQ(a.merge_packed_start, b.merge_packed_start);
  EXPECT_EQ(a.merge_packed_end, b.merge_packed_end);
  EXPECT_EQ(a.merge_partial_start, b.merge_partial_start);
  EXPECT_EQ(a.merge_partial_end, b.merge_partial_end);
  EXPECT_EQ(a.merge_partial_stride, b.merge_partial_stride);
  EXPECT_TRUE(compare_flashinfer_mla_plan(m, lib).empty()) << flashinfer_mla_agreement_line(m, lib);
}

}  // namespace

// 320 random batches: the model and FlashInfer's MLAPlan agree on every field, and the batches
// reach every branch the planner has (both cluster sizes, split and unsplit tiles, empty tiles).
TEST(MlaPlan, ModelAgreesWithFlashInferOnRandomBatches) {
  REQUIRE_FLASHINFER_PLANNER();
  std::set<int64_t> clusters;
  int split_batches = 0, unsplit_items = 0, causal = 0;
  for (uint64_t seed = 1; seed <= 320; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const CaseSpec c = random_batch(seed);
    const MlaPlanModel m = model_plan(c);
    const FlashInferMlaPlan lib = library_plan(c);
    expect_same(m, lib);
    if (HasFatalFailure()) return;
    clusters.insert(m.schedule.num_blks_x);
    split_batches += m.merge_ctas > 0;
    for (const MlaWork& w : m.schedule.works) unsplit_items += w.partial_indptr < 0;
    causal += c.attention.causal;
  }
  EXPECT_EQ(clusters.size(), 2u) << "both cluster sizes drawn";
  EXPECT_GT(split_batches, 50);
  EXPECT_GT(unsplit_items, 1000);
  EXPECT_GT(causal, 100);
}

// One decode request worked by hand: 16 heads x 1 query = 16 packed rows (one CTA per cluster, 132
// clusters, 64-row tiles); 4096 keys share 32 per cluster, rounded to a limit of 128; so the tile is
// split into 32 items of 128 keys, merged by 16 merge CTAs of one row each.
TEST(MlaPlan, ModelMatchesAHandWorkedDecodeRequest) {
  CaseSpec c = mla_case();
  c.requests = {{1, 4096}};
  c.kv_cache.page_size = 64;
  const MlaPlanModel m = model_plan(c);
  ASSERT_TRUE(m.refusal.empty()) << m.refusal;
  EXPECT_EQ(m.cluster_size, 1);
  EXPECT_EQ(m.schedule.num_blks_x, 1);
  EXPECT_EQ(m.schedule.num_blks_y, 132);
  EXPECT_EQ(m.total_kv, 4096);
  EXPECT_EQ(m.kv_len_limit, 128);
  ASSERT_EQ(m.schedule.works.size(), 32u);
  std::vector<std::pair<int, int>> ranges;
  std::set<int> partials;
  for (const MlaWork& w : m.schedule.works) {
    ranges.push_back({w.kv_start, w.kv_end});
    partials.insert(w.partial_indptr);
    EXPECT_EQ(w.q_start, 0);
    EXPECT_EQ(w.kv_len, 4096);
  }
  std::sort(ranges.begin(), ranges.end());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(ranges[i], std::make_pair(128 * i, 128 * i + 128));
  EXPECT_EQ(partials.size(), 32u);  // each piece its own 16 partial rows: 0, 16, ..., 496
  EXPECT_EQ(*partials.rbegin(), 31 * 16);
  EXPECT_EQ(m.merge_ctas, 16);
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(m.schedule.merge_packed_start[k], k);
    EXPECT_EQ(m.schedule.merge_packed_end[k], k + 1);
    EXPECT_EQ(m.schedule.merge_partial_start[k], k);
    EXPECT_EQ(m.schedule.merge_partial_end[k], 32 * 16);
    EXPECT_EQ(m.schedule.merge_partial_stride[k], 16);
  }
  EXPECT_EQ(m.schedule.merge_packed_start[16], 0);  // unused entries stay 0
  // one item per cluster: the least-loaded cluster takes each piece
  for (int cl = 0; cl < 132; ++cl) EXPECT_LE(m.schedule.work_indptr[cl + 1] - m.schedule.work_indptr[cl], 1);
}

// More than 64 packed rows per request on average: two CTAs per cluster on 128-row tiles, half as
// many clusters; a causal tile other than the request's last stops at its last row's query.
TEST(MlaPlan, ModelPairsCtasForManyRowsAndBoundsCausalTiles) {
  CaseSpec c = mla_case();
  c.num_qo_heads = 128;
  c.requests = {{3, 1000}};
  const MlaPlanModel m = model_plan(c);
  ASSERT_TRUE(m.refusal.empty()) << m.refusal;
  EXPECT_EQ(m.cluster_size, 2);
  EXPECT_EQ(m.schedule.num_blks_y, 66);
  EXPECT_EQ(m.cluster_tile_q, 128);
  // 384 rows: tiles of 128 rows end at queries 0, 1, 2: keys 998, 999, 1000
  EXPECT_EQ(m.total_kv, 998 + 999 + 1000);
  c.attention.causal = false;
  EXPECT_EQ(model_plan(c).total_kv, 3000);
}

// The per-item limit is the even share rounded up: 32 / 64 / 128 / 192, then multiples of 256.
TEST(MlaPlan, KvLenLimitRoundsTheShare) {
  CaseSpec c = mla_case();
  c.split.num_sms = 4;
  const std::pair<int, int> want[] = {{1, 32},    {32, 32},   {33, 64},   {64, 64},    {65, 128},  {128, 128},
                                      {129, 192}, {256, 192}, {257, 256}, {1024, 256}, {1025, 512}};
  for (const auto& [kv, limit] : want) {
    c.requests = {{1, kv}};
    EXPECT_EQ(model_plan(c).kv_len_limit, limit) << kv << " keys on 4 clusters";
  }
}

// FlashInfer's buffers hold 16384 work items and MLAPlan does not check: attnscope refuses a batch
// whose bound exceeds that, the model and the library plan alike.
TEST(MlaPlan, RefusesBatchesBeyondTheWorkBuffers) {
  CaseSpec c = mla_case();
  c.num_qo_heads = 128;
  c.requests.assign(2100, RequestSpec{8, 100});
  const MlaPlanModel m = model_plan(c);
  EXPECT_NE(m.refusal.find("16384"), std::string::npos) << m.refusal;
  c.requests.resize(1000);
  EXPECT_TRUE(model_plan(c).refusal.empty());
  if (!flashinfer_planner_compiled()) return;
  c.requests.resize(2100, RequestSpec{8, 100});
  const FlashInferMlaPlan lib = library_plan(c);
  EXPECT_TRUE(lib.refused);
  EXPECT_FALSE(lib.ran);
  EXPECT_TRUE(compare_flashinfer_mla_plan(m, lib).empty()) << flashinfer_mla_agreement_line(m, lib);
}

// The comparison sees a difference in any field (a changed work item, a merge entry, the SM count).
TEST(MlaPlan, ComparisonNamesTheFieldThatDiffers) {
  REQUIRE_FLASHINFER_PLANNER();
  CaseSpec c = random_batch(7);
  c.split.num_sms = 132;
  const MlaPlanModel m = model_plan(c);
  FlashInferMlaPlan lib = library_plan(c);
  ASSERT_TRUE(compare_flashinfer_mla_plan(m, lib).empty());
  EXPECT_NE(flashinfer_mla_agreement_line(m, lib).find("agrees with the model on every field"), std::string::npos);
  FlashInferMlaPlan bad = lib;
  bad.schedule.works.back().kv_end += 1;
  auto d = compare_flashinfer_mla_plan(m, bad);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].field, "works");
  bad = lib;
  bad.schedule.merge_partial_stride[0] += 1;
  d = compare_flashinfer_mla_plan(m, bad);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].field, "merge");
  c.split.num_sms = 114;  // the library plans for 114 SMs, the model for 132
  const DeviceProfile prof = h100_profile(114, "forced by the test");
  const FlashInferMlaPlan other = flashinfer_mla_library_plan(c, units_of(c), &prof);
  ASSERT_TRUE(other.available);
  EXPECT_FALSE(compare_flashinfer_mla_plan(m, other).empty());
  EXPECT_NE(flashinfer_mla_agreement_line(m, other).find("FlashInfer plans for 114 SMs, the model for 132"), std::string::npos);
}

// plan_case fills library_plans.flashinfer_mla for an absorbed MLA case, and says why not otherwise.
TEST(MlaPlan, PlanCaseFillsTheLibraryPlan) {
  CaseSpec c = mla_case();
  c.requests = {{1, 300}, {2, 77}};
  c.kv_cache.page_size = 64;
  c.backends = {"cpu.reference"};
  const Plan p = plan_case(c);
  const FlashInferMlaPlan& lib = p.library.flashinfer_mla;
  CaseSpec plain;
  plain.requests = {{1, 10}};
  plain.backends = {"cpu.reference"};
  EXPECT_FALSE(plan_case(plain).library.flashinfer_mla.ran);
  if (!flashinfer_planner_compiled()) {
    EXPECT_NE(lib.why.find("not compiled"), std::string::npos) << lib.why;
    return;
  }
  EXPECT_EQ(plan_case(plain).library.flashinfer_mla.why, "not an MLA case");
  ASSERT_TRUE(lib.available) << lib.why;
  EXPECT_EQ(lib.inputs.qo_indptr, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(lib.inputs.kv_indptr, (std::vector<int>{0, 5, 7}));
  EXPECT_EQ(lib.inputs.kv_len, (std::vector<int>{300, 77}));
  const MlaPlanModel m = model_mla_plan(mla_plan_inputs(c, p.units, lib.device.sm_count));
  EXPECT_TRUE(compare_flashinfer_mla_plan(m, lib).empty()) << flashinfer_mla_agreement_line(m, lib);
}

// plan --json: library_plans.flashinfer_mla for an absorbed MLA case (inputs, the model's schedule, the
// agreement), no such key for other cases.
TEST(MlaPlan, PlanJsonCarriesTheMlaPlanForMlaCasesOnly) {
  CaseSpec c = mla_case();
  c.requests = {{1, 300}, {2, 77}};
  c.kv_cache.page_size = 64;
  c.backends = {"cpu.reference"};
  const auto j = library_plans_to_json(plan_case(c));
  ASSERT_TRUE(j.contains("flashinfer_mla"));
  const auto& m = j["flashinfer_mla"];
  EXPECT_EQ(m["inputs"]["kv_len"], (std::vector<int>{300, 77}));
  EXPECT_EQ(m["model"]["kv_len_limit"], 32);  // 377 keys over 132 clusters: a share of 3, the smallest limit
  EXPECT_EQ(m["model"]["schedule"]["works"].size(), 13u);
  EXPECT_TRUE(m["agreement"]["line"].get<std::string>().find("FlashInfer's MLA planner") == 0);
  if (flashinfer_planner_compiled()) {
    EXPECT_EQ(m["agreement"]["agrees"], true);
  }
  CaseSpec plain;
  plain.requests = {{1, 10}};
  plain.backends = {"cpu.reference"};
  EXPECT_FALSE(library_plans_to_json(plan_case(plain)).contains("flashinfer_mla"));
}
