// vLLM v1's FlashInfer backend metadata (flashinfer.py at kVllmSource's commit): the batch as the
// runner reorders it, FlashInferMetadataBuilder.build's host buffers, the decode / prefill split and
// the arguments each wrapper's plan receives; for chunked local attention the virtual batches of
// make_local_attention_virtual_batches replace the requests first (chunked_local_attention.py).
#include <algorithm>

#include "attnscope/engine_metadata.h"
#include "engine_metadata_detail.h"

namespace attnscope::engine_detail {

namespace {

std::optional<std::string> vllm_refusal(const CaseSpec& c) {
  if (auto why = common_refusal(c)) return why;
  if (c.is_mla()) return "/mla: vLLM serves MLA through its MLA backends (vllm/v1/attention/backends/mla/), not FlashInferImpl";
  if (!c.attention.causal)
    return "/attention/causal: FlashInferImpl raises NotImplementedError for encoder and cross attention, and the prefill "
           "wrapper is planned with causal=True";
  for (size_t r = 0; r < c.requests.size(); ++r)
    if (!c.requests[r].tree_parents.empty())
      return "/requests/" + std::to_string(r) + "/tree_parents: the FlashInfer backend plans a causal mask only, no tree";
  if (c.attention.sinks)
    return "/attention/sinks: FlashInferMetadataBuilder raises NotImplementedError for sinks unless TRT-LLM attention "
           "(Blackwell) runs";
  if (c.head_dim_qk != c.head_dim_vo) return "/head_dim_vo: FlashInferImpl has one head_size for Q, K and V";
  if (c.head_dim_qk != 64 && c.head_dim_qk != 128 && c.head_dim_qk != 256)
    return "/head_dim_qk: " + std::to_string(c.head_dim_qk) +
           " is not one of FlashInferBackend.get_supported_head_sizes: 64, "
           "128, 256";
  if (c.dtype == DType::kFp32) return "/dtype: FlashInferBackend.get_supported_dtypes is float16 and bfloat16";
  return std::nullopt;
}

struct Split {
  int decodes = 0, prefills = 0;
  int64_t decode_tokens = 0, prefill_tokens = 0;
};

// split_decodes_and_prefills(decode_threshold=1, require_uniform=True) on a reordered batch.
Split split_batch(const std::vector<int64_t>& q) {
  const int n = static_cast<int>(q.size());
  int64_t total = 0;
  for (int64_t x : q) total += x;
  Split s;
  const int64_t max_q = *std::max_element(q.begin(), q.end());
  int first = n;  // all decodes while every query length is <= 1
  if (max_q > 1 && q[0] > 1) {
    first = 0;  // the first request is no decode: none is
  } else if (max_q > 1) {
    bool uniform = true;  // a padded uniform batch (lengths q[0] or 0) is all decodes
    for (int64_t x : q) uniform = uniform && (x == q[0] || x == 0);
    for (int i = 0; i < n && !uniform; ++i)
      if (q[i] != q[0]) {
        first = i;
        break;
      }
  }
  s.decodes = first;
  s.prefills = n - first;
  for (int i = 0; i < first; ++i) s.decode_tokens += q[i];
  s.prefill_tokens = total - s.decode_tokens;
  return s;
}

std::vector<int64_t> slice(const std::vector<int64_t>& v, size_t from, size_t to) {
  return std::vector<int64_t>(v.begin() + static_cast<long>(from), v.begin() + static_cast<long>(to));
}

// build() on the (possibly virtual) batch: q lengths, seq lengths, block-table rows of `width`.
void build(const CaseSpec& c, const std::vector<int64_t>& q, const std::vector<int64_t>& s,
           const std::vector<std::vector<int64_t>>& rows, int width, int ps, EngineView& v) {
  const int n = static_cast<int>(q.size());
  std::vector<int64_t> pages, indices, last;
  for (int i = 0; i < n; ++i) {
    pages.push_back((s[i] + ps - 1) / ps);
    for (int64_t j = 0; j < pages.back(); ++j) indices.push_back(rows[i][j]);
    last.push_back(s[i] % ps == 0 ? ps : s[i] % ps);
  }
  const std::vector<int64_t> qo = prefix_sum(q), indptr = prefix_sum(pages);
  const Split sp = split_batch(q);
  v.tensors.push_back(vec_tensor("query_start_loc", "int32", qo, "qo_indptr_cpu"));
  v.tensors.push_back(vec_tensor("seq_lens", "int32", s));
  v.tensors.push_back(table_tensor("block_table_tensor", rows, width, false, "physical pages per request, 0 past its own"));
  v.tensors.push_back(scalar("max_q_len", *std::max_element(q.begin(), q.end())));
  v.tensors.push_back(scalar("max_seq_len", *std::max_element(s.begin(), s.end())));
  v.tensors.push_back(scalar("num_decodes", sp.decodes));
  v.tensors.push_back(scalar("num_decode_tokens", sp.decode_tokens));
  v.tensors.push_back(scalar("num_prefills", sp.prefills));
  v.tensors.push_back(scalar("num_prefill_tokens", sp.prefill_tokens));
  v.tensors.push_back(vec_tensor("paged_kv_indptr", "int32", indptr, "cumsum of ceil(seq_lens / page_size)"));
  v.tensors.push_back(vec_tensor("paged_kv_indices", "int32", indices, "each block_table row's first ceil(seq_len / page_size)"));
  v.tensors.push_back(vec_tensor("paged_kv_last_page_len", "int32", last, "seq_lens % page_size, 0 read as page_size"));
  const int nd = sp.decodes;
  if (sp.prefills > 0) {
    std::vector<int64_t> pq;
    for (int i = nd; i <= n; ++i) pq.push_back(qo[i] - qo[nd]);
    const std::string pre = "prefill_wrapper.plan.";
    v.tensors.push_back(vec_tensor(pre + "qo_indptr", "int32", pq, "query_start_loc[num_decodes:] rebased to 0"));
    v.tensors.push_back(vec_tensor(pre + "paged_kv_indptr", "int32", slice(indptr, nd, n + 1),
                                   "paged_kv_indptr[num_decodes:], not rebased: it indexes the whole paged_kv_indices"));
    v.tensors.push_back(vec_tensor(pre + "paged_kv_last_page_len", "int32", slice(last, nd, n)));
    v.tensors.push_back(scalar("max_q_len_prefill", *std::max_element(q.begin() + nd, q.end())));
  }
  if (nd > 0) {
    const std::string pre = "decode_wrapper.plan.";
    v.tensors.push_back(vec_tensor(pre + "indptr", "int32", slice(indptr, 0, nd + 1), "fast_plan_decode's indptr_cpu"));
    v.tensors.push_back(vec_tensor(pre + "last_page_len", "int32", slice(last, 0, nd)));
    v.tensors.push_back(vec_tensor(pre + "seq_lens", "int32", slice(s, 0, nd)));
  }
  v.tensors.push_back(
      scalar("window_left", c.attention.window ? *c.attention.window - 1 : -1, "sliding_window - 1, -1 for none"));
  v.mode = nd == n ? "decode" : (nd == 0 ? "prefill" : "decode+prefill");
  v.mode_reason = std::to_string(sp.decodes) + " decode request(s) (q_len 1) on the decode wrapper, " +
                  std::to_string(sp.prefills) + " on the prefill wrapper (causal=True)";
}

}  // namespace

EngineView vllm_view(const CaseSpec& c, const Plan& p) {
  EngineView v;
  if (auto why = vllm_refusal(c)) {
    v.refusal = *why;
    return v;
  }
  const PageTable& pt = p.pages;
  const int ps = pt.page_size;
  const int n = static_cast<int>(c.requests.size());
  std::vector<int> ql, kl;
  int max_pages = 1;
  for (int r = 0; r < n; ++r) {
    ql.push_back(c.requests[r].q_len);
    kl.push_back(c.requests[r].kv_len);
    max_pages = std::max(max_pages, pt.pages_of(r));
  }
  const int width = std::max(max_pages, c.kv_cache.max_num_blocks_per_seq.value_or(0));
  v.request_order = vllm_reorder(ql, kl, 1);
  const auto all_rows = page_rows(pt, width);
  std::vector<int64_t> q, s, slots;
  std::vector<std::vector<int64_t>> rows;
  std::vector<int> oq, os;
  for (int r : v.request_order) {
    q.push_back(ql[r]);
    s.push_back(kl[r]);
    oq.push_back(ql[r]);
    os.push_back(kl[r]);
    rows.push_back(all_rows[r]);
    for (int t = kl[r] - ql[r]; t < kl[r]; ++t) slots.push_back(int64_t{pt.page_of(r, t)} * ps + t % ps);
  }
  bool moved = false;
  for (int i = 0; i < n; ++i) moved = moved || v.request_order[i] != i;
  if (moved)
    v.notes.push_back(
        "the runner reorders the batch, decodes first (reorder_batch_to_split_decodes_and_prefills): see the "
        "request order");
  if (c.attention.local_chunk) {
    const int ch = *c.attention.local_chunk;
    const auto at_pos = [&rows](int r, int col) { return rows[r][col]; };
    const auto at_req = [&all_rows](int r, int col) { return all_rows[r][col]; };
    const LocalBatches lb = local_virtual_batches(ch, oq, os, at_pos, width, ps);
    const LocalBatches mine = local_virtual_batches(ch, ql, kl, at_req, width, ps);  // the case's order, to compare
    for (auto& m : compare_local(mine, p.local, pt)) v.mismatches.push_back(std::move(m));
    std::vector<int64_t> vq(lb.seqlens_q.begin(), lb.seqlens_q.end()), vs(lb.seqlens_k.begin(), lb.seqlens_k.end());
    build(c, vq, vs, lb.block_table, ch / ps, ps, v);
    v.mode += "+local";
    v.notes.push_back(
        "chunked local attention: the builder sees make_local_attention_virtual_batches' virtual batches as "
        "its requests (query_start_loc, seq_lens, block_table_tensor are theirs)");
  } else {
    build(c, q, s, rows, width, ps, v);
  }
  v.tensors.push_back(vec_tensor("slot_mapping", "int64", slots, "cache slot of each new token: page * page_size + offset"));
  if (c.attention.soft_cap) v.notes.push_back("logits_soft_cap " + number_text(*c.attention.soft_cap) + " (both plans)");
  if (c.split.cuda_graph)
    v.notes.push_back(
        "/split/cuda_graph: a pure decode batch under full CUDA graphs is padded to the captured size "
        "(pad_for_cudagraph); the padding is not modelled here");
  if (c.kv_cache.storage == KvStorage::kRagged)
    v.notes.push_back("ragged storage shown as a page_size 1 cache (vLLM's cache is always paged)");
  return v;
}

}  // namespace attnscope::engine_detail
