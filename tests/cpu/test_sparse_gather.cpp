// A /sparse case's gathered form (sparse_gather.h): one request per query row over a page table of page
// size 1 holding the kept tokens' slots, as the engines feed sparse MLA decode; cpu.tiled runs it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnscope/compare.h"
#include "attnscope/registry.h"
#include "attnscope/sparse_gather.h"
#include "mla_case_gen.h"

using namespace attnscope;

namespace {

// Absorbed MLA, page size 4, contiguous pages after the null page: request 0 (10 keys) has pages 1, 2, 3
// and request 1 (6 keys) pages 4, 5. Given rows, -1 padded to top_k 4.
CaseSpec hand_case() {
  CaseSpec c = attnscope::testing::mla_case(3, true);
  c.kv_cache.page_size = 4;
  c.kv_cache.allocation = PageAlloc::kContiguous;
  c.kv_cache.layout = KvLayout::kNHD;
  c.kv_cache.null_page = true;
  c.requests = {RequestSpec{.q_len = 2, .kv_len = 10}, RequestSpec{.q_len = 1, .kv_len = 6}};
  SparseSpec s;
  s.top_k = 4;
  s.indices = {{{8, 0, 5, -1}, {9, 4, -1, -1}}, {{5, 1, 2, 3}}};
  c.sparse = s;
  validate_case(c);
  return c;
}

Result run_id(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w, const BackendInfo* info = nullptr) {
  auto b = make_backend(id);
  return run_backend(*b, c, p, w, RunOptions{}, info);
}

}  // namespace

TEST(SparseGather, SlotTableByHand) {
  const CaseSpec c = hand_case();
  const Plan p = make_plan(c);
  ASSERT_EQ(p.pages.indices, (std::vector<int>{1, 2, 3, 4, 5}));
  const SparseGather g = gather_sparse(c, p);
  ASSERT_EQ(g.c.requests.size(), 3u);
  EXPECT_EQ(g.c.requests[0].kv_len, 3);
  EXPECT_EQ(g.c.requests[1].kv_len, 2);
  EXPECT_EQ(g.c.requests[2].kv_len, 4);
  for (const RequestSpec& r : g.c.requests) EXPECT_EQ(r.q_len, 1);
  EXPECT_FALSE(g.c.sparse);
  EXPECT_EQ(g.kept, 9);
  EXPECT_EQ(g.p.pages.page_size, 1);
  EXPECT_EQ(g.p.pages.indptr, (std::vector<int>{0, 3, 5, 9}));
  // token 8 of request 0: page column 2 -> page 3, slot 3*4+0; token 0: page 1 -> 4; token 5: page 2 -> 9
  EXPECT_EQ(g.p.pages.indices, (std::vector<int>{12, 4, 9, 13, 8, 21, 17, 18, 19}));
  EXPECT_EQ(g.p.pages.num_pages, 6 * 4);
  EXPECT_EQ(g.p.pages.owner[12], 0);
  EXPECT_EQ(g.p.pages.owner[0], kPageUnused);
}

// cpu.tiled runs the gathered form through run_backend, within the 2x rule of the references (which
// run the mask bits) and close to its own mask-bit run; the poisoned unused slots are never read.
TEST(SparseGather, CpuTiledGatheredPassesTheTwiceLowpRule) {
  int gathered = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    CaseSpec c = attnscope::testing::mla_case(seed, seed % 4 != 0);
    c.kv_cache.layout = KvLayout::kNHD;
    c.kv_cache.poison_unused = true;
    SparseSpec s;
    s.top_k = 1 + static_cast<int>(seed % 5) * 7;
    s.index_heads = 2;
    s.index_head_dim = 16;
    c.sparse = s;
    validate_case(c);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result ref = run_id("cpu.reference", c, p, w), low = run_id("cpu.lowp", c, p, w), til = run_id("cpu.tiled", c, p, w);
    ASSERT_TRUE(ref.ok() && low.ok() && til.ok()) << til.message;
    EXPECT_NE(til.message.find("/sparse gathered: " + std::to_string(c.total_q()) + " query rows as requests"), std::string::npos)
        << til.message;
    ++gathered;
    ComparisonSpec k{"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"};
    const DiffReport d = compare_results(c, til, ref, k, &low);
    EXPECT_TRUE(d.verdict.pass) << "seed " << seed << ": " << d.verdict.detail;
    EXPECT_EQ(d.o.nan_a, 0);
    // the mask-bit run visits the keys in index order, the gathered one in rank order: fp32 sums close
    const Result bits = make_backend("cpu.tiled")->run(c, p, w, RunOptions{});
    ASSERT_EQ(bits.o.size(), til.o.size());
    for (size_t i = 0; i < til.o.size(); ++i) ASSERT_NEAR(til.o[i], bits.o[i], 1e-2 * std::max(1.0f, std::fabs(bits.o[i]))) << i;
  }
  EXPECT_EQ(gathered, 12);
}

// Where there is no gathered form: cpu.tiled runs the mask bits and says why; a backend that only runs
// the gathered form is refused naming the rule.
TEST(SparseGather, NoGatheredFormIsNamed) {
  CaseSpec c = hand_case();
  c.sparse->indices[0][1] = {-1, -1, -1, -1};
  validate_case(c);
  EXPECT_NE(sparse_gather_refusal(c).find("/sparse/indices/0/1 keeps no token"), std::string::npos) << sparse_gather_refusal(c);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result til = run_id("cpu.tiled", c, p, w);
  ASSERT_TRUE(til.ok()) << til.message;
  EXPECT_NE(til.message.find("/sparse through the plan's mask bits (no gathered form: /sparse/indices/0/1 keeps no token"),
            std::string::npos)
      << til.message;
  const size_t row = (1 * c.num_qo_heads) * c.head_dim_vo;  // token 1, head 0: a fully masked row
  EXPECT_EQ(til.o[row], 0.0f);
  EXPECT_TRUE(std::isinf(til.lse[c.num_qo_heads]) && til.lse[c.num_qo_heads] < 0);

  BackendInfo only = *backend_info("cpu.tiled");
  only.sparse = SparseRun::kGathered;
  const Result r = run_id("cpu.tiled", c, p, w, &only);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message.find("cpu.tiled runs /sparse in its gathered form (one request per query row over a page table of page "
                           "size 1): /sparse/indices/0/1 keeps no token"),
            std::string::npos)
      << r.message;

  CaseSpec hnd = attnscope::testing::mla_case(5, false);
  hnd.kv_cache.layout = KvLayout::kHND;
  hnd.num_qo_heads = hnd.num_kv_heads = 2;
  hnd.sparse = SparseSpec{.top_k = 4, .index_heads = 1, .index_head_dim = 8};
  validate_case(hnd);
  EXPECT_EQ(sparse_gather_refusal(hnd).find("/kv_cache/layout HND with 2 KV heads"), 0u) << sparse_gather_refusal(hnd);

  CaseSpec many = hand_case();
  many.sparse->indices.clear();
  many.requests = {RequestSpec{.q_len = kMaxRequests + 1, .kv_len = kMaxRequests + 1}};
  EXPECT_EQ(sparse_gather_refusal(many), "the gathered form has one request per query row: 4097 rows, more than 4096 requests");
}
