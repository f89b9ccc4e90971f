// /cuda_graph: the padded batch SGLang and vLLM replay (values worked by hand from cuda_graph_runner.py
// replay_prepare + flashattention_backend.py, and vLLM's flashinfer.py build, at the commits
// cuda_graph_pad.h names), the JSON form and the validation rules.
#include <gtest/gtest.h>

#include "attnscope/cuda_graph_pad.h"
#include "attnscope/paging.h"
#include "attnscope/registry.h"
#include "case_builders.h"
#include "case_json.h"
#include "cuda_graph_run.h"
#include "report_json.h"
#include "session.h"

using namespace attnscope;
using I = std::vector<int>;
using attnscope::testing::graph_case;
using attnscope::testing::rule_of;

namespace {

// A contiguous pool with the null page: request 0's pages start at page 1.
CaseSpec mk(const std::vector<std::pair<int, int>>& q_kv, int page_size, int bucket, GraphEngine e = GraphEngine::kSglang) {
  CaseSpec c = graph_case(q_kv, page_size, bucket, e);
  c.head_dim_qk = c.head_dim_vo = 64;
  return c;
}

}  // namespace

TEST(CudaGraphPad, SglangDecodePadsWithSeqLenOneOnRowZero) {
  // pages: request 0 keys 0..4 on pages 1, 2 (last page 1 key); request 1 keys 0..2 on page 3
  const CaseSpec c = mk({{1, 5}, {1, 3}}, 4, 4);
  validate_case(c);
  const CudaGraphPad g = cuda_graph_pad(c, make_page_table(c));
  ASSERT_EQ(g.entries.size(), 4u);
  EXPECT_EQ(g.live, 2);
  EXPECT_EQ(g.entries[0].pages, (I{1, 2}));
  EXPECT_EQ(g.entries[0].position, 4);
  EXPECT_EQ(g.entries[1].pages, (I{3}));
  EXPECT_EQ(g.entries[1].position, 2);
  for (int b = 2; b < 4; ++b) {
    EXPECT_TRUE(g.entries[b].padding());
    EXPECT_EQ(g.entries[b].seq_len, 1);     // seq_len_fill_value
    EXPECT_EQ(g.entries[b].pages, (I{1}));  // req_to_token row 0 = request 0's, column 0
    EXPECT_EQ(g.entries[b].position, 0);
  }
  EXPECT_EQ(g.padded_row, (std::vector<uint8_t>{0, 0, 1, 1}));
  EXPECT_EQ(g.expect, CudaGraphPad::PadExpect::kValueOfKey);
  const GraphCsr s = graph_csr(g.entries);
  EXPECT_EQ(s.qo_indptr, (I{0, 1, 2, 3, 4}));
  EXPECT_EQ(s.kv_indptr, (I{0, 2, 3, 4, 5}));
  EXPECT_EQ(s.kv_indices, (I{1, 2, 3, 1, 1}));
  EXPECT_EQ(s.kv_last_page_len, (I{1, 3, 1, 1}));
  // the capture: every entry seq_len 1 on row 0
  ASSERT_EQ(g.capture.size(), 4u);
  for (const auto& e : g.capture) EXPECT_EQ(e.pages, (I{1}));
}

TEST(CudaGraphPad, VllmDecodePadsWithEmptyEntries) {
  const CaseSpec c = mk({{1, 5}, {1, 3}}, 4, 4, GraphEngine::kVllm);
  validate_case(c);
  const CudaGraphPad g = cuda_graph_pad(c, make_page_table(c));
  const GraphCsr s = graph_csr(g.entries);
  EXPECT_EQ(s.kv_indptr, (I{0, 2, 3, 3, 3}));  // indptr[-1] repeated: no pages
  EXPECT_EQ(s.kv_indices, (I{1, 2, 3}));
  EXPECT_EQ(s.kv_last_page_len, (I{1, 3, 1, 1}));  // 1, "flashinfer treats 0 as a full page"
  EXPECT_EQ(g.expect, CudaGraphPad::PadExpect::kZero);
  EXPECT_EQ(g.total_pages(), 3);
}

