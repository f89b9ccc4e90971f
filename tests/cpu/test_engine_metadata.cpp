// Engine metadata against values worked out by hand from the engines' code (SGLang's
// flashattention_backend.py, vLLM's flashinfer.py and v1/attention/backends/utils.py at the commits
// engine_metadata.h names): one batch or more per forward mode, the refusals, the mismatches.
#include <gtest/gtest.h>

#include "attnscope/engine_metadata.h"
#include "case_builders.h"
#include "engine_view_util.h"

using namespace attnscope;
using attnscope::testing::shape;
using attnscope::testing::V;
using attnscope::testing::values;
using Rows = std::vector<std::vector<int64_t>>;

namespace {

// A contiguous pool: with null_page false request r's pages follow request r-1's from page 0.
CaseSpec mk(const std::vector<std::pair<int, int>>& q_kv, int page_size, bool null_page = false) {
  CaseSpec c;
  c.head_dim_qk = c.head_dim_vo = 64;
  c.backends = {"cpu.reference"};
  c.kv_cache.page_size = page_size;
  c.kv_cache.null_page = null_page;
  attnscope::testing::add_requests(c, q_kv);
  return c;
}

EngineView view(Engine e, const CaseSpec& c) { return engine_metadata(e, c, make_plan(c)); }

V flat(const Rows& r) {
  V out;
  for (const auto& row : r) out.insert(out.end(), row.begin(), row.end());
  return out;
}

// The batch of the make_local_attention_virtual_batches comment in both engines.
const std::vector<std::pair<int, int>> kDocBatch = {{4, 6}, {10, 17}, {5, 9}};

}  // namespace

