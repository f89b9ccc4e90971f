// The DSA engines' index buffers (model/src/engine_metadata_dsa.cpp, docs/dsa.md section 6) against values
// worked out by hand from SGLang's nsa_backend.py / dsa/transform_index.py and vLLM's flashmla_sparse.py /
// sparse_utils.py at the commits engine_source() names: given /sparse/indices with -1 padding, 4-token
// pages behind the null page, each kept logical position translated to page * 4 + offset.
#include <gtest/gtest.h>

#include "attnscope/engine_metadata.h"
#include "attnscope/plan.h"
#include "engine_view_util.h"

using namespace attnscope;
using attnscope::testing::shape;
using attnscope::testing::V;
using attnscope::testing::values;

namespace {

// Absorbed MLA with DeepSeek's dims, page size 4, the null page reserved (request r's pages follow
// request r-1's from page 1), top_k 4 and the selection given.
CaseSpec dsa_case(const std::vector<std::pair<int, int>>& q_kv, const std::vector<std::vector<std::vector<int>>>& idx) {
  CaseSpec c;
  c.name = "dsa-engine";
  c.mla = MlaSpec{};
  c.num_qo_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim_qk = 576;
  c.head_dim_vo = 512;
  c.dtype = DType::kBf16;
  c.kv_cache.page_size = 4;
  c.attention.causal = true;
  for (auto [q, kv] : q_kv) {
    RequestSpec r;
    r.q_len = q;
    r.kv_len = kv;
    c.requests.push_back(r);
  }
  SparseSpec s;
  s.top_k = 4;
  s.indices = idx;
  c.sparse = s;
  c.backends = {"cpu.reference"};
  validate_case(c);
  return c;
}

// Request 0 decodes at position 5 (pages 1, 2), request 1 extends by 2 at positions 5 and 6 (pages 3, 4).
CaseSpec two_requests() { return dsa_case({{1, 6}, {2, 7}}, {{{5, 0, 3, -1}}, {{4, 1, -1, -1}, {6, 2, 5, 0}}}); }

}  // namespace

// slots: request 0: 5 -> page 2, offset 1 = 9; 0 -> 4; 3 -> 7. Request 1: 4 -> page 4 = 16; 1 -> 13;
// 6 -> 18; 2 -> 14; 5 -> 17; 0 -> 12.
const V kSlots = {9, 4, 7, -1, 16, 13, -1, -1, 18, 14, 17, 12};
const V kLogical = {5, 0, 3, -1, 4, 1, -1, -1, 6, 2, 5, 0};

TEST(EngineDsa, SglangNsaExtendTranslatesThroughPageTable1) {
  const CaseSpec c = two_requests();
  const EngineView v = engine_metadata(Engine::kSglangNsa, c, make_plan(c));
  ASSERT_FALSE(v.refusal) << *v.refusal;
  EXPECT_EQ(v.mode, "extend");
  EXPECT_EQ(values(v, "cache_seqlens_int32"), (V{6, 7}));
  EXPECT_EQ(values(v, "cu_seqlens_k"), (V{0, 6, 13}));
  EXPECT_EQ(values(v, "max_seq_len_q"), (V{2}));  // a cached prefix: the longest extend
  EXPECT_EQ(values(v, "max_seq_len_k"), (V{7}));
  EXPECT_EQ(values(v, "cu_seqlens_q"), (V{0, 1, 3}));
  EXPECT_EQ(shape(v, "page_table_1"), (V{2, 7}));
  EXPECT_EQ(values(v, "page_table_1"), (V{4, 5, 6, 7, 8, 9, 0, 12, 13, 14, 15, 16, 17, 18}));
  EXPECT_EQ(values(v, "real_page_table"), (V{1, 2, 3, 4}));  // page_table_1[:, ::4] // 4
  EXPECT_EQ(values(v, "nsa_seqlens_expanded"), (V{6, 6, 7}));
  EXPECT_EQ(values(v, "nsa_cache_seqlens_int32"), (V{4, 4, 4}));  // clipped to top_k
  EXPECT_EQ(values(v, "nsa_cu_seqlens_k"), (V{0, 4, 8, 12}));
  EXPECT_EQ(values(v, "indexer_k_start_end.ks"), (V{0, 6, 6}));
  EXPECT_EQ(values(v, "indexer_k_start_end.ke"), (V{6, 12, 13}));
  EXPECT_EQ(values(v, "token_to_batch_idx"), (V{0, 1, 1}));
  EXPECT_EQ(values(v, "topk_indices"), kLogical);
  EXPECT_EQ(shape(v, "page_table_1.transformed"), (V{3, 4}));
  EXPECT_EQ(values(v, "page_table_1.transformed"), kSlots);
  EXPECT_TRUE(v.find("page_table_1.transformed")->slots);
  EXPECT_NE(v.find("topk_indices")->note.find("9 kept and 3 -1 padding of 12 entries (kept per row: 3, 2, 4)"), std::string::npos)
      << v.find("topk_indices")->note;
  EXPECT_TRUE(v.mismatches.empty()) << v.mismatches.front();
  bool page_note = false;
  for (const auto& n : v.notes) page_note = page_note || n.find("page_size 4: SGLang's nsa backend runs 64-token") == 0;
  EXPECT_TRUE(page_note);
}

