// FlashInfer's own planner (PrefillSplitQOKVIndptr compiled from the pinned headers, answering
// its device queries from the H100 SXM profile with the case's SM count) beside attnscope's model
// of it (SplitPlan): on a few hundred seeded random cases every field must agree. Where they
// differ, the model is what gets fixed. Skips when the flashinfer family is not compiled.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "attnscope/library_plan.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "case_gen.h"
#include "fi_library_plan.h"

using namespace attnscope;

namespace {

#define REQUIRE_FLASHINFER_PLANNER()                                                                                       \
  do {                                                                                                                     \
    if (!flashinfer_planner_compiled()) {                                                                                  \
      CaseSpec c_;                                                                                                         \
      c_.requests = {{1, 1}};                                                                                              \
      GTEST_SKIP() << "FlashInfer's planner is not in this build: " << flashinfer_library_plan(c_, {{0, 0, 1, 0, 1}}).why; \
    }                                                                                                                      \
  } while (0)

// FlashInfer's plan of the case, its device queries answered by the profile with the case's SMs
// (also on a machine with a GPU, so that the model's /split/num_sms is what both budget for).
FlashInferPlan forced_plan(const CaseSpec& c, const Plan& p) {
  const DeviceProfile prof = h100_profile(c.split.num_sms, "forced by the test");
  return flashinfer_library_plan(c, p.units, &prof);
}

// A case for the planner: what the planner reads is drawn wide (batch shape, long and short
// queries, GQA, page sizes, head dims of every tile-rule branch, windows causal or not, chunked
// local attention, CUDA graphs, fixed split sizes that overflow the CUDA-graph grid, split off).
CaseSpec planner_case(uint64_t seed) {
  SplitMix64 g(seed * 104729 + 7);
  CaseSpec c;
  c.name = "library-plan-" + std::to_string(seed);
  c.backends = {"cpu.reference"};
  const int kv_heads[] = {1, 2, 4, 8};
  const int groups[] = {1, 2, 4, 5, 8};
  c.num_kv_heads = kv_heads[g.range(0, 3)];
  c.num_qo_heads = c.num_kv_heads * groups[g.range(0, 4)];
  const std::pair<int, int> dims[] = {{64, 64}, {128, 128}, {128, 128}, {256, 256}, {192, 128},
                                      {96, 96}, {512, 512}, {576, 512}, {512, 256}, {448, 256}};
  const auto d = dims[g.range(0, 9)];
  c.head_dim_qk = d.first;
  c.head_dim_vo = d.second;
  const DType dts[] = {DType::kBf16, DType::kFp16, DType::kFp32};
  c.dtype = dts[g.range(0, 2)];
  const int pss[] = {1, 4, 16, 16, 32, 64, 256};
  if (g.range(0, 3) == 0) {
    c.kv_cache.storage = KvStorage::kRagged;
    c.kv_cache.page_size = 1;
    c.kv_cache.null_page = false;
  } else {
    c.kv_cache.page_size = pss[g.range(0, 6)];
  }
  const int shape = g.range(0, 3);  // 0 decode, 1 short queries, 2 long prefill, 3 mixed
  const int nreq = g.range(1, shape == 0 ? 24 : 8);
  for (int i = 0; i < nreq; ++i) {
    RequestSpec r;
    r.kv_len = g.range(1, g.coin() ? 600 : 20000);
    const int kind = shape == 3 ? g.range(0, 2) : shape;
    const int q_max = kind == 0 ? 1 : kind == 1 ? 16 : 3000;
    r.q_len = g.range(1, std::min(r.kv_len, q_max));
    c.requests.push_back(r);
  }
  const int mask = g.range(0, 5);  // 0-1 causal, 2 non-causal, 3 causal window, 4 non-causal window, 5 local
  c.attention.causal = mask != 2 && mask != 4;
  if (mask == 3 || mask == 4) c.attention.window = g.coin() ? g.range(1, 64) : g.range(1, 4000);
  if (mask == 5) c.attention.local_chunk = c.effective_page_size() * g.range(1, std::max(1, 2048 / c.effective_page_size()));
  const int planner = g.range(0, 9);  // flashinfer 5/10, fixed 3/10, off 2/10
  c.split.planner = planner < 5 ? Planner::kFlashInfer : planner < 8 ? Planner::kFixed : Planner::kOff;
  c.split.num_sms = g.coin() ? 132 : g.range(1, 40) * 4;
  if (c.split.planner == Planner::kFixed) c.split.fixed_split_size = g.coin() ? g.range(1, 8) : g.range(1, 600);
  if (c.split.planner != Planner::kOff && g.range(0, 2) == 0) c.split.cuda_graph = true;
  validate_case(c);
  return c;
}

// Every field of the model against FlashInfer's own plan, with readable failures.
void expect_same_plan(const SplitPlan& m, const FlashInferPlan& fi) {
  ASSERT_TRUE(fi.ran) << fi.why;
  ASSERT_EQ(!m.refusal.empty(), fi.refused) << "model: " << m.refusal << "\nFlashInfer: " << fi.why;
  if (fi.refused) return;
  ASSERT_TRUE(fi.available) << fi.why;
  EXPECT_EQ(m.cta_tile_q, fi.cta_tile_q);
  if (fi.kv_chunk_unbounded) {
    EXPECT_EQ(m.planner, Planner::kOff);
    EXPECT_TRUE(std::all_of(m.unit_chunks.begin(), m.unit_chunks.end(), [](int n) { return n == 1; }));
  } else {
    EXPECT_EQ(m.chunk_tokens, fi.kv_chunk_size);
  }
  EXPECT_EQ(m.split_kv, fi.split_kv);
  EXPECT_EQ(m.num_items, fi.new_batch_size);
  EXPECT_EQ(m.padded_items, fi.padded_batch_size);
  ASSERT_EQ(m.items.size(), fi.request_indices.size());
  for (size_t i = 0; i < m.items.size(); ++i) {
    ASSERT_EQ(m.items[i].unit, fi.request_indices[i]) << "item " << i;
    ASSERT_EQ(m.items[i].q_tile, fi.qo_tile_indices[i]) << "item " << i;
    ASSERT_EQ(m.items[i].kv_chunk, fi.kv_tile_indices[i]) << "item " << i;
  }
  EXPECT_EQ(m.merge_indptr, fi.merge_indptr);
  EXPECT_EQ(m.o_indptr, fi.o_indptr);
  // the comparison the report and the GUI show says the same
  const auto diffs = compare_flashinfer_plan(m, fi);
  EXPECT_TRUE(diffs.empty()) << flashinfer_agreement_line(m, fi);
}

}  // namespace

