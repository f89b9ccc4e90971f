// flash_attn's translation of attnscope's conventions into FlashAttention-2's (fa_conventions.h).
// The API behaviour reproduced here is flash_api.cpp's (mha_varlen_fwd, mha_fwd_kvcache,
// set_params_fprop, set_params_splitkv) of the pinned sdist; that file is PyTorch-bound and is
// never compiled.
#include "fa_conventions.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnscope/engine_metadata.h"
#include "attnscope/mask.h"

namespace attnscope::peers::flash_attn {

namespace {

std::string str(int64_t v) { return std::to_string(v); }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int round_multiple(int x, int m) { return (x + m - 1) / m * m; }

std::string list_text(const Built& b) {
  std::string s;
  for (DType t : b.dtypes)
    for (int d : b.head_dims) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t)) + " d" + str(d);
  return s.empty() ? "none" : s;
}

bool uniform_q_len(const CaseSpec& c) {
  for (const auto& r : c.requests)
    if (r.q_len != c.requests[0].q_len) return false;
  return true;
}

int max_pages(const CaseSpec& c) {
  int m = 0;
  for (const auto& r : c.requests) m = std::max<int>(m, static_cast<int>(ceil_div(r.kv_len, c.effective_page_size())));
  return m;
}

}  // namespace

std::string refusal_reason(Api api, const CaseSpec& c, const Built& built) {
  const std::string api_name = api == Api::kVarlen ? "flash_attn_varlen_func" : "flash_attn_with_kvcache";
  if (c.dtype != DType::kBf16 && c.dtype != DType::kFp16)
    return "FlashAttention-2 takes fp16 and bf16 only (/dtype is " + std::string(dtype_name(c.dtype)) + ")";
  if (c.is_mla()) return "FlashAttention-2 has no MLA kernel (head dims up to 256; /mla)";
  if (c.head_dim_qk != c.head_dim_vo)
    return "FlashAttention-2 takes one head dim for Q, K and V (/head_dim_qk " + str(c.head_dim_qk) + ", /head_dim_vo " +
           str(c.head_dim_vo) + ")";
  if (c.head_dim_qk > 256)
    return "FlashAttention-2's forward takes head dims up to 256 (/head_dim_qk " + str(c.head_dim_qk) + ")";
  const bool dt = std::find(built.dtypes.begin(), built.dtypes.end(), c.dtype) != built.dtypes.end();
  const bool hd = std::find(built.head_dims.begin(), built.head_dims.end(), c.head_dim_qk) != built.head_dims.end();
  if (!dt || !hd)
    return "not instantiated: this build compiled FlashAttention-2's kernels for " + list_text(built) +
           " (ATTNSCOPE_FLASH_ATTN_HEAD_DIMS / ATTNSCOPE_FLASH_ATTN_DTYPES), not " + dtype_name(c.dtype) + " d" +
           str(c.head_dim_qk);
  // SGLang runs chunked local attention on flash_attn_with_kvcache through its virtual batches
  if (c.attention.local_chunk && !(api == Api::kKvcache && c.engine == "sglang-fa"))
    return "FlashAttention-2 has no chunked local attention (/attention/local_chunk; flash_attn.kvcache runs SGLang's "
           "virtual batches with /engine sglang-fa)";
  if (c.attention.prefix_lm) return "FlashAttention-2 has no prefix-LM mask (/attention/prefix_lm)";
  for (size_t i = 0; i < c.requests.size(); ++i) {
    const auto& r = c.requests[i];
    const std::string at = "/requests/" + str(static_cast<int64_t>(i));
    if (r.doc_starts.size() > 1) return "FlashAttention-2 has no document mask (" + at + "/doc_starts)";
    if (r.pad_start && api == Api::kKvcache)
      return "flash_attn_with_kvcache has no padding mask inside a sequence (" + at +
             "/pad_start; flash_attn.varlen takes it as segments with seqused_k)";
  }
  // FA2's non-causal ALiBi is symmetric, -slope |q_abs - k|; attnscope's is slope (k - q_abs), the same
  // only where keys past the query are masked (a window bounds the left side only)
  if (c.attention.alibi && !c.attention.causal)
    return "FlashAttention-2's ALiBi without a causal mask is symmetric (-slope |q_abs - k|), attnscope's is slope (k - "
           "q_abs) (conventions.md section 2): ALiBi runs with /attention/causal";
  if (api == Api::kVarlen) {
    if (c.kv_cache.storage != KvStorage::kRagged)
      return "flash_attn.varlen reads K/V as one ragged [total_k, heads, dim] tensor through cu_seqlens_k: it takes "
             "/kv_cache/storage ragged (a paged cache runs on flash_attn.kvcache)";
    return "";
  }
  if (!uniform_q_len(c))
    return "flash_attn_with_kvcache takes q as [batch, seqlen_q, heads, dim]: every request needs the same q_len "
           "(/requests/*/q_len)";
  if (c.kv_cache.storage == KvStorage::kPaged) {
    if (c.kv_cache.page_size % 256 != 0)
      return "flash_attn_with_kvcache's paged KV cache needs a page size that is a multiple of 256 (\"Paged KV cache block "
             "size must be divisible by 256\"); /kv_cache/page_size is " +
             str(c.kv_cache.page_size);
  }
  if (c.kv_cache.max_num_blocks_per_seq && *c.kv_cache.max_num_blocks_per_seq < max_pages(c))
    return "/kv_cache/max_num_blocks_per_seq " + str(*c.kv_cache.max_num_blocks_per_seq) + " is narrower than the longest " +
           "request's " + str(max_pages(c)) + " pages: " + api_name + "'s block table must hold every page";
  return "";
}

