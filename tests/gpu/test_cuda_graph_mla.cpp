// /cuda_graph with /mla on the GPU: flashinfer.mla (FlashInfer's MLA kernel, mla.cuh, planned by
// MLAPlan) captured at the bucket and replayed for the real absorbed decode batch padded as SGLang's
// flashinfer_mla backend pads it (padded entries with no keys), on seeded random cases with shuffled
// pools and poisoned unused pages: the real rows bit-identical to the eager run (MLAPlan cuts each
// live request into the same pieces with or without zero-key padding, see fi_mla.cu), and, through
// the session, within the 2x rule of cuda.reference; the padded rows O = 0; the fit verdict.
// Skips with the reason without a device or the flashinfer family.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "attnscope/cuda_graph_pad.h"
#include "attnscope/graph_replay.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "case_json.h"
#include "gpu_test_util.h"
#include "graph_test_util.h"
#include "require.h"
#include "session.h"

using namespace attnscope;
using attnscope::testing::check_of;
using attnscope::testing::checks_text;
using attnscope::testing::gpu_cases;
using attnscope::testing::run_id;

namespace {

constexpr const char* kMla = "flashinfer.mla";
constexpr const char* kMlaSm90 = "flashinfer.mla_sm90";

// An absorbed MLA decode batch of `live` requests under SGLang's padding at `bucket`: 16..128 heads,
// page sizes 1 / 16 / 64, bf16 or fp16, a shuffled pool with its unused pages poisoned; every other
// case one long request, so the plan splits it (split pieces and merge CTAs in the replay).
CaseSpec mla_graph_case(uint64_t seed, int live, int bucket) {
  SplitMix64 g(seed * 7919 + 3);
  CaseSpec c;
  c.name = "mla-graph-" + std::to_string(seed);
  c.mla = MlaSpec{};
  const int heads[] = {16, 64, 128};
  c.num_qo_heads = heads[g.range(0, 2)];
  c.num_kv_heads = 1;
  c.head_dim_qk = 576;
  c.head_dim_vo = 512;
  c.dtype = g.range(0, 2) == 0 ? DType::kFp16 : DType::kBf16;
  const int pages[] = {1, 16, 64};
  c.kv_cache.page_size = pages[seed % 3];
  c.kv_cache.allocation = PageAlloc::kShuffled;
  c.kv_cache.allocation_seed = seed;
  c.kv_cache.poison_unused = true;
  c.attention.causal = g.range(0, 3) != 0;
  c.split.num_sms = 132;
  c.split.cuda_graph = true;
  c.cuda_graph = CudaGraphSpec{bucket, GraphEngine::kSglang};
  for (int i = 0; i < live; ++i) {
    RequestSpec r;
    r.q_len = 1;
    r.kv_len = (i == 0 && seed % 2 == 0) ? g.range(1200, 2000) : g.range(1, 200);
    c.requests.push_back(r);
  }
  c.data.seed = seed;
  c.backends = {"cuda.reference", "cpu.lowp", kMla};
  validate_case(c, &registry_ids());
  return c;
}

#define REQUIRE_FLASHINFER_MLA()                  \
  do {                                            \
    REQUIRE_GPU();                                \
    REQUIRE_TAKES(kMla, mla_graph_case(1, 1, 2)); \
  } while (0)

// Elements whose bits differ (NaN equal to NaN); a size mismatch counts every element.
int64_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::max(a.size(), b.size()));
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i]))) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// n random batches captured on `id` at a bucket and replayed: the real rows bit-identical to the
// eager run of the same backend, the padded rows as expected, the captured launch's grid kept.
void expect_random_batches_replay(const char* id, int n) {
  for (int i = 0; i < n; ++i) {
    const int live = 1 + (i * 5) % 9;
    CaseSpec c = mla_graph_case(200 + i, live, live + (i % 3 == 0 ? 0 : 1 + i * 3 % 11));
    c.backends = {"cuda.reference", "cpu.lowp", id};
    const std::string label = std::string(id) + " " + c.name + " (" + std::to_string(c.num_qo_heads) + " heads, page " +
                              std::to_string(c.kv_cache.page_size) + ", " + std::to_string(live) + " live, bucket " +
                              std::to_string(c.cuda_graph->bucket) + ")";
    SCOPED_TRACE(label);
    const Plan p = plan_case(c);
    const Workload w = make_workload(c, p.pages);
    const Result eager = run_id(id, c, p, w);
    ASSERT_TRUE(eager.ok()) << eager.message;
    auto b = make_backend(id);
    auto* cap = dynamic_cast<GraphReplayable*>(b.get());
    ASSERT_NE(cap, nullptr) << id << " does not capture";
    const GraphReplayReport g = cap->capture_replay(c, p, cuda_graph_pad(c, p.pages));
    ASSERT_TRUE(g.captured) << g.not_captured;
    EXPECT_FALSE(g.failed()) << checks_text(g);
    for (const char* what : {"padded rows", "fits the captured grid"}) {
      const GraphCheck* k = check_of(g, what);
      ASSERT_NE(k, nullptr) << "no check " << what << checks_text(g);
      EXPECT_TRUE(k->pass && !k->skipped) << what << ": " << k->detail;
    }
    if (live < c.cuda_graph->bucket) {
      EXPECT_NE(check_of(g, "padded rows")->detail.find("all as expected"), std::string::npos) << checks_text(g);
    }
    // the launch the graph baked in: the same grid for the bucket and the padded batch
    EXPECT_EQ(g.captured_grid.padded_batch, g.replay_grid.padded_batch);
    EXPECT_EQ(g.captured_grid.kv_heads, g.replay_grid.kv_heads);
    EXPECT_GT(g.captured_grid.padded_batch, 0);
    EXPECT_EQ(bit_differences(g.o, eager.o), 0) << "O differs from the eager run";
    EXPECT_EQ(bit_differences(g.lse, eager.lse), 0) << "LSE differs from the eager run";
  }
}

}  // namespace

