// The padded batch of a CUDA-graph replay (cuda_graph_pad.h), as SGLang and vLLM build it.
#include "attnscope/cuda_graph_pad.h"

#include <algorithm>
#include <cmath>

namespace attnscope {

const GraphSource kGraphSglangSource[2] = {
    {"sgl-project/sglang", "python/sglang/srt/model_executor/cuda_graph_runner.py", "0021673cd18b64f44373950249ff07177e493b4b"},
    {"sgl-project/sglang", "python/sglang/srt/layers/attention/flashattention_backend.py",
     "756596d14cbf314dfa846f62064e4a9113f826ef"}};
const GraphSource kGraphVllmSource = {"vllm-project/vllm", "vllm/v1/attention/backends/flashinfer.py",
                                      "00a817ada81626793c9e2432903ee4c5b33ab33a"};

const char* graph_engine_name(GraphEngine e) { return e == GraphEngine::kVllm ? "vllm" : "sglang"; }

int64_t CudaGraphPad::total_pages() const {
  int64_t n = 0;
  for (const auto& e : entries) n += static_cast<int64_t>(e.pages.size());
  return n;
}

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// An entry of `seq_len` keys reading the pages of `row` (a request's page-table row), column j past
// the row's end reading page 0 (SGLang's req_to_token rows are zero-initialised: slot 0, page 0).
GraphPadEntry entry_on_row(const PageTable& pt, int row, int q_len, int seq_len) {
  GraphPadEntry e;
  e.q_len = q_len;
  e.seq_len = seq_len;
  const int np = ceil_div(seq_len, pt.page_size);
  for (int j = 0; j < np; ++j) e.pages.push_back(j < pt.pages_of(row) ? pt.indices[pt.indptr[row] + j] : 0);
  e.last_page_len = seq_len - (np - 1) * pt.page_size;
  return e;
}

void pad_sglang(const CaseSpec& c, const PageTable& pt, CudaGraphPad* g) {
  const int t = g->tokens_per_entry;
  // seq_len_fill_value (FlashAttentionBackend.get_cuda_graph_seq_len_fill_value) is 1; in target
  // verify the backend adds the draft tokens: cache_seqlens = seq_lens + draft_token_num
  const int fill = 1 + (t > 1 ? t : 0);
  for (int b = g->live; b < g->bucket; ++b) {
    GraphPadEntry e = entry_on_row(pt, 0, t, fill);
    e.position = 0;  // the positions buffer is zero-initialised and only [:raw_num_token] is copied
    g->entries.push_back(e);
  }
  for (int b = 0; b < g->bucket; ++b) {
    GraphPadEntry e = entry_on_row(pt, 0, t, fill);  // capture: every seq_len the fill value, req_pool_indices 0
    g->capture.push_back(e);
  }
  if (t == 1 && c.has_sinks()) {  // the sink joins the one key's softmax: O = V x a weight below 1
    g->expect = CudaGraphPad::PadExpect::kAnything;
    g->expect_text = "one key (request 0's key 0) and the sink: written by the kernel, then dropped (output[:raw_num_token])";
  } else if (t == 1) {
    g->expect = CudaGraphPad::PadExpect::kValueOfKey;
    g->expect_text =
        "one key (seq_len 1 on req_to_token row 0 = request 0's key 0): O = that key's V row exactly; SGLang returns "
        "output[:raw_num_token] and drops these rows";
  } else {
    g->expect = CudaGraphPad::PadExpect::kAnything;
    g->expect_text = "seq_len 1 + " + std::to_string(t) +
                     " draft tokens on request 0's row: written by the kernel, then dropped (output[:raw_num_token])";
  }
  g->notes.push_back(
      "req_pool_indices: request r holds req_to_token row r (a fresh pool hands out rows in order); padded "
      "entries keep the captured 0, so they read request 0's row");
  g->notes.push_back("out_cache_loc of the padded tokens is 0 (zero_()): their K/V land in slot 0, the pool's padding slot");
  g->notes.push_back(std::string("followed: ") + kGraphSglangSource[0].file + " @ " + kGraphSglangSource[0].commit +
                     " (replay_prepare), " + kGraphSglangSource[1].file + " @ " + kGraphSglangSource[1].commit +
                     " (init_forward_metadata_replay_cuda_graph, normal_decode_set_metadata)");
}

// Absorbed MLA under SGLang's flashinfer_mla backend (the engine that captures FlashInfer's MLA
// kernels): its get_cuda_graph_seq_len_fill_value is 0, so the capture's and the padding's seq_lens
// are 0; kv_indptr repeats (no kv_indices) and qo_indptr is one token each (the file, kSglangMla).
const GraphSource kSglangMla = {"sgl-project/sglang", "python/sglang/srt/layers/attention/flashinfer_mla_backend.py",
                                "004d79cff9efa71aedfa007e0f66d80768a44619"};

void pad_sglang_mla(CudaGraphPad* g) {
  GraphPadEntry e;
  e.q_len = 1;
  e.last_page_len = 1;  // no pages (FlashInfer's CSR convention; MLAPlan reads kv_len, 0)
  for (int b = g->live; b < g->bucket; ++b) g->entries.push_back(e);
  g->capture.assign(static_cast<size_t>(g->bucket), e);
  g->expect = CudaGraphPad::PadExpect::kZero;
  g->expect_text =
      "no keys (flashinfer_mla's seq_len fill value 0): FlashInfer's MLA kernels write an empty work item's rows as O = 0, "
      "LSE -inf (mla.cuh write_empty_o; mla_hopper.cuh through its normalisation); SGLang returns output[:raw_num_token] "
      "and drops these rows";
  g->notes.push_back(
      "absorbed MLA: SGLang's flashinfer_mla backend captures BatchMLAPagedAttentionWrapper(use_cuda_graph=True) at the "
      "bucket with every seq_len the fill value 0 and re-plans the padded batch into the same buffers at each replay");
  g->notes.push_back(std::string("followed: ") + kSglangMla.file + " @ " + kSglangMla.commit +
                     " (get_cuda_graph_seq_len_fill_value, init_forward_metadata_capture/replay_cuda_graph), " +
                     kGraphSglangSource[0].file + " @ " + kGraphSglangSource[0].commit + " (replay_prepare)");
}

void pad_vllm(const PageTable& pt, CudaGraphPad* g) {
  // paged_kv_indptr_cpu[1 + num_decodes : 1 + num_input_tokens].fill_(indptr[-1]): no pages;
  // paged_kv_last_page_len_cpu[num_decodes:num_input_tokens].fill_(1) ("flashinfer treats 0 as a full page")
  for (int b = g->live; b < g->bucket; ++b) {
    GraphPadEntry e;
    e.q_len = 1;
    e.seq_len = 0;
    e.last_page_len = 1;
    g->entries.push_back(e);
  }
  // the capture (_dummy_run): every request one token on block-table row zeros, block 0
  for (int b = 0; b < g->bucket; ++b) {
    GraphPadEntry e;
    e.q_len = 1;
    e.seq_len = 1;
    e.pages = {0};
    e.last_page_len = 1;
    g->capture.push_back(e);
  }
  g->expect = CudaGraphPad::PadExpect::kZero;
  g->expect_text =
      "no pages (kv length 0): FlashInfer's empty state writes O = 0 and LSE -inf; vLLM's forward slices "
      "output[:num_actual_tokens] and drops these rows";
  g->notes.push_back("the decode wrapper is planned for pad_for_cudagraph(num_decodes) = /cuda_graph/bucket entries");
  g->notes.push_back("slot_mapping of the padded tokens is PAD_SLOT_ID (-1): reshape_and_cache_flash skips them");
  g->notes.push_back(std::string("followed: ") + kGraphVllmSource.file + " @ " + kGraphVllmSource.commit +
                     " (FlashInferMetadataBuilder.build, use_cudagraph branch)");
  (void)pt;
}

// The decode virtual batch of an entry: keys [start, seq_len) of the chunk its one query falls in,
// start = (seq_len - 1) / chunk x chunk (make_local_attention_virtual_batches with q_len 1), on the
// pages from start / page_size (start is page-aligned: the chunk is a multiple of the page).
void to_local_virtual(int chunk, int page_size, GraphPadEntry* e) {
  if (e->seq_len == 0) return;  // vLLM's padding: no keys, no pages
  const int start = (e->seq_len - 1) / chunk * chunk;
  e->chunk_begin = start;
  e->seq_len -= start;
  e->pages.erase(e->pages.begin(), e->pages.begin() + start / page_size);
}

void apply_local_chunk(const CaseSpec& c, const PageTable& pt, CudaGraphPad* g) {
  const int chunk = *c.attention.local_chunk;
  if (g->tokens_per_entry != 1)
    g->local_unmodelled = "chunked local attention with " + std::to_string(g->tokens_per_entry) +
                          " query tokens per entry (an entry's queries may straddle chunks: the number of virtual "
                          "batches then depends on the batch; SGLang builds local metadata under graphs for decode only)";
  else if (chunk % pt.page_size != 0)
    g->local_unmodelled = "local_chunk " + std::to_string(chunk) + " is not a multiple of the page size " +
                          std::to_string(pt.page_size) + " (a virtual batch would start inside a page)";
  if (!g->local_unmodelled.empty()) {
    g->notes.push_back("not modelled: " + g->local_unmodelled);
    return;
  }
  for (auto* v : {&g->entries, &g->capture})
    for (auto& e : *v) to_local_virtual(chunk, pt.page_size, &e);
  // SGLang: the fixed replay of PR #6356 (at 756596d1 the graph never read the local tensors, PR #6162).
  // vLLM: chunked_local_attention.py @852b6f4f (UNIFORM_BATCH full graphs; older code said NEVER).
  const std::string how =
      g->engine == GraphEngine::kVllm
          ? "vllm/model_executor/layers/attention/chunked_local_attention.py @ 852b6f4f "
            "(_compute_virtual_batches_attn_metadata_kernel): a live entry is its one virtual batch, a padded entry "
            "(seq_len 0) a virtual batch of 0 keys, so the padded entries stay empty"
          : "padding included: sglang 0.5.23 layers/attention/local_attention.py "
            "LocalAttentionMetadataBuilder.update_for_replay (PR #6356) runs make_local_attention_virtual_batches "
            "over the padded batch";
  g->notes.push_back("chunked local attention (chunk " + std::to_string(chunk) +
                     "): each entry is the virtual batch of its query's chunk (seq_len and pages from_key on); " + how);
}

}  // namespace