int num_splits_heuristic(int batch_nheads_mblocks, int num_sms, int num_n_blocks, int max_splits) {
  // Nearly a full wave of blocks without splitting: splitting only adds the combine.
  if (batch_nheads_mblocks >= 0.8f * num_sms) return 1;
  const int top = std::min({max_splits, num_sms, num_n_blocks});
  // A count s whose ceil(n / s) blocks per split equals that of s - 1 is the same partition as s - 1.
  auto distinct = [&](int s) { return s == 1 || ceil_div(num_n_blocks, s) != ceil_div(num_n_blocks, s - 1); };
  auto efficiency = [&](int s) {
    const float waves = static_cast<float>(batch_nheads_mblocks * s) / num_sms;  // float, as FA2 computes it
    return waves / std::ceil(waves);
  };
  float best = 0.f;
  for (int s = 1; s <= top; ++s)
    if (distinct(s)) best = std::max(best, efficiency(s));
  for (int s = 1; s <= top; ++s)
    if (distinct(s) && efficiency(s) >= 0.85 * best) return s;  // 0.85 is a double in FA2 too
  return 1;
}

int num_splits_arg(const CaseSpec& c, int64_t seqlen_k, std::string* from) {
  if (c.split.planner == Planner::kOff) {
    *from = "num_splits=1 (/split/planner off)";
    return 1;
  }
  if (c.split.planner == Planner::kFixed && c.split.fixed_split_size) {
    const int64_t chunk = static_cast<int64_t>(*c.split.fixed_split_size) * c.effective_page_size();
    const int s = static_cast<int>(std::clamp<int64_t>(ceil_div(seqlen_k, chunk), 1, 128));
    *from = "num_splits=" + str(s) + " (/split/planner fixed: ceil(seqlen_k " + str(seqlen_k) + " / " + str(chunk) +
            " keys), at most 128)";
    return s;
  }
  *from = "num_splits=0: FlashAttention-2's heuristic";
  return 0;
}

namespace {

// "" when every cell of the engine's table is a page of the pool, else the first that is not.
std::string table_outside_pool(const EngineTensor& t, const PageTable& pt) {
  const int64_t width = t.shape.size() == 2 ? t.shape[1] : 1;
  for (size_t i = 0; i < t.values.size(); ++i)
    if (t.values[i] < 0 || t.values[i] >= pt.num_pages)
      return t.name + "[" + str(static_cast<int64_t>(i) / width) + "][" + str(static_cast<int64_t>(i) % width) +
             "] = " + str(t.values[i]) + " is not a page of the pool (" + str(pt.num_pages) + " pages of " + str(pt.page_size) +
             " tokens)" + (t.slots ? ": the table holds token slots, which flash_attn_with_kvcache reads as page ids" : "");
  return "";
}

}  // namespace