TEST(CudaGraphMlaGpu, RandomDecodeBatchesReplayBitIdenticalToTheEagerRun) {
  REQUIRE_FLASHINFER_MLA();
  expect_random_batches_replay(kMla, gpu_cases(6, 2));
}

// The Hopper kernel (mla_hopper.cuh) on the same MLAPlan schedule: SGLang's capture batch is all
// zero-key entries, and the padded rows must still be FlashInfer's empty state (O = 0, LSE -inf).
TEST(CudaGraphMlaGpu, TheHopperKernelReplaysBitIdenticalToItsEagerRun) {
  REQUIRE_FLASHINFER_MLA();
  if (const std::string why = make_backend(kMlaSm90)->check(mla_graph_case(1, 1, 2)); !why.empty())
    GTEST_SKIP() << kMlaSm90 << ": " << why;
  expect_random_batches_replay(kMlaSm90, gpu_cases(4, 2));
}

TEST(CudaGraphMlaGpu, SessionChecksTheReplayAgainstTheReference) {
  REQUIRE_FLASHINFER_MLA();
  const int n = gpu_cases(2, 1);
  for (int i = 0; i < n; ++i) {
    const CaseSpec c = mla_graph_case(300 + 2 * i, 5 + i, 16);  // an even seed: one long, split request
    SCOPED_TRACE(c.name);
    auto s = run_session(CaseFile{c});
    const Result* r = s->result(kMla);
    ASSERT_NE(r, nullptr);
    ASSERT_TRUE(r->ok()) << r->message;
    ASSERT_TRUE(r->graph.has_value());
    const GraphReplayReport& g = *r->graph;
    ASSERT_TRUE(g.captured) << g.not_captured;
    EXPECT_EQ(g.engine, "sglang");
    EXPECT_FALSE(g.failed()) << checks_text(g);
    for (const char* what : {"real rows", "padded rows", "fits the captured grid"}) {
      const GraphCheck* k = check_of(g, what);
      ASSERT_NE(k, nullptr) << "no check " << what << checks_text(g);
      EXPECT_FALSE(k->skipped) << what << ": " << k->detail;
    }
    EXPECT_TRUE(g.replay_grid.split_kv) << "the long request is split in the replay plan: " << checks_text(g);
    EXPECT_NE(s->summary().state, RunSummary::State::kFailed) << s->summary().line();
  }
}