TEST(EngineDsa, SglangNsaDecodeUsesArangeQueriesAndNoIndexerRanges) {
  const CaseSpec c = dsa_case({{1, 6}, {1, 3}}, {{{5, 4, -1, -1}}, {{2, -1, -1, -1}}});
  const EngineView v = engine_metadata(Engine::kSglangNsa, c, make_plan(c));
  ASSERT_FALSE(v.refusal) << *v.refusal;
  EXPECT_EQ(v.mode, "decode");
  EXPECT_EQ(values(v, "cu_seqlens_q"), (V{0, 1, 2}));
  EXPECT_EQ(values(v, "max_seq_len_q"), (V{1}));
  EXPECT_EQ(values(v, "nsa_cache_seqlens_int32"), (V{4, 3}));
  EXPECT_EQ(v.find("indexer_k_start_end.ks"), nullptr) << "prefill only (_cal_indexer_k_start_end)";
  // request 1 (3 keys) has page 3: key 2 -> 14
  EXPECT_EQ(values(v, "page_table_1.transformed"), (V{9, 8, -1, -1, 14, -1, -1, -1}));
}

TEST(EngineDsa, VllmConvertsToGlobalSlotsWithValidCounts) {
  const CaseSpec c = two_requests();
  const EngineView v = engine_metadata(Engine::kVllmFlashMlaSparse, c, make_plan(c));
  ASSERT_FALSE(v.refusal) << *v.refusal;
  EXPECT_EQ(v.request_order, (std::vector<int>{0, 1}));  // both decodes below the threshold of 256
  EXPECT_EQ(values(v, "query_start_loc"), (V{0, 1, 3}));
  EXPECT_EQ(values(v, "seq_lens"), (V{6, 7}));
  EXPECT_EQ(values(v, "block_table"), (V{1, 2, 3, 4}));
  EXPECT_EQ(values(v, "req_id_per_token"), (V{0, 1, 1}));
  EXPECT_EQ(values(v, "topk_indices_buffer"), kLogical);
  EXPECT_EQ(values(v, "topk_indices"), kSlots);
  EXPECT_EQ(values(v, "topk_length"), (V{3, 2, 4}));
  EXPECT_TRUE(v.mismatches.empty()) << v.mismatches.front();
}

// A prefill without context goes after the decode (reorder_batch_to_split_decodes_and_prefills): the rows
// follow vLLM's batch, req_id_per_token its positions.
TEST(EngineDsa, VllmRowsFollowTheReorderedBatch) {
  const CaseSpec c = dsa_case({{3, 3}, {1, 5}}, {{{0, -1, -1, -1}, {1, 0, -1, -1}, {2, 0, 1, -1}}, {{4, 0, -1, -1}}});
  const EngineView v = engine_metadata(Engine::kVllmFlashMlaSparse, c, make_plan(c));
  ASSERT_FALSE(v.refusal) << *v.refusal;
  EXPECT_EQ(v.request_order, (std::vector<int>{1, 0}));
  EXPECT_EQ(values(v, "query_start_loc"), (V{0, 1, 4}));
  EXPECT_EQ(values(v, "seq_lens"), (V{5, 3}));
  EXPECT_EQ(values(v, "block_table"), (V{2, 3, 1, 0}));  // request 0's one page, then 0
  EXPECT_EQ(values(v, "req_id_per_token"), (V{0, 1, 1, 1}));
  // request 1 (pages 2, 3): 4 -> 12, 0 -> 8; request 0 (page 1): 0 -> 4, 1 -> 5, 2 -> 6
  EXPECT_EQ(values(v, "topk_indices"), (V{12, 8, -1, -1, 4, -1, -1, -1, 5, 4, -1, -1, 6, 4, 5, -1}));
  EXPECT_EQ(values(v, "topk_length"), (V{2, 1, 2, 3}));
}

TEST(EngineDsa, RefusalsNameThePath) {
  const CaseSpec c = two_requests();
  auto refusal = [](Engine e, const CaseSpec& x) { return engine_metadata(e, x, make_plan(x)).refusal.value_or("none"); };
  EXPECT_EQ(refusal(Engine::kSglangFa, c).rfind("/sparse: SGLang serves DeepSeek sparse attention through its nsa", 0), 0u);
  EXPECT_EQ(refusal(Engine::kVllmFlashInfer, c).rfind("/sparse: vLLM serves DeepSeek sparse attention through FLASHMLA", 0), 0u);
  CaseSpec dense = c;
  dense.sparse.reset();
  validate_case(dense);
  EXPECT_EQ(refusal(Engine::kSglangNsa, dense).rfind("/sparse: the case has no DeepSeek sparse attention", 0), 0u);
  EXPECT_EQ(refusal(Engine::kVllmFlashMlaSparse, dense).rfind("/sparse: ", 0), 0u);
  CaseSpec cap = c;
  cap.attention.soft_cap = 30;
  EXPECT_EQ(refusal(Engine::kSglangNsa, cap).rfind("/attention/soft_cap: ", 0), 0u);
}

TEST(EngineDsa, IdsAndTheCaseEngineField) {
  EXPECT_EQ(parse_engine("sglang-nsa"), Engine::kSglangNsa);
  EXPECT_EQ(parse_engine("vllm-flashmla-sparse"), Engine::kVllmFlashMlaSparse);
  EXPECT_STREQ(engine_id(Engine::kVllmFlashMlaSparse), "vllm-flashmla-sparse");
  EXPECT_STREQ(engine_source(Engine::kSglangNsa).commit, "005e8bf8abf447d93cd14427efbf0b10bf42a326");
  EXPECT_FALSE(engine_feeds_backends(Engine::kSglangNsa));
  EXPECT_TRUE(engine_feeds_backends(Engine::kSglangFa));
  CaseSpec c = two_requests();
  c.engine = "sglang-nsa";  // a view only: no backend is fed from it
  try {
    validate_case(c);
    ADD_FAILURE() << "accepted /engine sglang-nsa";
  } catch (const CaseError& e) {
    EXPECT_EQ(e.path(), "/engine");
    EXPECT_NE(std::string(e.what()).find("a view of plan --engine only"), std::string::npos) << e.what();
  }
}