void feed_from_sglang(const CaseSpec& c, const Plan& p, Launch* l) {
  const EngineView v = engine_metadata(Engine::kSglangFa, c, p);
  const std::string at = "/engine sglang-fa: ";
  if (v.refusal) {
    l->engine_refusal = at + *v.refusal;
    return;
  }
  if (v.mode.rfind("decode", 0) != 0 && v.mode.rfind("target_verify", 0) != 0 && v.mode.rfind("extend", 0) != 0) {
    l->engine_refusal = at + "SGLang's " + v.mode + " mode is not fed to flash_attn.kvcache (decode, target_verify, extend)";
    return;
  }
  if (v.mode == "target_verify_topk") {
    l->engine_refusal = at + "a tree verify's expand pass (expand.page_table of token slots) is not fed to flash_attn.kvcache";
    return;
  }
  if (!l->paged) {
    l->engine_refusal = at +
                        "page_table: ragged storage is SGLang's page_size 1 pool, whose table of token slots needs a "
                        "paged KV block size of 1; flash_attn_with_kvcache needs a multiple of 256 (/kv_cache/storage)";
    return;
  }
  const bool local = c.attention.local_chunk.has_value();
  const std::string pre = local ? "local_attn_metadata." : "";
  const EngineTensor* seq = v.find(pre + (local ? "local_seqused_k" : "cache_seqlens_int32"));
  const EngineTensor* cuq = v.find(pre + (local ? "local_query_start_loc" : "cu_seqlens_q"));
  const EngineTensor* table = v.find(pre + (local ? "local_block_table" : "page_table"));
  if (!seq || !cuq || !table || table->shape.size() != 2) {
    l->engine_refusal = at + "the " + v.mode + " view has no " + pre + "cache_seqlens / cu_seqlens_q / table";
    return;
  }
  // flash_attn_with_kvcache (FA2) has no cu_seqlens_q: q is [batch, seqlen_q], one length for all
  const int L = c.requests[0].q_len, n = static_cast<int>(cuq->values.size()) - 1;
  for (int i = 0; i < n; ++i) {
    const int64_t q = cuq->values[i + 1] - cuq->values[i];
    if (q == L && n == static_cast<int>(c.requests.size())) continue;
    l->engine_refusal = at + cuq->name + ": batch " + str(i) + " of " + str(n) + " holds " + str(q) +
                        " queries; flash_attn_with_kvcache takes q as [batch, seqlen_q] (" +
                        str(static_cast<int64_t>(c.requests.size())) + " x " + str(L) +
                        ") and no cu_seqlens_q (FA3's varlen-q path, which SGLang calls, has it)";
    return;
  }
  if (auto why = table_outside_pool(*table, p.pages); !why.empty()) {
    l->engine_refusal = at + why;
    return;
  }
  l->b = n;
  l->cu_seqlens_k.assign(seq->values.begin(), seq->values.end());
  l->max_num_blocks_per_seq = static_cast<int>(table->shape[1]);
  l->block_table.assign(table->values.begin(), table->values.end());
  l->seqlen_k = l->max_num_blocks_per_seq * l->page_block_size;
  l->fed =
      "fed from SGLang's " + seq->name + ", " + table->name + " [" + str(n) + ", " + str(table->shape[1]) + "] (" + v.mode + ")";
}

