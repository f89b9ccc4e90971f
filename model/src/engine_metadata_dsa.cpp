// The DSA engines' index buffers for a /sparse case (docs/dsa.md section 6): what SGLang's nsa backend
// and vLLM's FLASHMLA_SPARSE backend build from the indexer's top-k before the sparse MLA kernel runs,
// derived from the plan's selection (sparse.h) and attnscope's page table. Both translate each kept
// logical position i of request b into the slot page * page_size + offset of the pool the kernel reads.
#include <algorithm>

#include "attnscope/engine_metadata.h"
#include "attnscope/sparse.h"
#include "engine_metadata_detail.h"

namespace attnscope {

const EngineSource kSglangNsaSource = {
    "sgl-project/sglang", "python/sglang/srt/layers/attention/nsa_backend.py", "005e8bf8abf447d93cd14427efbf0b10bf42a326",
    "NSAMetadata, init_forward_metadata, _cal_indexer_k_start_end, forward_extend / forward_decode, "
    "_forward_flashmla_sparse; python/sglang/srt/layers/attention/dsa/transform_index.py at "
    "a63cacd7df2f90eb13d4a894ea798d1bc09a31a9 (transform_index_page_table_decode_ref / _prefill_ref)"};
const EngineSource kVllmSparseSource = {
    "vllm-project/vllm", "vllm/v1/attention/backends/mla/flashmla_sparse.py", "008a0c31dc020099dd40e8a2b7d2bdb37699b047",
    "FlashMLASparseMetadataBuilder.__init__ (decode thresholds), FlashMLASparseImpl._forward_bf16_kv / forward_mqa; "
    "vllm/v1/attention/backends/mla/sparse_utils.py at 02a26fa06df2ecb7b87ebe0fc93d5d211ce4d650 "
    "(_convert_req_index_to_global_index_kernel, flat_kv_row_view)"};

namespace engine_detail {

namespace {

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::optional<std::string> dsa_refusal(Engine e, const CaseSpec& c) {
  const bool sgl = e == Engine::kSglangNsa;
  if (!c.is_sparse())
    return std::string("/sparse: the case has no DeepSeek sparse attention, so no top-k index list; ") +
           (sgl ? "--engine sglang-fa" : "--engine vllm-flashinfer") + " shows the dense metadata";
  if (!c.mla_absorbed())
    return "/mla/absorbed: false: both engines run DSA's sparse kernels on the absorbed form (576 / 512, one latent "
           "head); a non-absorbed prefill is their dense MHA path, which reads no index list";
  if (auto why = common_refusal(c)) return why;
  if (c.attention.soft_cap) return "/attention/soft_cap: FlashMLA's sparse kernels take no soft-cap";
  if (c.attention.sinks) return "/attention/sinks: not modelled for the DSA backends";
  return std::nullopt;
}

// Rows of a [rows][top_k] index tensor: kept entries, -1 padding, and the rows' kept counts (first 8).
std::string padding_note(const std::vector<int64_t>& idx, int rows, int top_k, const std::string& what) {
  int64_t pad = 0;
  std::string per = "";
  for (int r = 0; r < rows; ++r) {
    int kept = 0;
    for (int j = 0; j < top_k; ++j) kept += idx[static_cast<size_t>(r) * top_k + j] >= 0;
    pad += top_k - kept;
    if (r < 8) per += (r ? ", " : "") + std::to_string(kept);
  }
  if (rows > 8) per += ", ...";
  const int64_t all = int64_t{rows} * top_k;
  return what + "; " + std::to_string(all - pad) + " kept and " + std::to_string(pad) + " -1 padding of " + std::to_string(all) +
         " entries (kept per row: " + per + ")";
}

// The selection's logical rows of request r, [q_len * top_k] (the plan's, else computed here).
std::vector<SparseSelection> selections(const CaseSpec& c, const Plan& p) {
  if (p.sparse) return *p.sparse;
  std::vector<SparseSelection> s;
  for (size_t r = 0; r < c.requests.size(); ++r) s.push_back(sparse_selection(c, static_cast<int>(r)));
  return s;
}

// The engines' translated rows against attnscope's slots (sparse_slots): one line per differing row.
void compare_slots(const std::vector<int64_t>& engine, const std::vector<int>& row_req, const std::vector<int>& row_q,
                   const std::vector<SparseSelection>& sel, const PageTable& pt, int top_k, EngineView& v) {
  for (size_t t = 0; t < row_req.size(); ++t) {
    const int r = row_req[t], q = row_q[t];
    const std::vector<int64_t> ours = sparse_slots(sel[r], pt, r);
    for (int j = 0; j < top_k; ++j)
      if (engine[t * top_k + j] != ours[static_cast<size_t>(q) * top_k + j]) {
        v.mismatches.push_back("row " + std::to_string(t) + " (request " + std::to_string(r) + ", query " + std::to_string(q) +
                               ") entry " + std::to_string(j) + ": the engine's slot " + std::to_string(engine[t * top_k + j]) +
                               ", attnscope's " + std::to_string(ours[static_cast<size_t>(q) * top_k + j]));
        break;
      }
  }
}

void common_notes(Engine e, const CaseSpec& c, EngineView& v) {
  const bool sgl = e == Engine::kSglangNsa;
  const int ps = c.kv_cache.page_size;
  if (ps != 64)
    v.notes.push_back("page_size " + std::to_string(ps) +
                      (sgl ? ": SGLang's nsa backend runs 64-token pages (the indexer's paged logits assert it)"
                           : ": FLASHMLA_SPARSE takes 64-token blocks only (get_supported_kernel_block_sizes)") +
                      "; the buffers are shown as the code computes them for this page size");
  if (sgl && c.sparse->top_k != 2048)
    v.notes.push_back("top_k " + std::to_string(c.sparse->top_k) +
                      ": SGLang's top-k and transform kernels are built for 2048 (TopK = 2048); shown with this top_k");
  if (c.fp8_kv())
    v.notes.push_back(
        "the buffers are those of a bf16 cache; an FP8 cache is FlashMLA's 656-byte \"FP8 with scale\" rows, not "
        "attnscope's FP8 cache (vLLM's FP8 prefill rows then index a gathered workspace instead of the pool)");
  if (c.kv_cache.storage == KvStorage::kRagged)
    v.notes.push_back("ragged storage shown as a page_size 1 pool (the engines' pools are paged)");
}

EngineView sglang_nsa(const CaseSpec& c, const Plan& p) {
  EngineView v;
  const PageTable& pt = p.pages;
  const int ps = pt.page_size, n = static_cast<int>(c.requests.size()), K = c.sparse->top_k;
  const auto sel = selections(c, p);
  bool decode = true, prefix = false;
  int64_t max_q = 0, max_k = 0;
  std::vector<int64_t> seq, ext;
  for (const auto& r : c.requests) {
    decode = decode && r.q_len == 1 && r.kv_len > 1;
    prefix = prefix || r.kv_len > r.q_len;
    max_q = std::max<int64_t>(max_q, r.q_len);
    max_k = std::max<int64_t>(max_k, r.kv_len);
    seq.push_back(r.kv_len);
    ext.push_back(r.q_len);
  }
  // req_to_token[req, :max_seqlen_k]: each token's slot, 0 past the request's (the pool starts zeroed)
  std::vector<std::vector<int64_t>> table1(n, std::vector<int64_t>(max_k, 0)), real(n);
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j < c.requests[r].kv_len; ++j) table1[r][j] = int64_t{pt.page_of(r, j)} * ps + j % ps;
    for (int64_t j = 0; j < max_k; j += ps) real[r].push_back(table1[r][j] / ps);
  }
  std::vector<int64_t> expanded, ks, ke, batch, logical, slots;
  std::vector<int> row_req, row_q;
  int64_t k_off = 0;
  for (int r = 0; r < n; ++r) {
    const auto& rq = c.requests[r];
    for (int q = 0; q < rq.q_len; ++q) {
      expanded.push_back(rq.kv_len - rq.q_len + q + 1);
      ks.push_back(k_off);
      ke.push_back(k_off + expanded.back());
      batch.push_back(r);
      row_req.push_back(r);
      row_q.push_back(q);
      for (int j = 0; j < K; ++j) {  // transform_index_page_table_*_ref: gather the row's slot, -1 stays -1
        const int i = sel[r].row(q)[j];
        logical.push_back(i);
        slots.push_back(i < 0 ? -1 : table1[r][i]);
      }
    }
    k_off += rq.kv_len;
  }
  std::vector<int64_t> clipped;
  for (int64_t x : expanded) clipped.push_back(std::min<int64_t>(x, K));
  const int64_t T = static_cast<int64_t>(expanded.size());
  v.mode = decode ? "decode" : "extend";
  v.mode_reason = decode ? "every request decodes one token: transform_index_page_table_decode"
                         : "a request has more than one new token or none cached: forward_extend, "
                           "transform_index_page_table_prefill over extend_seq_lens";
  v.tensors.push_back(vec_tensor("cache_seqlens_int32", "int32", seq, "seq_lens: every key, the new tokens included"));
  v.tensors.push_back(vec_tensor("cu_seqlens_k", "int32", prefix_sum(seq)));
  v.tensors.push_back(scalar("max_seq_len_q", decode ? 1 : (prefix ? max_q : max_k)));
  v.tensors.push_back(scalar("max_seq_len_k", max_k));
  std::vector<int64_t> cu_q(static_cast<size_t>(n) + 1);
  for (int r = 0; r <= n; ++r) cu_q[r] = r;
  v.tensors.push_back(vec_tensor("cu_seqlens_q", "int32", decode ? cu_q : (prefix ? prefix_sum(ext) : prefix_sum(seq)),
                                 decode ? "arange(bs + 1)" : (prefix ? "cumsum of extend_seq_lens" : "cu_seqlens_k")));
  v.tensors.push_back(table_tensor("page_table_1", table1, static_cast<int>(max_k), true,
                                   "req_to_token[req_pool_indices, :max_seqlen_k]: each logical position's token slot "
                                   "(page * page_size + offset, a page size 1 table), 0 past a request's tokens"));
  v.tensors.push_back(table_tensor("real_page_table", real, static_cast<int>(cdiv(max_k, ps)), false,
                                   "page_table_1[:, ::page_size] // page_size: the pages the indexer's paged logits read"));
  v.tensors.push_back(vec_tensor("nsa_seqlens_expanded", "int32", expanded,
                                 "per query token its visible keys kv_len - q_len + q + 1 (the top-k lengths)"));
  v.tensors.push_back(vec_tensor("nsa_cache_seqlens_int32", "int32", clipped, "nsa_seqlens_expanded clipped to top_k"));
  v.tensors.push_back(vec_tensor("nsa_cu_seqlens_k", "int32", prefix_sum(clipped)));
  if (!decode) {
    v.tensors.push_back(vec_tensor("indexer_k_start_end.ks", "int32", ks,
                                   "_cal_indexer_k_start_end: the row's first key in the batch's concatenated index keys"));
    v.tensors.push_back(vec_tensor("indexer_k_start_end.ke", "int32", ke, "ks + nsa_seqlens_expanded"));
    v.tensors.push_back(vec_tensor("token_to_batch_idx", "int32", batch));
  }
  EngineTensor li{"topk_indices", "int32", {T, K}, logical, "", false, false};
  li.note = padding_note(logical, static_cast<int>(T), K, "the indexer's top-k: logical positions within the request");
  v.tensors.push_back(std::move(li));
  EngineTensor sl{"page_table_1.transformed", "int32", {T, K}, slots, "", false, true};
  sl.note = padding_note(slots, static_cast<int>(T), K,
                         "page_table_1[request][i] per kept i, -1 where i < 0; _forward_flashmla_sparse passes it as "
                         "indices = page_table_1.unsqueeze(1) to flash_mla_sparse_fwd over the pool's token rows");
  v.tensors.push_back(std::move(sl));
  compare_slots(slots, row_req, row_q, sel, pt, K, v);
  v.notes.push_back(
      "SGLANG_NSA_FUSE_TOPK off and the PAGED transform: with it on, fast_topk_transform_fused writes "
      "page_table_1.transformed directly; the RAGGED method (topk_indices_offset) is not shown");
  return v;
}

// FlashMLASparseMetadataBuilder's decode threshold on Hopper (reorder_batch_threshold) for a head count.
int vllm_sparse_threshold(int heads) {
  if (heads == 16 || heads == 32) return 128;
  return 256;
}

EngineView vllm_sparse(const CaseSpec& c, const Plan& p) {
  EngineView v;
  const PageTable& pt = p.pages;
  const int ps = pt.page_size, n = static_cast<int>(c.requests.size()), K = c.sparse->top_k;
  const auto sel = selections(c, p);
  std::vector<int> ql, kl;
  int max_pages = 1;
  bool decode = true;
  for (int r = 0; r < n; ++r) {
    ql.push_back(c.requests[r].q_len);
    kl.push_back(c.requests[r].kv_len);
    max_pages = std::max(max_pages, pt.pages_of(r));
    decode = decode && c.requests[r].q_len == 1 && c.requests[r].kv_len > 1;
  }
  const int width = std::max(max_pages, c.kv_cache.max_num_blocks_per_seq.value_or(0));
  const int threshold = vllm_sparse_threshold(c.num_qo_heads);
  v.request_order = vllm_reorder(ql, kl, threshold);
  const auto all_rows = page_rows(pt, width);
  std::vector<int64_t> q, s, req_id, logical, slots, valid;
  std::vector<std::vector<int64_t>> rows;
  std::vector<int> row_req, row_q;
  for (int b = 0; b < n; ++b) {
    const int r = v.request_order[b];
    q.push_back(ql[r]);
    s.push_back(kl[r]);
    rows.push_back(all_rows[r]);
    for (int t = 0; t < ql[r]; ++t) {
      req_id.push_back(b);
      row_req.push_back(r);
      row_q.push_back(t);
      int64_t count = 0;
      for (int j = 0; j < K; ++j) {  // _convert_req_index_to_global_index_kernel, BLOCK_STRIDE_ROWS = BLOCK_SIZE
        const int i = sel[r].row(t)[j];
        const int64_t block = i < 0 ? -1 : i / ps;
        const bool ok = i >= 0 && block < width;
        logical.push_back(i);
        slots.push_back(ok ? all_rows[r][block] * ps + i % ps : -1);
        count += ok;
      }
      valid.push_back(count);
    }
  }
  const int64_t T = static_cast<int64_t>(req_id.size());
  v.mode = decode ? "decode" : "extend";
  v.mode_reason = decode ? "every request decodes one token: _convert_logical_to_physical_topk"
                         : "not a pure decode batch: triton_convert_req_index_to_global_index over every row "
                           "(the same slots with a bf16 cache)";
  v.tensors.push_back(vec_tensor("query_start_loc", "int32", prefix_sum(q)));
  v.tensors.push_back(vec_tensor("seq_lens", "int32", s));
  v.tensors.push_back(table_tensor("block_table", rows, width, false, "physical blocks per request, 0 past its own"));
  v.tensors.push_back(vec_tensor("req_id_per_token", "int32", req_id, "the batch position of each query token's request"));
  EngineTensor li{"topk_indices_buffer", "int32", {T, K}, logical, "", false, false};
  li.note = padding_note(logical, static_cast<int>(T), K,
                         "[:num_tokens] of the model's buffer, filled with -1 before the top-k kernels: logical "
                         "positions within the request");
  v.tensors.push_back(std::move(li));
  EngineTensor sl{"topk_indices", "int32", {T, K}, slots, "", false, true};
  sl.note = padding_note(slots, static_cast<int>(T), K,
                         "converted: block_table[req, i // block_size] * block_size + i % block_size, -1 where i < 0 "
                         "or the block is past the table; flash_mla_sparse_fwd reads it as [tokens, 1, top_k] rows of "
                         "flat_kv_row_view(kv_cache)");
  v.tensors.push_back(std::move(sl));
  v.tensors.push_back(vec_tensor("topk_length", "int32", valid, "return_valid_counts: the valid entries of each row"));
  compare_slots(slots, row_req, row_q, sel, pt, K, v);
  bool moved = false;
  for (int i = 0; i < n; ++i) moved = moved || v.request_order[i] != i;
  if (moved)
    v.notes.push_back("the runner reorders the batch, decodes first (q_len <= " + std::to_string(threshold) +
                      ", FLASHMLA_SPARSE's threshold for " + std::to_string(c.num_qo_heads) + " heads on Hopper)");
  v.notes.push_back(
      "the bf16 cache path (_forward_bf16_kv); an fp8_ds_mla cache runs flash_mla_with_kvcache on the same converted "
      "indices for decodes");
  return v;
}

}  // namespace