TEST(LibraryPlan, ModelAgreesWithFlashInferOnRandomCases) {
  REQUIRE_FLASHINFER_PLANNER();
  std::map<std::string, int> seen;
  const int kCases = 400;
  for (uint64_t seed = 0; seed < kCases; ++seed) {
    const CaseSpec c = planner_case(seed);
    SCOPED_TRACE(c.name);
    const Plan p = make_plan(c);
    const FlashInferPlan fi = forced_plan(c, p);
    expect_same_plan(p.split, fi);
    if (::testing::Test::HasFatalFailure()) return;
    seen[planner_name(c.split.planner)]++;
    seen["units " + std::string(p.units.size() > 1 ? "many" : "one")]++;
    if (c.kv_cache.storage == KvStorage::kRagged) seen["ragged"]++;
    if (c.effective_page_size() > 1) seen["paged"]++;
    if (c.group_size() > 1) seen["gqa"]++;
    if (c.split.cuda_graph) seen["cuda graph"]++;
    if (c.split.cuda_graph && c.split.planner == Planner::kFixed) seen["cuda graph + fixed"]++;
    if (fi.refused) seen["refused"]++;
    if (c.attention.window) seen[c.attention.causal ? "causal window" : "non-causal window"]++;
    if (c.attention.local_chunk) seen["local"]++;
    if (fi.split_kv) seen["split"]++;
    seen["tile " + std::to_string(fi.refused ? p.split.cta_tile_q : fi.cta_tile_q)]++;
  }
  // the draw covers what the brief names; a generator that stopped drawing one would hide it
  for (const char* k :
       {"flashinfer", "fixed", "off", "units many", "units one", "ragged", "paged", "gqa", "cuda graph", "cuda graph + fixed",
        "refused", "causal window", "non-causal window", "local", "split", "tile 16", "tile 32", "tile 64", "tile 128"})
    EXPECT_GE(seen[k], 3) << k;
}

TEST(LibraryPlan, ModelAgreesWithFlashInferOnPropertyCases) {
  // the property-test cases (every mask kind, small head dims, fragmented pages): FlashInfer plans
  // only on lengths, so the models it has must agree there too
  REQUIRE_FLASHINFER_PLANNER();
  int compared = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const CaseSpec c = attnscope::testing::random_case(seed);
    if (c.split.planner == Planner::kFlashAttn || c.split.fixed_tile_q) continue;  // no FlashInfer equivalent
    SCOPED_TRACE(c.name);
    const Plan p = make_plan(c);
    expect_same_plan(p.split, forced_plan(c, p));
    if (::testing::Test::HasFatalFailure()) return;
    ++compared;
  }
  EXPECT_GE(compared, 150);
}

