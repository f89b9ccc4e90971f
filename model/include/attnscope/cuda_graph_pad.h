// The batch an engine replays through a CUDA graph captured at a bucket size (/cuda_graph, docs/
// conventions.md "CUDA-graph replay"): the case's live requests, then bucket - live padded entries
// filled as the engine fills them, and the batch the engine captured with. Host only.
//   sglang  SGLang's CudaGraphRunner.replay_prepare (seq_lens filled with 1, req_pool_indices and
//           positions left as captured: zeros) and FlashAttentionBackend's replay metadata
//           (cache_seqlens = seq_lens (+ draft tokens in target verify), page_table rows from
//           req_to_token[req_pool_indices]); the commits are in kGraphSglangSource.
//   vllm    vLLM v1's FlashInferMetadataBuilder.build under full CUDA graphs (pure decode): the
//           decode wrapper planned for pad_for_cudagraph(num_decodes) entries, the padding with
//           paged_kv_indptr repeated (no pages) and paged_kv_last_page_len 1; kGraphVllmSource.
// Chunked local attention (decode): every entry, padding included, becomes the virtual batch of its
// one query's chunk, as SGLang's _update_local_attn_metadata_for_replay builds it over the padded
// batch (kGraphSglangSource[1]) with make_local_attention_virtual_batches; vLLM's padded entries
// stay empty (no keys, no virtual batch reads a page).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/paging.h"
#include "attnscope/result.h"

namespace attnscope {

struct GraphSource {
  const char* repo;
  const char* file;
  const char* commit;
};
extern const GraphSource kGraphSglangSource[2];  // cuda_graph_runner.py, flashattention_backend.py
extern const GraphSource kGraphVllmSource;       // v1/attention/backends/flashinfer.py

// One entry of the padded batch (a request of the case, or padding).
struct GraphPadEntry {
  int request = -1;        // the case's request, -1 for padding
  int q_len = 0;           // query tokens (num_tokens_per_bs)
  int seq_len = 0;         // keys it attends: SGLang's cache_seqlens_int32, vLLM's kv length
  std::vector<int> pages;  // physical pages it reads, in key order (SGLang's page_table row prefix,
                           // vLLM's paged_kv_indices slice); empty = no keys
  int last_page_len = 0;   // keys in its last page (vLLM's paged_kv_last_page_len: 1 for no pages)
  int position = 0;        // position of its first query token (SGLang's positions buffer)
  int chunk_begin = 0;     // chunked local attention: the request's key where its virtual batch starts
                           // (seq_len and pages are then the virtual batch's); 0 otherwise
  bool padding() const { return request < 0; }
};

struct CudaGraphPad {
  GraphEngine engine = GraphEngine::kSglang;
  int bucket = 0;                      // entries captured and replayed
  int live = 0;                        // the case's requests
  int tokens_per_entry = 1;            // num_tokens_per_bs
  std::vector<GraphPadEntry> entries;  // [bucket]: the live requests in order, then the padding
  std::vector<GraphPadEntry> capture;  // [bucket]: the batch the engine captured the graph with
  std::vector<uint8_t> padded_row;     // [bucket * tokens_per_entry] output rows: 1 = padding
  // What the engine expects in a padded output row: kValueOfKey (the V row of the one key it reads:
  // one key, softmax weight exactly 1), kZero (no key: FlashInfer's empty state writes O = 0) or
  // kAnything (several keys; dropped by the engine, only required to be written).
  enum class PadExpect { kValueOfKey, kZero, kAnything } expect = PadExpect::kValueOfKey;
  std::string expect_text;         // the same in words, with the engine's slicing
  std::vector<std::string> notes;  // what is modelled how
  // chunked local attention (/attention/local_chunk): "" when every entry is its decode virtual batch
  // (one per entry, the chunk of its one query), else why the padded virtual batch is not modelled
  std::string local_unmodelled;
  int64_t total_pages() const;  // pages of the replayed entries (paged_kv_indices length)
};

// The padded batch of a valid case with /cuda_graph, on the case's page table (make_page_table).
// Throws CaseError("/cuda_graph", ...) when the case has none.
CudaGraphPad cuda_graph_pad(const CaseSpec& c, const PageTable& pt);

// The padded batch in FlashInfer's paged CSR form: qo_indptr [bucket + 1], kv_indptr [bucket + 1],
// kv_indices, kv_last_page_len [bucket] (a padded entry with no pages: last_page_len 1, as vLLM).
struct GraphCsr {
  std::vector<int> qo_indptr, kv_indptr, kv_indices, kv_last_page_len;
};
GraphCsr graph_csr(const std::vector<GraphPadEntry>& entries);

// The O row of a padded entry that reads one key with a zero query row (GraphIo's padded Q), as
// FlashInfer's FA2 kernels and wrapper compute it: `v_key` [kv_heads x d] that key's V as the kernel reads
// it (an FP8 cache's stored values dequantised without scale: exact in the dtype), weighted by 1 / (1 +
// e^sink) against the head's sink (`sinks` [num_qo_heads] natural log, empty = none: weight exactly 1; the
// key's logit is 0), rounded to the dtype, then the wrapper's `out *= v_scale` rounded again (skipped for
// 1). Returns [num_qo_heads x d]; exact (compare bits) when there is no sink, else within pad_row_tolerance.
std::vector<float> pad_one_key_row(const std::vector<float>& v_key, int num_qo_heads, int num_kv_heads, int d, DType dt,
                                   const std::vector<float>& sinks, float v_scale);
// |O - expected| allowed for pad_one_key_row with a sink: two roundings to the dtype plus the kernel's
// approximate exp2 / rcp (2^-22), as 2 units in the dtype's last place of the expected value.
float pad_row_tolerance(DType dt, float expected);

// "16 entries, grid 33 x 8 CTAs, split-KV chunk 64 tokens" (result.h's GraphGrid, for every report).
std::string graph_grid_text(const GraphGrid& g);

}  // namespace attnscope