CudaGraphPad cuda_graph_pad(const CaseSpec& c, const PageTable& pt) {
  if (!c.cuda_graph) throw CaseError("/cuda_graph", "missing, the case has no CUDA-graph bucket");
  CudaGraphPad g;
  g.engine = c.cuda_graph->engine;
  g.bucket = c.cuda_graph->bucket;
  g.live = static_cast<int>(c.requests.size());
  g.tokens_per_entry = c.requests.empty() ? 1 : c.requests[0].q_len;
  for (int r = 0; r < g.live; ++r) {
    const RequestSpec& q = c.requests[r];
    GraphPadEntry e = entry_on_row(pt, r, q.q_len, q.kv_len);
    e.request = r;
    e.position = q.kv_len - q.q_len;
    g.entries.push_back(e);
  }
  if (g.engine == GraphEngine::kVllm)
    pad_vllm(pt, &g);
  else if (c.mla_absorbed())
    pad_sglang_mla(&g);
  else
    pad_sglang(c, pt, &g);
  if (c.attention.local_chunk) apply_local_chunk(c, pt, &g);
  g.padded_row.assign(static_cast<size_t>(g.bucket) * g.tokens_per_entry, 0);
  std::fill(g.padded_row.begin() + static_cast<int64_t>(g.live) * g.tokens_per_entry, g.padded_row.end(), uint8_t{1});
  return g;
}

