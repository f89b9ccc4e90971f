// SGLang's FlashAttentionBackend metadata (flashattention_backend.py at kSglangSource's commit):
// init_forward_metadata per forward mode, _init_local_attn_metadata and the encoder branch, derived
// from the case in attnscope's words. SGLang's req_to_token row of a request lists the cache slot of
// each of its tokens (page * page_size + offset); its page_table is that row sampled every page_size
// tokens and divided by page_size, width ceil(max_seq_len_k / page_size).
#include <algorithm>

#include "attnscope/engine_metadata.h"
#include "engine_metadata_detail.h"

namespace attnscope::engine_detail {

namespace {

const char* kPoolNote = "0 past a request's own tokens: SGLang's req_to_token pool starts zeroed";

int64_t slot_of(const PageTable& pt, int r, int t) {
  return static_cast<int64_t>(pt.page_of(r, t)) * pt.page_size + t % pt.page_size;
}

// req_to_token[req, col]: the slot of the request's token `col`, 0 past its keys.
TableCell token_cell(const CaseSpec& c, const PageTable& pt) {
  return [&c, &pt](int r, int col) { return col < c.requests[r].kv_len ? slot_of(pt, r, col) : int64_t{0}; };
}

int64_t max_of(const std::vector<int64_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

std::vector<int64_t> arange(int64_t end, int64_t step) {
  std::vector<int64_t> v;
  for (int64_t x = 0; x < end; x += step) v.push_back(x);
  return v;
}

// The strided page_table of `seq` keys per request.
EngineTensor page_table(const PageTable& pt, int64_t max_k) {
  const int width = static_cast<int>((max_k + pt.page_size - 1) / pt.page_size);
  return table_tensor("page_table", page_rows(pt, width), width, false,
                      "req_to_token[:, :max_seq_len_k][:, ::page_size] // page_size: physical pages; " + std::string(kPoolNote));
}

void add_window(const CaseSpec& c, EngineView& v) {
  const int64_t left = c.attention.window ? *c.attention.window - 1 : -1;
  EngineTensor w = vec_tensor("window_size", "int", {left, c.attention.window ? 0 : -1},
                              "forward_extend / forward_decode: (layer.sliding_window_size, 0), the layer's size already "
                              "one less than the window; (-1, -1) without one");
  v.tensors.push_back(w);
}

// _init_local_attn_metadata: the virtual batches are cut from metadata.page_table before
// init_forward_metadata divides it into pages, i.e. from the token-slot rows.
void add_local(const CaseSpec& c, const Plan& p, EngineView& v) {
  const PageTable& pt = p.pages;
  const int ps = pt.page_size;
  std::vector<int> q_lens, seq_lens;
  for (const auto& r : c.requests) q_lens.push_back(r.q_len);
  const EngineTensor* cs = v.find("cache_seqlens_int32");
  for (int64_t s : cs->values) seq_lens.push_back(static_cast<int>(s));
  const int max_k = static_cast<int>(max_of(cs->values));
  const int eff = sglang_effective_chunk(*c.attention.local_chunk, max_k, ps);
  const LocalBatches lb = local_virtual_batches(eff, q_lens, seq_lens, token_cell(c, pt), max_k, ps);
  std::vector<int64_t> cuq(lb.cu_seqlens_q.begin(), lb.cu_seqlens_q.end()), sk(lb.seqlens_k.begin(), lb.seqlens_k.end());
  const std::string pre = "local_attn_metadata.";
  v.tensors.push_back(vec_tensor(pre + "local_query_start_loc", "int32", cuq, "cu_seqlens_q_local of the virtual batches"));
  v.tensors.push_back(vec_tensor(pre + "local_seqused_k", "int32", sk, "seqlens_k_local: keys of each virtual batch"));
  v.tensors.push_back(table_tensor(pre + "local_block_table", lb.block_table, eff / ps, ps > 1,
                                   ps > 1 ? "block_table_local, cut from the token-slot table (page_size > 1: slots, not pages)"
                                          : "block_table_local: the chunk's pages, columns clipped to the table's last"));
  v.tensors.push_back(scalar(pre + "local_max_query_len", *std::max_element(lb.seqlens_q.begin(), lb.seqlens_q.end())));
  v.tensors.push_back(scalar(pre + "local_max_seq_len", *std::max_element(lb.seqlens_k.begin(), lb.seqlens_k.end())));
  if (eff != *c.attention.local_chunk)
    v.notes.push_back(
        "make_local_attention_virtual_batches shrinks the chunk to min(chunk, max seq_len) rounded down to a "
        "page multiple: " +
        std::to_string(eff) + " instead of " + std::to_string(*c.attention.local_chunk));
  for (auto& m : compare_local(lb, p.local, pt)) v.mismatches.push_back(std::move(m));
  v.mode += "+local";
}

// Target verify with topk > 1: the prefix pass (no causal mask) and the expand pass, one query per
// row, whose page_table lists the draft tokens each query sees first (its ancestors and itself).
void tree_verify(const CaseSpec& c, const PageTable& pt, int d, EngineView& v) {
  const int n = static_cast<int>(c.requests.size());
  std::vector<int64_t> seq;
  for (const auto& r : c.requests) seq.push_back(r.kv_len - d);
  const int64_t max_k = max_of(seq);
  v.tensors.push_back(vec_tensor("cache_seqlens_int32", "int32", seq, "seq_lens: the prefix before the draft tokens"));
  v.tensors.push_back(scalar("max_seq_len_q", d, "speculative_num_draft_tokens"));
  v.tensors.push_back(scalar("max_seq_len_k", max_k));
  v.tensors.push_back(vec_tensor("cu_seqlens_q", "int32", arange(int64_t{n} * d + 1, d)));
  v.tensors.push_back(vec_tensor("cu_seqlens_k", "int32", prefix_sum(seq)));
  v.tensors.push_back(page_table(pt, max_k));
  std::vector<int64_t> lens;
  std::vector<std::vector<int64_t>> rows;
  for (int r = 0; r < n; ++r) {
    const auto& par = c.requests[r].tree_parents;
    for (int i = 0; i < d; ++i) {
      std::vector<bool> seen(d, false);
      for (int a = i; a >= 0; a = par[a]) seen[a] = true;
      std::vector<int64_t> row;
      for (int pass = 0; pass < 2; ++pass)  // visible draft tokens first, then the rest, each ascending
        for (int j = 0; j < d; ++j)
          if (seen[j] == (pass == 0)) row.push_back(slot_of(pt, r, static_cast<int>(seq[r]) + j));
      lens.push_back(std::count(seen.begin(), seen.end(), true));
      rows.push_back(std::move(row));
    }
  }
  const std::string pre = "expand.";
  v.tensors.push_back(scalar(pre + "max_seq_len_q", 1));
  v.tensors.push_back(vec_tensor(pre + "cu_seqlens_q", "int32", arange(int64_t{n} * d + 1, 1)));
  v.tensors.push_back(table_tensor(pre + "page_table", rows, d, false,
                                   "per draft token: the slots of the draft tokens it sees (ancestors and itself), then "
                                   "the others; only the first cache_seqlens_int32 are read"));
  v.tensors.push_back(vec_tensor(pre + "cache_seqlens_int32", "int32", lens, "custom_mask row sums over the draft tokens"));
  v.tensors.push_back(vec_tensor(pre + "cu_seqlens_k", "int32", prefix_sum(lens)));
  v.tensors.push_back(scalar(pre + "max_seq_len_k", max_of(lens)));
  v.notes.push_back("expand.* is forward_metadata_spec_decode_expand; the two passes are merged with merge_state_v2");
}

std::optional<std::string> tree_refusal(const CaseSpec& c, int d) {
  for (size_t r = 0; r < c.requests.size(); ++r) {
    const std::string at = "/requests/" + std::to_string(r);
    if (c.requests[r].q_len != d)
      return at + "/q_len: a verify batch has one speculative_num_draft_tokens for every request (" + std::to_string(d) +
             " here, request 0's)";
    if (c.requests[r].kv_len <= d) return at + "/kv_len: a verify step's draft tokens follow a cached prefix (kv_len > q_len)";
  }
  if (c.effective_page_size() != 1)
    return "/kv_cache/page_size: SGLang's tree verify (topk > 1) puts token slots in expand.page_table, which the kernel reads "
           "as page ids: page_size 1 only";
  if (c.attention.local_chunk) return "/attention/local_chunk: the topk > 1 verify builds no local_attn_metadata";
  if (c.attention.window)
    return "/attention/window: the expand pass reorders the draft tokens in its page_table, so a window over key positions "
           "does not carry over";
  return std::nullopt;
}

// Cross attention: encoder_* from the case's keys (the encoder's tokens), the decoder's own queries
// as a prefill without a cached prefix.
void encoder(const CaseSpec& c, const PageTable& pt, EngineView& v) {
  const int64_t enc = c.requests[0].kv_len, q = c.requests[0].q_len;
  v.tensors.push_back(vec_tensor("cache_seqlens_int32", "int32", {q}, "the decoder's own tokens (a prefill of q_len)"));
  v.tensors.push_back(scalar("max_seq_len_k", q));
  v.tensors.push_back(vec_tensor("cu_seqlens_k", "int32", {0, q}));
  v.tensors.push_back(scalar("max_seq_len_q", q));
  v.tensors.push_back(vec_tensor("cu_seqlens_q", "int32", {0, q}, "cu_seqlens_k (no cached prefix)"));
  v.tensors.push_back(vec_tensor("encoder_lens_int32", "int32", {enc}));
  v.tensors.push_back(vec_tensor("encoder_cu_seqlens_k", "int32", {0, enc}));
  v.tensors.push_back(scalar("encoder_max_seq_len_k", enc));
  std::vector<std::vector<int64_t>> row(1);
  for (int t = 0; t < enc; ++t) row[0].push_back(slot_of(pt, 0, t));
  v.tensors.push_back(table_tensor("encoder_page_table", row, static_cast<int>(enc), true,
                                   "req_to_token[:, :encoder_max_seq_len_k]: token slots, never divided into pages"));
  v.notes.push_back(
      "page_table (the decoder's self-attention) is req_to_token[:, encoder_len : encoder_len + max_seq_len_k]: "
      "slots of the decoder's own tokens, which this case does not hold");
  if (pt.page_size > 1)
    v.mismatches.push_back(
        "encoder_page_table holds token slots but forward_extend passes it to flash_attn_with_kvcache as "
        "the page table of a page_size " +
        std::to_string(pt.page_size) + " cache: the kernel reads slot s as page s");
}

}  // namespace

EngineView sglang_view(const CaseSpec& c, const Plan& p) {
  EngineView v;
  if (auto why = common_refusal(c)) {
    v.refusal = *why;
    return v;
  }
  if (c.attention.sinks) {
    v.refusal = "/attention/sinks: FlashAttentionBackend calls flash_attn_with_kvcache without sinks at this commit";
    return v;
  }
  const PageTable& pt = p.pages;
  const int n = static_cast<int>(c.requests.size());
  if (!c.attention.causal) {
    v.mode = "encoder";
    v.mode_reason =
        "/attention/causal false: SGLang's one non-causal path is cross attention (layer.is_cross_attention): "
        "the case's keys are the encoder's tokens, its queries the decoder's";
    if (n != 1)
      v.refusal =
          "/requests: SGLang's cross attention takes one request (init_forward_metadata asserts encoder_lens.numel() == 1)";
    else if (c.attention.window)
      v.refusal = "/attention/window: FlashAttentionBackend.__init__ asserts no sliding window with cross attention";
    else
      encoder(c, pt, v);
    return v;
  }
  bool all_decode = true, uniform = true, long_cache = true;
  const int d = c.requests[0].q_len;
  for (const auto& r : c.requests) {
    all_decode = all_decode && r.q_len == 1;
    uniform = uniform && r.q_len == d;
    long_cache = long_cache && r.kv_len >= 2 * r.q_len;
  }
  if (c.has_trees() && !all_decode) {
    v.mode = "target_verify_topk";
    v.mode_reason = "tree_parents: EAGLE target verify with topk > 1, speculative_num_draft_tokens " + std::to_string(d);
    if (auto why = tree_refusal(c, d))
      v.refusal = *why;
    else
      tree_verify(c, pt, d, v);
    add_window(c, v);
    return v;
  }
  std::vector<int64_t> kv, q;
  bool prefix = false;
  for (const auto& r : c.requests) {
    kv.push_back(r.kv_len);
    q.push_back(r.q_len);
    prefix = prefix || r.kv_len > r.q_len;
  }
  const int64_t max_k = max_of(kv);
  v.tensors.push_back(vec_tensor("cache_seqlens_int32", "int32", kv, "seq_lens: every key, the new tokens included"));
  v.tensors.push_back(scalar("max_seq_len_k", max_k));
  v.tensors.push_back(vec_tensor("cu_seqlens_k", "int32", prefix_sum(kv)));
  if (all_decode) {
    v.mode = "decode";
    v.mode_reason = "every request has q_len 1 (ForwardMode.DECODE; a draft decode with topk <= 1 builds the same tensors)";
    v.tensors.push_back(scalar("max_seq_len_q", 1, "the dataclass default"));
    v.tensors.push_back(vec_tensor("cu_seqlens_q", "int32", arange(n + 1, 1)));
  } else if (uniform && d <= 8 && long_cache) {
    v.mode = "target_verify";
    v.mode_reason = "every request has q_len " + std::to_string(d) +
                    " (2..8) over a cache of at least twice that: EAGLE target verify, topk <= 1, "
                    "speculative_num_draft_tokens " +
                    std::to_string(d);
    v.tensors[0].note = "seq_lens + speculative_num_draft_tokens";
    v.tensors.push_back(scalar("max_seq_len_q", d, "speculative_num_draft_tokens"));
    v.tensors.push_back(vec_tensor("cu_seqlens_q", "int32", arange(int64_t{n} * d + 1, d)));
  } else {
    v.mode = "extend";
    v.mode_reason = prefix ? "a request has a cached prefix: cu_seqlens_q from extend_seq_lens"
                           : "no cached prefix: cu_seqlens_q is cu_seqlens_k and max_seq_len_q is max_seq_len_k";
    v.tensors.push_back(scalar("max_seq_len_q", prefix ? max_of(q) : max_k));
    v.tensors.push_back(vec_tensor("cu_seqlens_q", "int32", prefix_sum(prefix ? q : kv)));
  }
  v.tensors.push_back(page_table(pt, max_k));
  add_window(c, v);
  if (c.attention.local_chunk) add_local(c, p, v);
  if (c.attention.soft_cap) v.notes.push_back("softcap " + number_text(*c.attention.soft_cap) + " (layer.logit_cap)");
  if (c.kv_cache.fp8)
    v.notes.push_back(
        "FP8 cache: forward_* casts q to the cache's FP8 type and passes k_descale / v_descale, layer.k_scale "
        "expanded to (batch_size, num_kv_heads)");
  if (c.kv_cache.storage == KvStorage::kRagged)
    v.notes.push_back("ragged storage: SGLang's page_size 1 pool, the token slots of attnscope's contiguous layout");
  return v;
}

}  // namespace attnscope::engine_detail