// The comment's example, as the code computes it. Its cu_seqlens_q_local line, [0, 4, 6, 10, 14, 18,
// 19, 23, 24], is not the prefix sum of its own seqlens_q_local [2, 2, 1, 4, 4, 1, 4, 1] (it sums to
// 24 for 19 queries); np.pad(np.cumsum(seqlens_q_local)) gives the values below.
TEST(EngineLocal, TheCommentExampleAsTheCodeComputesIt) {
  Rows table = {
      {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, {20, 21, 22, 23, 24, 25, 26, 27, 28, 29}};
  const auto lb = engine_detail::local_virtual_batches(
      4, {4, 10, 5}, {6, 17, 9}, [&table](int r, int col) { return table[r][col]; }, 10, 2);
  EXPECT_EQ(lb.seqlens_q, (std::vector<int>{2, 2, 1, 4, 4, 1, 4, 1}));
  EXPECT_EQ(lb.cu_seqlens_q, (std::vector<int>{0, 2, 4, 5, 9, 13, 14, 18, 19}));
  EXPECT_EQ(lb.seqlens_k, (std::vector<int>{4, 2, 4, 4, 4, 1, 4, 1}));
  EXPECT_EQ(lb.k_start, (std::vector<int>{0, 4, 4, 8, 12, 16, 4, 8}));
  EXPECT_EQ(lb.block_table, (Rows{{0, 1}, {2, 3}, {12, 13}, {14, 15}, {16, 17}, {18, 19}, {22, 23}, {24, 25}}));
}

TEST(EngineLocal, SglangShrinksTheChunkToAPageMultipleOfTheLongestSequence) {
  EXPECT_EQ(engine_detail::sglang_effective_chunk(8192, 100, 16), 96);
  EXPECT_EQ(engine_detail::sglang_effective_chunk(8192, 100, 1), 100);
  EXPECT_EQ(engine_detail::sglang_effective_chunk(8192, 10, 16), 16);  // less than a page: one page
  EXPECT_EQ(engine_detail::sglang_effective_chunk(4, 17, 2), 4);
}

// reorder_batch_to_split_decodes_and_prefills' swap loop, traced by hand.
TEST(EngineReorder, DecodesFirstThenExtendsThenPrefills) {
  // extend, decode, decode -> positions 0 and 2 swap
  EXPECT_EQ(engine_detail::vllm_reorder({5, 1, 1}, {10, 20, 30}, 1), (std::vector<int>{2, 1, 0}));
  // prefill, decode, extend -> a 3-cycle
  EXPECT_EQ(engine_detail::vllm_reorder({3, 1, 4}, {3, 9, 10}, 1), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(engine_detail::vllm_reorder({1, 1}, {4, 4}, 1), (std::vector<int>{0, 1}));
}

TEST(EngineSglang, ExtendWithLocalAttentionPageSizeOne) {
  const CaseSpec c = [] {
    CaseSpec c = mk(kDocBatch, 1);
    c.attention.local_chunk = 4;
    return c;
  }();
  const EngineView v = view(Engine::kSglangFa, c);
  ASSERT_FALSE(v.refusal) << *v.refusal;
  EXPECT_EQ(v.mode, "extend+local");
  EXPECT_EQ(values(v, "cache_seqlens_int32"), (V{6, 17, 9}));
  EXPECT_EQ(values(v, "max_seq_len_k"), (V{17}));
  EXPECT_EQ(values(v, "cu_seqlens_k"), (V{0, 6, 23, 32}));
  EXPECT_EQ(values(v, "max_seq_len_q"), (V{10}));
  EXPECT_EQ(values(v, "cu_seqlens_q"), (V{0, 4, 14, 19}));
  EXPECT_EQ(shape(v, "page_table"), (V{3, 17}));
  V pt(51, 0);
  for (int t = 0; t < 6; ++t) pt[t] = t;
  for (int t = 0; t < 17; ++t) pt[17 + t] = 6 + t;
  for (int t = 0; t < 9; ++t) pt[34 + t] = 23 + t;
  EXPECT_EQ(values(v, "page_table"), pt);
  EXPECT_EQ(values(v, "window_size"), (V{-1, -1}));
  const std::string l = "local_attn_metadata.";
  EXPECT_EQ(values(v, l + "local_query_start_loc"), (V{0, 2, 4, 5, 9, 13, 14, 18, 19}));
  EXPECT_EQ(values(v, l + "local_seqused_k"), (V{4, 2, 4, 4, 4, 1, 4, 1}));
  // rows of req_to_token (width 17, 0 past a request), columns clipped to 16
  EXPECT_EQ(values(v, l + "local_block_table"), flat({{0, 1, 2, 3},
                                                      {4, 5, 0, 0},
                                                      {10, 11, 12, 13},
                                                      {14, 15, 16, 17},
                                                      {18, 19, 20, 21},
                                                      {22, 22, 22, 22},
                                                      {27, 28, 29, 30},
                                                      {31, 0, 0, 0}}));
  EXPECT_EQ(values(v, l + "local_max_query_len"), (V{4}));
  EXPECT_EQ(values(v, l + "local_max_seq_len"), (V{4}));
  EXPECT_TRUE(v.mismatches.empty()) << v.mismatches[0];
}

// page_size 2: the virtual batches are cut from the token-slot table (before the division into
// pages), so request 1's rows hold token slots where the kernel reads pages.
TEST(EngineSglang, LocalAttentionWithPagesReadsTokenSlotsAsPages) {
  CaseSpec c = mk(kDocBatch, 2);
  c.attention.local_chunk = 4;
  const EngineView v = view(Engine::kSglangFa, c);
  ASSERT_FALSE(v.refusal);
  EXPECT_EQ(values(v, "page_table"),
            flat({{0, 1, 2, 0, 0, 0, 0, 0, 0}, {3, 4, 5, 6, 7, 8, 9, 10, 11}, {12, 13, 14, 15, 16, 0, 0, 0, 0}}));
  EXPECT_EQ(values(v, "local_attn_metadata.local_block_table"),
            flat({{0, 1}, {2, 3}, {8, 9}, {10, 11}, {12, 13}, {14, 15}, {26, 27}, {28, 29}}));
  EXPECT_TRUE(v.find("local_attn_metadata.local_block_table")->slots);
  ASSERT_FALSE(v.mismatches.empty());
  EXPECT_EQ(v.mismatches[0], "virtual batch 2 (request 1): block table column 0 holds 8, the page of keys from 4 is 5");
}

TEST(EngineSglang, DecodeAndVllmDecodeOfTheSameBatch) {
  const CaseSpec c = mk({{1, 5}, {1, 3}, {1, 8}}, 4, true);  // pages [1, 2], [3], [4, 5]
  const EngineView s = view(Engine::kSglangFa, c);
  EXPECT_EQ(s.mode, "decode");
  EXPECT_EQ(values(s, "cache_seqlens_int32"), (V{5, 3, 8}));
  EXPECT_EQ(values(s, "max_seq_len_k"), (V{8}));
  EXPECT_EQ(values(s, "cu_seqlens_k"), (V{0, 5, 8, 16}));
  EXPECT_EQ(values(s, "max_seq_len_q"), (V{1}));
  EXPECT_EQ(values(s, "cu_seqlens_q"), (V{0, 1, 2, 3}));
  EXPECT_EQ(values(s, "page_table"), (V{1, 2, 3, 0, 4, 5}));
  EXPECT_EQ(s.find("local_attn_metadata.local_block_table"), nullptr);

  const EngineView v = view(Engine::kVllmFlashInfer, c);
  EXPECT_EQ(v.mode, "decode");
  EXPECT_EQ(v.request_order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(values(v, "query_start_loc"), (V{0, 1, 2, 3}));
  EXPECT_EQ(values(v, "block_table_tensor"), (V{1, 2, 3, 0, 4, 5}));
  EXPECT_EQ(values(v, "num_decodes"), (V{3}));
  EXPECT_EQ(values(v, "num_prefills"), (V{0}));
  EXPECT_EQ(values(v, "paged_kv_indptr"), (V{0, 2, 3, 5}));
  EXPECT_EQ(values(v, "paged_kv_indices"), (V{1, 2, 3, 4, 5}));
  EXPECT_EQ(values(v, "paged_kv_last_page_len"), (V{1, 3, 4}));
  EXPECT_EQ(values(v, "decode_wrapper.plan.indptr"), (V{0, 2, 3, 5}));
  EXPECT_EQ(values(v, "decode_wrapper.plan.seq_lens"), (V{5, 3, 8}));
  EXPECT_EQ(values(v, "slot_mapping"), (V{8, 14, 23}));  // keys 4, 2, 7 on pages 2, 3, 5
  EXPECT_EQ(v.find("prefill_wrapper.plan.qo_indptr"), nullptr);
}

TEST(EngineSglang, TargetVerifyChainWithAWindow) {
  CaseSpec c = mk({{3, 10}, {3, 7}}, 1);
  c.attention.window = 5;
  const EngineView v = view(Engine::kSglangFa, c);
  EXPECT_EQ(v.mode, "target_verify");
  EXPECT_EQ(values(v, "cache_seqlens_int32"), (V{10, 7}));
  EXPECT_EQ(values(v, "max_seq_len_q"), (V{3}));
  EXPECT_EQ(values(v, "cu_seqlens_q"), (V{0, 3, 6}));
  EXPECT_EQ(values(v, "cu_seqlens_k"), (V{0, 10, 17}));
  EXPECT_EQ(values(v, "window_size"), (V{4, 0}));
  // the same batch with a short cache is an extend
  const EngineView e = view(Engine::kSglangFa, mk({{3, 5}, {3, 7}}, 1));
  EXPECT_EQ(e.mode, "extend");
}

// SGLang's own comment: drafts at slots 8, 9, 10, mask [[1,0,0],[1,1,0],[1,0,1]] -> rows
// [[8,9,10],[8,9,10],[8,10,9]], cache_seqlens_int32 [1, 2, 2].
TEST(EngineSglang, TreeVerifyExpandRowsAsInSglangsComment) {
  CaseSpec c = mk({{3, 11}}, 1);
  c.requests[0].tree_parents = {-1, 0, 0};
  const EngineView v = view(Engine::kSglangFa, c);
  ASSERT_FALSE(v.refusal) << *v.refusal;
  EXPECT_EQ(v.mode, "target_verify_topk");
  EXPECT_EQ(values(v, "expand.page_table"), (V{8, 9, 10, 8, 9, 10, 8, 10, 9}));
  EXPECT_EQ(values(v, "expand.cache_seqlens_int32"), (V{1, 2, 2}));
  EXPECT_EQ(values(v, "cache_seqlens_int32"), (V{8}));
}

TEST(EngineSglang, TreeVerifyTwoRequests) {
  CaseSpec c = mk({{4, 6}, {4, 5}}, 1);  // slots 0..5 and 6..10
  c.requests[0].tree_parents = {-1, 0, 0, 1};
  c.requests[1].tree_parents = {-1, 0, 1, 2};
  const EngineView v = view(Engine::kSglangFa, c);
  ASSERT_FALSE(v.refusal) << *v.refusal;
  EXPECT_EQ(values(v, "cache_seqlens_int32"), (V{2, 1}));
  EXPECT_EQ(values(v, "max_seq_len_q"), (V{4}));
  EXPECT_EQ(values(v, "max_seq_len_k"), (V{2}));
  EXPECT_EQ(values(v, "cu_seqlens_q"), (V{0, 4, 8}));
  EXPECT_EQ(values(v, "cu_seqlens_k"), (V{0, 2, 3}));
  // req_to_token[:, :max_seq_len_k]: request 1 has one prefix key but its draft tokens are in the row
  EXPECT_EQ(values(v, "page_table"), (V{0, 1, 6, 7}));
  EXPECT_EQ(values(v, "expand.cu_seqlens_q"), (V{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(
      values(v, "expand.page_table"),
      flat({{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 4, 3, 5}, {2, 3, 5, 4}, {7, 8, 9, 10}, {7, 8, 9, 10}, {7, 8, 9, 10}, {7, 8, 9, 10}}));
  EXPECT_EQ(values(v, "expand.cache_seqlens_int32"), (V{1, 2, 2, 3, 1, 2, 3, 4}));
  EXPECT_EQ(values(v, "expand.cu_seqlens_k"), (V{0, 1, 3, 5, 8, 9, 11, 14, 18}));
  EXPECT_EQ(values(v, "expand.max_seq_len_k"), (V{4}));
}

TEST(EngineSglang, TreeRefusalsNameThePathAndTheRule) {
  CaseSpec c = mk({{3, 11}}, 16);
  c.requests[0].tree_parents = {-1, 0, 0};
  auto v = view(Engine::kSglangFa, c);
  ASSERT_TRUE(v.refusal);
  EXPECT_EQ(v.refusal->rfind("/kv_cache/page_size: ", 0), 0u) << *v.refusal;
  EXPECT_TRUE(v.tensors.empty());
  c = mk({{3, 11}, {2, 9}}, 1);
  c.requests[0].tree_parents = {-1, 0, 0};
  v = view(Engine::kSglangFa, c);
  ASSERT_TRUE(v.refusal);
  EXPECT_EQ(v.refusal->rfind("/requests/1/q_len: ", 0), 0u) << *v.refusal;
}

TEST(EngineSglang, EncoderMetadataAndItsTokenSlotTable) {
  CaseSpec c = mk({{3, 5}}, 2, true);  // pages 1, 2, 3: token t at slot 2 + t
  c.attention.causal = false;
  auto v = view(Engine::kSglangFa, c);
  ASSERT_FALSE(v.refusal) << *v.refusal;
  EXPECT_EQ(v.mode, "encoder");
  EXPECT_EQ(values(v, "encoder_lens_int32"), (V{5}));
  EXPECT_EQ(values(v, "encoder_cu_seqlens_k"), (V{0, 5}));
  EXPECT_EQ(values(v, "encoder_max_seq_len_k"), (V{5}));
  EXPECT_EQ(values(v, "encoder_page_table"), (V{2, 3, 4, 5, 6}));
  EXPECT_EQ(shape(v, "encoder_page_table"), (V{1, 5}));
  EXPECT_EQ(values(v, "cu_seqlens_q"), (V{0, 3}));
  EXPECT_EQ(v.mismatches.size(), 1u);  // slots read as pages of 2 tokens
  v = view(Engine::kSglangFa, [] {
    CaseSpec c = mk({{3, 5}}, 1);
    c.attention.causal = false;
    return c;
  }());
  EXPECT_TRUE(v.mismatches.empty());
  c = mk({{3, 5}, {2, 4}}, 1);
  c.attention.causal = false;
  v = view(Engine::kSglangFa, c);
  ASSERT_TRUE(v.refusal);
  EXPECT_EQ(v.refusal->rfind("/requests: ", 0), 0u);
  EXPECT_EQ(view(Engine::kVllmFlashInfer, c).refusal->rfind("/attention/causal: ", 0), 0u);
}

TEST(EngineVllm, MixedBatchIsReorderedAndSplit) {
  // prefill (4, 4), decode (1, 9), extend (3, 10); pages [1], [2, 3, 4], [5, 6, 7]
  const CaseSpec c = mk({{4, 4}, {1, 9}, {3, 10}}, 4, true);
  const EngineView v = view(Engine::kVllmFlashInfer, c);
  ASSERT_FALSE(v.refusal) << *v.refusal;
  EXPECT_EQ(v.mode, "decode+prefill");
  EXPECT_EQ(v.request_order, (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(values(v, "query_start_loc"), (V{0, 1, 4, 8}));
  EXPECT_EQ(values(v, "seq_lens"), (V{9, 10, 4}));
  EXPECT_EQ(values(v, "block_table_tensor"), (V{2, 3, 4, 5, 6, 7, 1, 0, 0}));
  EXPECT_EQ(values(v, "num_decodes"), (V{1}));
  EXPECT_EQ(values(v, "num_decode_tokens"), (V{1}));
  EXPECT_EQ(values(v, "num_prefills"), (V{2}));
  EXPECT_EQ(values(v, "num_prefill_tokens"), (V{7}));
  EXPECT_EQ(values(v, "paged_kv_indptr"), (V{0, 3, 6, 7}));
  EXPECT_EQ(values(v, "paged_kv_indices"), (V{2, 3, 4, 5, 6, 7, 1}));
  EXPECT_EQ(values(v, "paged_kv_last_page_len"), (V{1, 2, 4}));
  EXPECT_EQ(values(v, "prefill_wrapper.plan.qo_indptr"), (V{0, 3, 7}));
  EXPECT_EQ(values(v, "prefill_wrapper.plan.paged_kv_indptr"), (V{3, 6, 7}));
  EXPECT_EQ(values(v, "prefill_wrapper.plan.paged_kv_last_page_len"), (V{2, 4}));
  EXPECT_EQ(values(v, "max_q_len_prefill"), (V{4}));
  EXPECT_EQ(values(v, "decode_wrapper.plan.indptr"), (V{0, 3}));
  EXPECT_EQ(values(v, "decode_wrapper.plan.last_page_len"), (V{1}));
  EXPECT_EQ(values(v, "slot_mapping"), (V{16, 27, 28, 29, 4, 5, 6, 7}));
  EXPECT_EQ(values(v, "window_left"), (V{-1}));
}

TEST(EngineVllm, LocalAttentionVirtualBatchesBecomeTheRequests) {
  CaseSpec c = mk(kDocBatch, 2);  // pages [0, 1, 2], [3 .. 11], [12 .. 16]; table width 9
  c.attention.local_chunk = 4;
  const EngineView v = view(Engine::kVllmFlashInfer, c);
  ASSERT_FALSE(v.refusal) << *v.refusal;
  EXPECT_EQ(v.mode, "prefill+local");  // the first virtual batch has 2 queries: no decodes
  EXPECT_EQ(values(v, "query_start_loc"), (V{0, 2, 4, 5, 9, 13, 14, 18, 19}));
  EXPECT_EQ(values(v, "seq_lens"), (V{4, 2, 4, 4, 4, 1, 4, 1}));
  EXPECT_EQ(values(v, "block_table_tensor"), flat({{0, 1}, {2, 0}, {5, 6}, {7, 8}, {9, 10}, {11, 11}, {14, 15}, {16, 0}}));
  EXPECT_EQ(values(v, "paged_kv_indptr"), (V{0, 2, 3, 5, 7, 9, 10, 12, 13}));
  EXPECT_EQ(values(v, "paged_kv_indices"), (V{0, 1, 2, 5, 6, 7, 8, 9, 10, 11, 14, 15, 16}));
  EXPECT_EQ(values(v, "paged_kv_last_page_len"), (V{2, 2, 2, 2, 2, 1, 2, 1}));
  EXPECT_EQ(values(v, "num_prefills"), (V{8}));
  EXPECT_TRUE(v.mismatches.empty()) << v.mismatches[0];
}

TEST(EngineRefusals, NameTheCasePathAndTheRule) {
  const auto refusal = [](Engine e, void (*edit)(CaseSpec&)) {
    CaseSpec c = mk({{2, 8}}, 1);
    edit(c);
    const EngineView v = view(e, c);
    return v.refusal ? *v.refusal : std::string("none");
  };
  auto starts = [](const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; };
  EXPECT_TRUE(starts(refusal(Engine::kSglangFa, [](CaseSpec& c) { c.attention.alibi = true; }), "/attention/alibi: "));
  EXPECT_TRUE(starts(refusal(Engine::kVllmFlashInfer, [](CaseSpec& c) { c.attention.alibi = true; }), "/attention/alibi: "));
  EXPECT_TRUE(starts(refusal(Engine::kSglangFa, [](CaseSpec& c) { c.attention.sinks = SinksSpec{}; }), "/attention/sinks: "));
  EXPECT_TRUE(
      starts(refusal(Engine::kVllmFlashInfer, [](CaseSpec& c) { c.head_dim_qk = c.head_dim_vo = 96; }), "/head_dim_qk: "));
  EXPECT_TRUE(starts(refusal(Engine::kVllmFlashInfer,
                             [](CaseSpec& c) {
                               c.requests[0].doc_starts = {0, 4};
                             }),
                     "/requests/0/doc_starts: "));
  EXPECT_EQ(refusal(Engine::kSglangFa, [](CaseSpec& c) { c.head_dim_qk = c.head_dim_vo = 96; }), "none");
}

// Every tensor's values fill its shape, on every engine and mode above.
TEST(EngineViews, ValuesFillTheShape) {
  for (Engine e : {Engine::kSglangFa, Engine::kVllmFlashInfer})
    for (int ps : {1, 2, 16}) {
      CaseSpec c = mk({{1, 40}, {7, 7}, {3, 33}}, ps);
      c.attention.local_chunk = ps == 1 ? 4 : ps;
      const EngineView v = view(e, c);
      ASSERT_FALSE(v.refusal) << *v.refusal;
      for (const auto& t : v.tensors) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        EXPECT_EQ(static_cast<int64_t>(t.values.size()), n) << engine_id(e) << " " << t.name;
      }
    }
}

TEST(EngineCells, SayWhichRequestAndKeysACellHolds) {
  const CaseSpec c = mk({{1, 5}, {1, 3}}, 4, true);  // pages [1, 2], [3]; pool of 4
  const PageTable pt = make_plan(c).pages;
  EXPECT_EQ(engine_cell_text(pt, 2, false), "page 2: request 0's page 1 (keys 4..4)");
  EXPECT_EQ(engine_cell_text(pt, 3, false), "page 3: request 1's page 0 (keys 0..2)");
  EXPECT_EQ(engine_cell_text(pt, 0, false), "page 0: the null page (no request's; a zeroed table reads 0)");
  EXPECT_EQ(engine_cell_text(pt, 8, true), "slot 8 = page 2 + 0: request 0, key 4");
  EXPECT_EQ(engine_cell_owner(pt, 9, true), 0);
  EXPECT_EQ(engine_cell_owner(pt, 9, false), kCellOutside);
}

TEST(EngineViews, ATableTooLargeToShowIsRefusedNamingRequests) {
  CaseSpec c = mk({{1, 1 << 20}, {1, 1}}, 16);  // 65536 pages wide
  c.requests.resize(513, c.requests[1]);        // 513 x 65536 = 2^25 + 65536 cells
  for (Engine e : {Engine::kSglangFa, Engine::kVllmFlashInfer}) {
    const EngineView v = view(e, c);
    ASSERT_TRUE(v.refusal);
    EXPECT_EQ(v.refusal->rfind("/requests: the engine's page table would hold 33619968 cells (513 requests x 65536 columns)", 0),
              0u)
        << *v.refusal;
  }
}

TEST(EngineViews, ALocalBlockTableTooLargeToShowIsRefusedNamingTheChunk) {
  CaseSpec c = mk({{1, 1}}, 1);
  c.attention.local_chunk = 1 << 14;
  c.requests.resize(4096, c.requests[0]);  // one virtual batch of 16384 columns each
  const EngineView v = engine_metadata(Engine::kVllmFlashInfer, c, Plan{make_page_table(c)});
  ASSERT_TRUE(v.refusal);
  EXPECT_EQ(v.refusal->rfind("/attention/local_chunk: the engine's local block table would hold 67108864 cells (4096 virtual "
                             "batches x 16384 columns)",
                             0),
            0u)
      << *v.refusal;
}