std::optional<std::string> dsa_size_refusal(Engine e, const CaseSpec& c, const PageTable& pt) {
  int64_t max_kv = 0, max_pages = 0;
  for (size_t r = 0; r < c.requests.size(); ++r) {
    max_kv = std::max<int64_t>(max_kv, c.requests[r].kv_len);
    max_pages = std::max<int64_t>(max_pages, pt.pages_of(static_cast<int>(r)));
  }
  const int64_t width =
      e == Engine::kSglangNsa ? max_kv : std::max<int64_t>(max_pages, c.kv_cache.max_num_blocks_per_seq.value_or(0));
  const int64_t cells = width * static_cast<int64_t>(c.requests.size());
  if (cells <= kMaxEngineCells) return std::nullopt;
  return "/requests: the engine's " + std::string(e == Engine::kSglangNsa ? "page_table_1" : "block_table") + " would hold " +
         std::to_string(cells) + " cells (" + std::to_string(c.requests.size()) + " requests x " + std::to_string(width) +
         " columns), more than the " + std::to_string(kMaxEngineCells) + " attnscope shows";
}

EngineView dsa_view(Engine e, const CaseSpec& c, const Plan& p) {
  if (auto why = dsa_refusal(e, c)) {
    EngineView v;
    v.refusal = *why;
    return v;
  }
  EngineView v = e == Engine::kSglangNsa ? sglang_nsa(c, p) : vllm_sparse(c, p);
  common_notes(e, c, v);
  return v;
}

}  // namespace engine_detail

}  // namespace attnscope