TEST(LibraryPlan, WorkedExamplesAgainstTheRealPlanner) {
  REQUIRE_FLASHINFER_PLANNER();
  CaseSpec c;
  c.name = "worked";
  c.backends = {"cpu.reference"};
  c.num_qo_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim_qk = c.head_dim_vo = 128;
  // conventions.md section 4, example 1: ragged prefill
  c.kv_cache.storage = KvStorage::kRagged;
  c.kv_cache.page_size = 1;
  c.kv_cache.null_page = false;
  c.requests = {{512, 4096}, {16, 8192}};
  {
    const Plan p = make_plan(c);
    const FlashInferPlan fi = forced_plan(c, p);
    ASSERT_TRUE(fi.available) << fi.why;
    EXPECT_EQ(fi.max_batch_size_if_split, 33);
    EXPECT_EQ(fi.cta_tile_q, 128);
    EXPECT_EQ(fi.kv_chunk_size, 4096);
    EXPECT_TRUE(fi.split_kv);
    EXPECT_EQ(fi.new_batch_size, 18);
    EXPECT_EQ(std::count(fi.request_indices.begin(), fi.request_indices.end(), 0), 16);  // 16 q-tiles x 1 chunk
    EXPECT_EQ(std::count(fi.request_indices.begin(), fi.request_indices.end(), 1), 2);   // 1 q-tile x 2 chunks
    expect_same_plan(p.split, fi);
  }
  // example 2: decode through the prefill planner, page 16
  c.kv_cache.storage = KvStorage::kPaged;
  c.kv_cache.page_size = 16;
  c.requests = {{1, 1000}, {1, 3000}, {1, 500}, {1, 7000}};
  {
    const Plan p = make_plan(c);
    const FlashInferPlan fi = forced_plan(c, p);
    ASSERT_TRUE(fi.available) << fi.why;
    EXPECT_EQ(fi.kv_indptr, (std::vector<int>{0, 63, 251, 283, 721}));
    EXPECT_EQ(fi.cta_tile_q, 16);
    EXPECT_EQ(fi.kv_chunk_size, 24 * 16);
    EXPECT_EQ(fi.new_batch_size, 32);
    EXPECT_EQ(fi.merge_indptr, (std::vector<int>{0, 3, 11, 13, 32}));
    expect_same_plan(p.split, fi);
  }
}

TEST(LibraryPlan, CudaGraphWithFixedSplitOverflowsTheGrid) {
  // a long KV cut into one-page chunks under a CUDA graph: more items than the padded grid, which
  // FlashInfer refuses; the model marks the same refusal (and attnscope still runs every item)
  REQUIRE_FLASHINFER_PLANNER();
  SplitMix64 g(2024);
  for (int trial = 0; trial < 20; ++trial) {
    CaseSpec c;
    c.name = "graph-overflow";
    c.backends = {"cpu.reference"};
    c.num_kv_heads = 1 << g.range(0, 2);
    c.num_qo_heads = c.num_kv_heads * g.range(1, 4);
    c.head_dim_qk = c.head_dim_vo = 128;
    c.kv_cache.page_size = 16;
    c.requests = {{1, g.range(2000, 9000)}};
    c.split.planner = Planner::kFixed;
    c.split.fixed_split_size = 1;
    c.split.num_sms = g.range(1, 16);
    c.split.cuda_graph = true;
    SCOPED_TRACE(trial);
    const Plan p = make_plan(c);
    const FlashInferPlan fi = forced_plan(c, p);
    EXPECT_TRUE(fi.refused);
    EXPECT_NE(fi.why.find("padded batch size"), std::string::npos) << fi.why;
    EXPECT_FALSE(p.split.refusal.empty());
    EXPECT_GE(p.split.padded_items, p.split.num_items);
    EXPECT_TRUE(compare_flashinfer_plan(p.split, fi).empty());
    EXPECT_NE(flashinfer_agreement_line(p.split, fi).find("refuses the plan, as the model says"), std::string::npos);
  }
}

TEST(LibraryPlan, SplitOffRecordsTheUnboundedChunk) {
  REQUIRE_FLASHINFER_PLANNER();
  CaseSpec c = planner_case(7);
  c.split = {};
  c.split.planner = Planner::kOff;
  c.kv_cache.storage = KvStorage::kPaged;
  c.kv_cache.page_size = 16;
  c.kv_cache.null_page = true;
  c.attention = {};
  const Plan p = make_plan(c);
  const FlashInferPlan fi = forced_plan(c, p);
  ASSERT_TRUE(fi.available) << fi.why;
  EXPECT_TRUE(fi.disable_split_kv);
  EXPECT_TRUE(fi.kv_chunk_unbounded);  // INT64_MAX pages x 16 does not fit: flagged, not compared as a number
  EXPECT_FALSE(fi.split_kv);
  expect_same_plan(p.split, fi);
}