GraphCsr graph_csr(const std::vector<GraphPadEntry>& entries) {
  GraphCsr s;
  s.qo_indptr.push_back(0);
  s.kv_indptr.push_back(0);
  for (const auto& e : entries) {
    s.qo_indptr.push_back(s.qo_indptr.back() + e.q_len);
    s.kv_indices.insert(s.kv_indices.end(), e.pages.begin(), e.pages.end());
    s.kv_indptr.push_back(static_cast<int>(s.kv_indices.size()));
    s.kv_last_page_len.push_back(e.pages.empty() ? 1 : e.last_page_len);
  }
  return s;
}

std::vector<float> pad_one_key_row(const std::vector<float>& v_key, int num_qo_heads, int num_kv_heads, int d, DType dt,
                                   const std::vector<float>& sinks, float v_scale) {
  std::vector<float> o(static_cast<size_t>(num_qo_heads) * d);
  const int group = num_qo_heads / num_kv_heads;
  for (int h = 0; h < num_qo_heads; ++h) {
    const double w = sinks.empty() ? 1.0 : 1.0 / (1.0 + std::exp(static_cast<double>(sinks[h])));
    for (int j = 0; j < d; ++j) {
      float x = round_to(dt, static_cast<float>(v_key[static_cast<size_t>(h / group) * d + j] * w));
      if (v_scale != 1.f) x = round_to(dt, x * v_scale);
      o[static_cast<size_t>(h) * d + j] = x;
    }
  }
  return o;
}

float pad_row_tolerance(DType dt, float expected) {
  const int mant = dt == DType::kBf16 ? 7 : dt == DType::kFp16 ? 10 : 23;
  return std::ldexp(std::fabs(expected), 1 - mant) + 1e-30f;
}

std::string graph_grid_text(const GraphGrid& g) {
  std::string s = std::to_string(g.entries) + " entries, grid " + std::to_string(g.padded_batch) + " x " +
                  std::to_string(g.kv_heads) + " CTAs";
  if (g.new_batch > 0) s += " (" + std::to_string(g.new_batch) + " needed)";
  s += g.split_kv ? ", split-KV chunk " + std::to_string(g.kv_chunk_tokens) + " tokens" : ", no split";
  if (g.cta_tile_q > 0) s += ", tile " + std::to_string(g.cta_tile_q);
  return s;
}

}  // namespace attnscope