Launch translate(Api api, const CaseSpec& c, const Plan& p, int num_sms) {
  Launch l;
  l.api = api;
  const int B = static_cast<int>(c.requests.size()), Hq = c.num_qo_heads, Hk = c.num_kv_heads, d = c.head_dim_qk;
  const int G = Hq / Hk, ps = c.effective_page_size();
  int max_q = 0, max_k = 0;
  for (const auto& r : c.requests) {
    max_q = std::max(max_q, r.q_len);
    max_k = std::max(max_k, r.kv_len);
  }
  l.b = B;
  l.h = Hq;
  l.h_k = Hk;
  l.d = d;
  l.d_rounded = round_multiple(d, d <= 128 ? 32 : 64);
  l.total_q = static_cast<int>(c.total_q());
  // The Python call: causal = /attention/causal, window_size = (W - 1, -1) with a window (attnscope's
  // window bounds the left side only; causal bounds the right), else (-1, -1). The C++ API then drops
  // causal for one query (a no-op there) unless ALiBi, and a causal call's right bound becomes 0.
  int left = c.attention.window ? *c.attention.window - 1 : -1;
  const bool alibi = c.attention.alibi;
  const bool one_query = (api == Api::kVarlen ? max_q : c.requests[0].q_len) == 1;
  int right = c.attention.causal && !(one_query && !alibi) ? 0 : -1;
  if (api == Api::kVarlen) {
    l.seqlen_q = max_q;
    l.seqlen_k = max_k;
    l.unpadded_lse = true;
    l.cu_seqlens_q.push_back(0);
    l.cu_seqlens_k.push_back(0);
    bool padded = false;
    for (const auto& r : c.requests) padded = padded || r.pad_start;
    for (int r = 0; r < B; ++r) {
      const auto& q = c.requests[r];
      // padding: the queries before pad_start see keys [0, pad_start) (FA2's bottom-right alignment
      // puts them where attnscope does); the padding queries follow as a segment with no key
      const int keys = q.pad_start ? *q.pad_start : q.kv_len;
      const int real = q.pad_start ? std::clamp(*q.pad_start - (q.kv_len - q.q_len), 0, q.q_len) : q.q_len;
      l.cu_seqlens_q.push_back(l.cu_seqlens_q.back() + real);
      // the ragged pool holds the requests back to back (paging.h: ragged storage is contiguous)
      l.cu_seqlens_k.push_back(p.pages.indptr[r + 1]);
      if (padded) l.seqused_k.push_back(keys);
      if (padded && real < q.q_len) {
        l.cu_seqlens_q.push_back(l.cu_seqlens_q.back() + q.q_len - real);
        l.cu_seqlens_k.push_back(p.pages.indptr[r + 1]);
        l.seqused_k.push_back(0);
      }
    }
    l.b = static_cast<int>(l.cu_seqlens_q.size()) - 1;
    l.q_row_stride = l.o_row_stride = static_cast<int64_t>(Hq) * d;
    l.q_head_stride = l.o_head_stride = d;
    l.k_row_stride = static_cast<int64_t>(Hk) * d;
    l.k_head_stride = d;
    l.num_splits = 1;
    l.num_splits_from = "mha_varlen_fwd's prefill path: no split (its split-KV runs for swapped GQA decode, flash_attn.kvcache)";
  } else {
    const int L = c.requests[0].q_len;
    l.paged = c.kv_cache.storage == KvStorage::kPaged;
    l.page_block_size = l.paged ? ps : 1;
    const int width =
        c.kv_cache.max_num_blocks_per_seq ? *c.kv_cache.max_num_blocks_per_seq : static_cast<int>(ceil_div(max_k, ps));
    l.seqlen_k = l.paged ? width * ps : width;  // ragged: the contiguous cache's seqlen dim, tokens
    l.swapped = L == 1 && Hq > Hk && left < 0 && right < 0 && d % 8 == 0 && !alibi;
    l.seqlen_q = l.swapped ? G : L;
    l.h = l.swapped ? Hk : Hq;
    if (l.swapped) {  // q (b, 1, Hk * G, d) viewed as (b, G, Hk, d)
      l.q_batch_stride = static_cast<int64_t>(Hq) * d;
      l.q_row_stride = d;
      l.q_head_stride = static_cast<int64_t>(G) * d;
    } else {
      l.q_batch_stride = static_cast<int64_t>(L) * Hq * d;
      l.q_row_stride = static_cast<int64_t>(Hq) * d;
      l.q_head_stride = d;
    }
    l.o_batch_stride = l.q_batch_stride;
    l.o_row_stride = l.q_row_stride;
    l.o_head_stride = l.q_head_stride;
    l.seqlens_k_cumulative = false;
    for (const auto& r : c.requests) l.cu_seqlens_k.push_back(r.kv_len);  // cache_seqlens
    if (l.paged) {
      l.max_num_blocks_per_seq = width;
      l.block_table.assign(static_cast<size_t>(B) * width, 0);  // unused entries: page 0, never read
      for (int r = 0; r < B; ++r)
        for (int j = p.pages.indptr[r]; j < p.pages.indptr[r + 1]; ++j)
          l.block_table[static_cast<size_t>(r) * width + (j - p.pages.indptr[r])] = p.pages.indices[j];
      const bool nhd = c.kv_cache.layout == KvLayout::kNHD;
      l.k_batch_stride = static_cast<int64_t>(ps) * Hk * d;
      l.k_row_stride = nhd ? static_cast<int64_t>(Hk) * d : d;
      l.k_head_stride = nhd ? d : static_cast<int64_t>(ps) * d;
      l.force_split_kernel = true;
    } else {
      for (int r = 0; r < B; ++r) l.cache_src.push_back(p.pages.indptr[r]);
      l.k_batch_stride = static_cast<int64_t>(l.seqlen_k) * Hk * d;
      l.k_row_stride = static_cast<int64_t>(Hk) * d;
      l.k_head_stride = d;
    }
    if (c.engine == "sglang-fa") feed_from_sglang(c, p, &l);
    // set_params_splitkv
    int arg = num_splits_arg(c, l.seqlen_k, &l.num_splits_from);
    if (arg < 1) {
      const int block_n = d <= 64 ? 256 : (d <= 128 ? 128 : 64);
      const int n_blocks = static_cast<int>(ceil_div(l.seqlen_k, block_n));
      const int m_blocks = static_cast<int>(ceil_div(l.seqlen_q, 64));
      arg = num_splits_heuristic(l.b * l.h * m_blocks, num_sms * 2, n_blocks, 128);
      l.num_splits_from += " (" + str(num_sms) + " SMs) chose " + str(arg);
    }
    l.num_splits = arg;
  }
  // mha_*: a window reaching past every key is no window
  if (left >= l.seqlen_k) left = -1;
  if (right >= l.seqlen_k) right = -1;
  // set_params_fprop
  l.is_causal = left < 0 && right == 0;
  if (left < 0 && right >= 0) left = l.seqlen_k;
  if (left >= 0 && right < 0) right = l.seqlen_k;
  l.window_left = left;
  l.window_right = right;
  const float scale = static_cast<float>(c.scale());
  if (c.attention.soft_cap && *c.attention.soft_cap > 0) {
    l.softcap = scale / static_cast<float>(*c.attention.soft_cap);
    l.scale_softmax = static_cast<float>(*c.attention.soft_cap);
  } else {
    l.scale_softmax = scale;
  }
  l.scale_softmax_log2 = l.scale_softmax * static_cast<float>(M_LOG2E);
  l.seqlen_q_rounded = round_multiple(l.seqlen_q, 128);
  l.seqlen_k_rounded = round_multiple(l.seqlen_k, 128);
  if (alibi)
    for (int h = 0; h < Hq; ++h) l.alibi_slopes.push_back(static_cast<float>(alibi_slope(h, Hq)));
  return l;
}