TEST(LibraryPlan, ProfileAnswersReachTheTileRule) {
  // (qk, vo) = (448, 256) decode, 2-byte KV: one Q tile + one K/V step of the 1x4 layout needs
  // 104448 B. The H100 profile (232448 B) allows tile 16; a 99 KB part (101376 B) makes FlashInfer
  // fall back to 64. The model assumes the H100 profile, so it agrees with the first only.
  REQUIRE_FLASHINFER_PLANNER();
  CaseSpec c;
  c.name = "smem";
  c.backends = {"cpu.reference"};
  c.num_qo_heads = c.num_kv_heads = 2;
  c.head_dim_qk = 448;
  c.head_dim_vo = 256;
  c.dtype = DType::kFp16;
  c.requests = {{1, 300}, {1, 900}};
  const Plan p = make_plan(c);
  EXPECT_EQ(p.split.cta_tile_q, 16);
  EXPECT_EQ(forced_plan(c, p).cta_tile_q, 16);
  DeviceProfile small = h100_profile(c.split.num_sms, "a 99 KB part");
  small.max_smem_per_block_optin = 101376;
  const FlashInferPlan fi = flashinfer_library_plan(c, p.units, &small);
  ASSERT_TRUE(fi.available) << fi.why;
  EXPECT_EQ(fi.cta_tile_q, 64);
  const auto diffs = compare_flashinfer_plan(p.split, fi);
  ASSERT_FALSE(diffs.empty());
  EXPECT_EQ(diffs.front().field, "cta_tile_q");
  // the SM count reaches PrefillPlanImpl too: its workspace holds the partials of the padded grid
  // it derived from the profile's SMs, which must be the grid PrefillSplitQOKVIndptr returned
  const FlashInferPlan h = forced_plan(c, p);
  ASSERT_TRUE(h.split_kv);
  const int64_t rows = (static_cast<int64_t>(h.padded_batch_size) * h.cta_tile_q + c.group_size() - 1) / c.group_size();
  const int64_t v_bytes = c.num_qo_heads * rows * c.head_dim_vo * 4;
  EXPECT_EQ(h.float_workspace_bytes, (v_bytes + 15) / 16 * 16 + c.num_qo_heads * rows * 4);
}

TEST(LibraryPlan, EveryPlanCarriesTheLibraryPlan) {
  // plan_case fills library_plans.flashinfer for every case; flash_attn says why there is none,
  // and the device source is stated (a profile, never silently)
  for (uint64_t seed = 0; seed < 60; ++seed) {
    const CaseSpec c = attnscope::testing::random_case(seed);
    const Plan p = plan_case(c);
    const FlashInferPlan& fi = p.library.flashinfer;
    SCOPED_TRACE(c.name);
    if (!flashinfer_planner_compiled()) {
      EXPECT_FALSE(fi.ran);
      EXPECT_NE(fi.why.find("not compiled"), std::string::npos) << fi.why;
      continue;
    }
    EXPECT_FALSE(fi.device.source.empty());
    if (!fi.device.from_device) {
      EXPECT_NE(fi.device.source.find("profile H100 SXM"), std::string::npos) << fi.device.source;
      EXPECT_EQ(fi.device.sm_count, c.split.num_sms);
    }
    if (c.split.planner == Planner::kFlashAttn) {
      EXPECT_FALSE(fi.ran);
      EXPECT_NE(fi.why.find("flash_attn"), std::string::npos) << fi.why;
      EXPECT_NE(flashinfer_agreement_line(p.split, fi).find("not run"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(fi.ran);
    if (c.split.fixed_tile_q) {
      // fixed_tile_q is no FlashInfer argument: a different tile is reported with the reason
      EXPECT_NE(fi.note.find("fixed_tile_q"), std::string::npos);
      if (fi.cta_tile_q != p.split.cta_tile_q) {
        EXPECT_NE(flashinfer_agreement_line(p.split, fi).find("cta_tile_q"), std::string::npos);
      }
    } else if (!fi.device.from_device) {
      EXPECT_EQ(flashinfer_agreement_line(p.split, fi).find("differs"), std::string::npos)
          << flashinfer_agreement_line(p.split, fi);
    }
  }
}
