// /cuda_graph with /mla: the rules (absorbed decode under SGLang only, each refusal naming its path
// and why) and the padded batch of SGLang's flashinfer_mla backend (seq_len fill value 0: padded and
// captured entries with no keys), values worked by hand from flashinfer_mla_backend.py at the commit
// cuda_graph_pad.cpp names.
#include <gtest/gtest.h>

#include "attnscope/cuda_graph_pad.h"
#include "attnscope/paging.h"
#include "attnscope/registry.h"
#include "case_builders.h"

using namespace attnscope;
using I = std::vector<int>;
using attnscope::testing::graph_case;
using attnscope::testing::rule_of;

namespace {

// An MLA case (kv_lora_rank 512, rope 64) on a contiguous pool with the null page: request 0's pages
// start at page 1.
CaseSpec mla(const std::vector<std::pair<int, int>>& q_kv, int page_size, int bucket, bool absorbed = true,
             GraphEngine e = GraphEngine::kSglang) {
  CaseSpec c = graph_case(q_kv, page_size, bucket, e);
  c.mla = MlaSpec{};
  c.mla->absorbed = absorbed;
  c.num_qo_heads = 16;
  c.num_kv_heads = absorbed ? 1 : 16;
  c.head_dim_qk = c.mla->qk_dim();
  c.head_dim_vo = c.mla->vo_dim();
  return c;
}

}  // namespace

TEST(CudaGraphMla, AbsorbedDecodeUnderSglangIsValid) {
  EXPECT_EQ(rule_of(mla({{1, 5}, {1, 3}}, 4, 4)), "");
  EXPECT_EQ(rule_of(mla({{1, 700}}, 1, 1)), "");
}

TEST(CudaGraphMla, WhatIsNotModelledIsRefusedWithThePathAndWhy) {
  const std::string na = rule_of(mla({{1, 5}}, 4, 2, false));
  EXPECT_EQ(
      na.rfind("/mla/absorbed: false with /cuda_graph: the non-absorbed form is plain attention with head dims 192 / 128", 0), 0u)
      << na;
  const std::string vllm = rule_of(mla({{1, 5}}, 4, 2, true, GraphEngine::kVllm));
  EXPECT_EQ(vllm.rfind("/cuda_graph/engine: \"vllm\" with /mla", 0), 0u) << vllm;
  EXPECT_NE(vllm.find("trtllm_batch_decode_with_kv_cache_mla"), std::string::npos) << vllm;
  const std::string verify = rule_of(mla({{2, 5}, {2, 3}}, 4, 4));
  EXPECT_EQ(verify.rfind("/requests/0/q_len: 2 with /cuda_graph and /mla", 0), 0u) << verify;
}

TEST(CudaGraphMla, SglangFlashinferMlaPadsAndCapturesWithNoKeys) {
  // pages: request 0 keys 0..4 on pages 1, 2; request 1 keys 0..2 on page 3
  const CaseSpec c = mla({{1, 5}, {1, 3}}, 4, 5);
  validate_case(c);
  const CudaGraphPad g = cuda_graph_pad(c, make_page_table(c));
  ASSERT_EQ(g.entries.size(), 5u);
  EXPECT_EQ(g.entries[0].pages, (I{1, 2}));
  EXPECT_EQ(g.entries[0].seq_len, 5);
  EXPECT_EQ(g.entries[1].pages, (I{3}));
  for (int b = 2; b < 5; ++b) {
    EXPECT_TRUE(g.entries[b].padding());
    EXPECT_EQ(g.entries[b].q_len, 1);
    EXPECT_EQ(g.entries[b].seq_len, 0);  // get_cuda_graph_seq_len_fill_value() == 0
    EXPECT_TRUE(g.entries[b].pages.empty());
  }
  ASSERT_EQ(g.capture.size(), 5u);
  for (const auto& e : g.capture) {
    EXPECT_EQ(e.seq_len, 0);
    EXPECT_TRUE(e.pages.empty());
  }
  EXPECT_EQ(g.expect, CudaGraphPad::PadExpect::kZero);
  EXPECT_NE(g.expect_text.find("write_empty_o"), std::string::npos) << g.expect_text;
  EXPECT_EQ(g.padded_row, (std::vector<uint8_t>{0, 0, 1, 1, 1}));
  bool cites = false;
  for (const auto& n : g.notes) cites = cites || n.find("flashinfer_mla_backend.py @ 004d79cff9ef") != std::string::npos;
  EXPECT_TRUE(cites);
  // kv_indptr repeats for the padding (cumsum of seq_lens 0), one query token each (q_indptr arange)
  const GraphCsr s = graph_csr(g.entries);
  EXPECT_EQ(s.qo_indptr, (I{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(s.kv_indptr, (I{0, 2, 3, 3, 3, 3}));
  EXPECT_EQ(s.kv_indices, (I{1, 2, 3}));
  EXPECT_EQ(graph_csr(g.capture).kv_indices, I{});
  EXPECT_EQ(g.total_pages(), 3);
}

TEST(CudaGraphMla, TheGqaPaddingIsUnchanged) {
  // the same batch without /mla still pads seq_len 1 on request 0's row (FlashAttentionBackend)
  CaseSpec c = mla({{1, 5}, {1, 3}}, 4, 3);
  c.mla.reset();
  c.num_kv_heads = 16;
  c.head_dim_qk = c.head_dim_vo = 64;
  validate_case(c);
  const CudaGraphPad g = cuda_graph_pad(c, make_page_table(c));
  EXPECT_EQ(g.entries[2].seq_len, 1);
  EXPECT_EQ(g.entries[2].pages, (I{1}));
  EXPECT_EQ(g.expect, CudaGraphPad::PadExpect::kValueOfKey);
}