TEST(CudaGraphPad, SinksMakeTheOneKeyPaddingAnythingButZeroStaysZero) {
  // SGLang: a padded entry's one key and the sink share the softmax, so O = V x p(key) < V: not a V row
  CaseSpec c = mk({{1, 5}, {1, 3}}, 4, 4);
  c.attention.sinks = SinksSpec{{0.5}};
  validate_case(c);
  const CudaGraphPad g = cuda_graph_pad(c, make_page_table(c));
  EXPECT_EQ(g.expect, CudaGraphPad::PadExpect::kAnything);
  EXPECT_NE(g.expect_text.find("sink"), std::string::npos) << g.expect_text;
  EXPECT_EQ(g.entries[2].seq_len, 1);  // the padding itself is unchanged
  // vLLM: no keys, O = 0 x the sink's weight = 0
  CaseSpec v = mk({{1, 5}, {1, 3}}, 4, 4, GraphEngine::kVllm);
  v.attention.sinks = SinksSpec{{0.5}};
  validate_case(v);
  EXPECT_EQ(cuda_graph_pad(v, make_page_table(v)).expect, CudaGraphPad::PadExpect::kZero);
}

TEST(CudaGraphPad, ChunkedLocalDecodeEntriesAreTheirChunksVirtualBatches) {
  // chunk 256, pages of 16 from page 1: request 0 (600 keys) pages 1..38, request 1 (256) 39..54,
  // request 2 (257) 55..71. The query of a decode entry of L keys is key L - 1: its chunk starts at
  // (L - 1) / 256 x 256
  CaseSpec c = mk({{1, 600}, {1, 256}, {1, 257}}, 16, 5);
  c.attention.local_chunk = 256;
  validate_case(c);
  const CudaGraphPad g = cuda_graph_pad(c, make_page_table(c));
  EXPECT_EQ(g.local_unmodelled, "");
  // 600: keys 512..599 = 88 keys on columns 32..37 = pages 33..38, 8 keys in the last
  EXPECT_EQ(g.entries[0].chunk_begin, 512);
  EXPECT_EQ(g.entries[0].seq_len, 88);
  EXPECT_EQ(g.entries[0].pages, (I{33, 34, 35, 36, 37, 38}));
  EXPECT_EQ(g.entries[0].last_page_len, 8);
  EXPECT_EQ(g.entries[0].position, 599);  // the query keeps its absolute position
  // 256: the query is key 255, chunk 0: the whole request
  EXPECT_EQ(g.entries[1].chunk_begin, 0);
  EXPECT_EQ(g.entries[1].seq_len, 256);
  EXPECT_EQ(g.entries[1].pages.size(), 16u);
  EXPECT_EQ(g.entries[1].pages.front(), 39);
  // 257: key 256 opens chunk 1 alone: one key on column 16 = page 71
  EXPECT_EQ(g.entries[2].chunk_begin, 256);
  EXPECT_EQ(g.entries[2].seq_len, 1);
  EXPECT_EQ(g.entries[2].pages, (I{71}));
  EXPECT_EQ(g.entries[2].last_page_len, 1);
  // SGLang's padding (seq_len 1 on row 0) is its own chunk 0: request 0's first page, as without chunks
  for (int b = 3; b < 5; ++b) {
    EXPECT_EQ(g.entries[b].chunk_begin, 0);
    EXPECT_EQ(g.entries[b].seq_len, 1);
    EXPECT_EQ(g.entries[b].pages, (I{1}));
  }
  EXPECT_EQ(g.capture[0].pages, (I{1}));
  EXPECT_EQ(g.expect, CudaGraphPad::PadExpect::kValueOfKey);
  // the CSR the FlashInfer backends replay: 6 + 16 + 1 + 1 + 1 pages
  const GraphCsr s = graph_csr(g.entries);
  EXPECT_EQ(s.kv_indptr, (I{0, 6, 22, 23, 24, 25}));
  EXPECT_EQ(s.kv_last_page_len, (I{8, 16, 1, 1, 1}));
  // vLLM: the live entries alike, the padding stays empty
  CaseSpec v = mk({{1, 600}, {1, 256}, {1, 257}}, 16, 5, GraphEngine::kVllm);
  v.attention.local_chunk = 256;
  validate_case(v);
  const CudaGraphPad gv = cuda_graph_pad(v, make_page_table(v));
  EXPECT_EQ(gv.entries[0].pages, (I{33, 34, 35, 36, 37, 38}));
  EXPECT_EQ(gv.entries[4].seq_len, 0);
  EXPECT_TRUE(gv.entries[4].pages.empty());
  // target verify: an entry's queries may straddle two chunks, not modelled (the backends say why)
  CaseSpec t = mk({{2, 600}, {2, 257}}, 16, 3);
  t.attention.local_chunk = 256;
  validate_case(t);
  const CudaGraphPad gt = cuda_graph_pad(t, make_page_table(t));
  EXPECT_NE(gt.local_unmodelled.find("straddle"), std::string::npos) << gt.local_unmodelled;
  EXPECT_EQ(gt.entries[0].seq_len, 600);
  // plan's CUDA GRAPH section shows where each virtual batch starts
  const std::string text = graph_pad_text(c, make_plan(c));
  EXPECT_NE(text.find("from_key"), std::string::npos) << text;
  EXPECT_NE(text.find("  0      0        88       599       512       [33 34 35 36 37 38]"), std::string::npos) << text;
  EXPECT_EQ(graph_pad_text(t, make_plan(t)).find("from_key"), std::string::npos);
}