int64_t lse_elems(const Launch& l) {
  return l.api == Api::kVarlen ? static_cast<int64_t>(l.h) * l.total_q : static_cast<int64_t>(l.b) * l.h * l.seqlen_q;
}

int64_t lse_buffer_elems(const Launch& l) {
  const int block_m = l.d % 128 == 0 ? 4 : (l.d % 64 == 0 ? 8 : 16);  // run_flash_splitkv_fwd's combine
  return std::max<int64_t>(ceil_div(lse_elems(l), block_m) * block_m, 1);
}

std::vector<float> lse_to_attnscope(const Launch& l, const CaseSpec& c, const std::vector<float>& buf) {
  const int Hq = c.num_qo_heads;
  const int64_t T = c.total_q();
  std::vector<float> out(static_cast<size_t>(T * Hq));
  int64_t t = 0;
  for (size_t r = 0; r < c.requests.size(); ++r) {
    const auto& req = c.requests[r];
    for (int q = 0; q < req.q_len; ++q, ++t)
      for (int h = 0; h < Hq; ++h) {
        float v;
        if (l.api == Api::kVarlen)
          v = buf[static_cast<size_t>(h) * l.total_q + t];  // [h, total_q]
        else if (l.swapped)
          v = buf[r * Hq + h];  // [b, Hk, G] is [b, Hq]
        else
          v = buf[(r * Hq + h) * static_cast<size_t>(l.seqlen_q) + q];  // [b, h, seqlen_q]
        // FA2's causal ALiBi adds slope x k: each row's LSE sits slope x q_abs above attnscope's
        if (!l.alibi_slopes.empty() && l.is_causal) v -= l.alibi_slopes[h] * static_cast<float>(req.kv_len - req.q_len + q);
        if (v == std::numeric_limits<float>::infinity()) v = -v;  // an empty row: FA2 writes +inf
        out[static_cast<size_t>(t) * Hq + h] = v;
      }
  }
  return out;
}

}  // namespace attnscope::peers::flash_attn