TEST(CudaGraphPad, SglangTargetVerifyAddsDraftTokensAndReadsPastTheRow) {
  // page_size 2: request 0 (kv 2) holds page 1 only; a padded entry reads 1 + 2 draft tokens = 3
  // keys, two columns: page 1, then column 1 past the row, req_to_token's zeros: page 0
  const CaseSpec c = mk({{2, 2}, {2, 6}}, 2, 3);
  validate_case(c);
  const CudaGraphPad g = cuda_graph_pad(c, make_page_table(c));
  EXPECT_EQ(g.tokens_per_entry, 2);
  ASSERT_EQ(g.entries.size(), 3u);
  EXPECT_EQ(g.entries[2].seq_len, 3);
  EXPECT_EQ(g.entries[2].pages, (I{1, 0}));
  EXPECT_EQ(g.entries[2].last_page_len, 1);
  EXPECT_EQ(g.entries[1].pages, (I{2, 3, 4}));
  EXPECT_EQ(g.padded_row, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(g.expect, CudaGraphPad::PadExpect::kAnything);
  EXPECT_EQ(graph_csr(g.entries).qo_indptr, (I{0, 2, 4, 6}));
}

TEST(CudaGraphPad, ABucketOfTheBatchSizeHasNoPadding) {
  const CaseSpec c = mk({{1, 5}, {1, 3}}, 4, 2);
  const CudaGraphPad g = cuda_graph_pad(c, make_page_table(c));
  EXPECT_EQ(g.entries.size(), 2u);
  EXPECT_EQ(g.padded_row, (std::vector<uint8_t>{0, 0}));
}

TEST(CudaGraphPad, ValidationNamesThePathAndTheRule) {
  EXPECT_EQ(rule_of(mk({{1, 5}, {1, 3}}, 4, 1)),
            "/cuda_graph/bucket: 1 is smaller than the batch (2 requests): the captured size must be >= the number of requests");
  CaseSpec c = mk({{1, 5}, {1, 3}}, 4, 4);
  c.split.cuda_graph = false;
  EXPECT_NE(rule_of(c).find("/split/cuda_graph: false with /cuda_graph"), std::string::npos) << rule_of(c);
  EXPECT_NE(rule_of(mk({{1, 5}, {2, 3}}, 4, 4)).find("/requests/1/q_len: 2 differs from request 0's 1"), std::string::npos);
  EXPECT_NE(rule_of(mk({{2, 5}, {2, 3}}, 4, 4, GraphEngine::kVllm)).find("/requests/0/q_len: 2 with /cuda_graph/engine"),
            std::string::npos);
  EXPECT_NE(rule_of(mk({{1, 5}}, 4, 0)).find("/cuda_graph/bucket: 0 is out of range"), std::string::npos);
  EXPECT_EQ(rule_of(mk({{2, 5}, {2, 3}}, 4, 4)), "");
  // a planner without CUDA-graph planning drops the mode with it
  const CaseSpec off = with_planner(mk({{1, 5}}, 4, 4), Planner::kOff);
  EXPECT_FALSE(off.cuda_graph.has_value());
  EXPECT_EQ(rule_of(off), "");
}

TEST(CudaGraphPad, JsonRoundTripAndErrors) {
  const std::string base = R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 9}],
    "heads": {"qo": 4, "kv": 1}, "head_dim": {"qk": 64, "vo": 64}, "dtype": "bf16",
    "split": {"cuda_graph": true}, "backends": ["cpu.reference"], )";
  const CaseFile f = parse_case_text(base + R"("cuda_graph": {"bucket": 4, "engine": "vllm"}})");
  ASSERT_TRUE(f.spec.cuda_graph.has_value());
  EXPECT_EQ(f.spec.cuda_graph->bucket, 4);
  EXPECT_EQ(f.spec.cuda_graph->engine, GraphEngine::kVllm);
  EXPECT_EQ(parse_case_text(case_to_text(f.spec)).spec, f.spec);
  EXPECT_EQ(parse_case_text(base + R"("cuda_graph": {"bucket": 2}})").spec.cuda_graph->engine, GraphEngine::kSglang);
  auto err = [&](const std::string& tail) {
    try {
      parse_case_text(base + tail);
    } catch (const CaseError& e) {
      return e.path();
    }
    return std::string("no error");
  };
  EXPECT_EQ(err(R"("cuda_graph": {"engine": "sglang"}})"), "/cuda_graph/bucket");
  EXPECT_EQ(err(R"("cuda_graph": {"bucket": 2, "engine": "trt"}})"), "/cuda_graph/engine");
  EXPECT_EQ(err(R"("cuda_graph": {"bucket": 2, "size": 3}})"), "/cuda_graph/size");
  // a case without /cuda_graph writes no such key
  EXPECT_EQ(case_to_text(parse_case_text(base + R"("name": "x"})").spec).find("\"cuda_graph\": {"), std::string::npos);
}

TEST(CudaGraphPad, BackendsThatDoNotCaptureSayWhy) {
  CaseSpec c = mk({{1, 5}, {1, 3}}, 4, 4);
  c.backends = {"cpu.reference", "flashinfer.decode"};
  validate_case(c, &registry_ids());
  auto s = run_session(CaseFile{c});
  const Result* ref = s->result("cpu.reference");
  ASSERT_TRUE(ref && ref->graph);
  EXPECT_FALSE(ref->graph->captured);
  EXPECT_EQ(ref->graph->not_captured, "a CPU backend (engines capture their GPU kernels)");
  EXPECT_EQ(ref->graph->bucket, 4);
  EXPECT_EQ(ref->graph->live, 2);
  const Result* fi = s->result("flashinfer.decode");
  ASSERT_TRUE(fi && fi->graph);
  if (!fi->ok()) {  // the CPU build (or no device): why the eager run did not run is why nothing was captured
    EXPECT_FALSE(fi->graph->captured);
    EXPECT_NE(fi->graph->not_captured.find("the eager run did not run"), std::string::npos) << fi->graph->not_captured;
    EXPECT_NE(fi->graph->not_captured.find(fi->message), std::string::npos);
  }
  // no backend without /cuda_graph carries a report
  c.cuda_graph.reset();
  EXPECT_FALSE(run_session(CaseFile{c})->result("cpu.reference")->graph.has_value());
}

TEST(CudaGraphPad, ReportsCarryTheReplayAndThePaddedBatch) {
  CaseSpec c = mk({{1, 5}, {1, 3}}, 4, 4);
  validate_case(c);
  Result r;
  r.backend = "flashinfer.decode";
  GraphReplayReport g;
  g.captured = true;
  g.engine = "sglang";
  g.bucket = 4;
  g.live = 2;
  g.captured_grid = g.replay_grid = GraphGrid{4, 132, 2, 0, true, 0, 64, 1024, 512};
  g.checks.push_back({"fits the captured grid", true, false, "replay plan = captured plan"});
  g.checks.push_back({"real rows", false, false, "3 elements differ"});
  r.graph = g;
  const auto j = result_to_json(r);
  EXPECT_EQ(j.at("cuda_graph").at("bucket"), 4);
  EXPECT_EQ(j.at("cuda_graph").at("captured_grid").at("padded_batch"), 132);
  EXPECT_EQ(j.at("cuda_graph").at("checks").at(1).at("verdict"), "FAIL");
  const std::string text = graph_report_text(r);
  EXPECT_NE(text.find("captured: 4 entries, grid 132 x 2 CTAs, split-KV chunk 64 tokens"), std::string::npos) << text;
  EXPECT_NE(text.find("FAIL real rows: 3 elements differ"), std::string::npos) << text;
  EXPECT_TRUE(g.failed());
  // plan's CUDA GRAPH section lists the padded entries
  const std::string plan = graph_pad_text(c, make_plan(c));
  EXPECT_NE(plan.find("bucket 4: 2 live + 2 padded entries"), std::string::npos) << plan;
  EXPECT_NE(plan.find("  3      pad      1        0         [1]"), std::string::npos) << plan;
}
