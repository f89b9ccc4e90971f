// The translation of a case into cuDNN's SDPA parameters and back (see cudnn_conventions.h).
//
// How attnscope's storage maps onto cuDNN's tensors (docs/operations/Attention.md of the cuDNN
// frontend, "Packed layout" and "Paged attention"):
//   Q [total_q, Hq, d_qk] token-packed -> cuDNN Q (B, Hq, S_q, d_qk), strides (-, d_qk, Hq*d_qk, 1),
//       with a ragged offset per sequence (the element offset of its first token);
//   O and LSE the same way ([total_q, Hq, d_v] and [total_q, Hq]), so cuDNN writes them in place;
//   paged K/V pool NHD [pages, page, Hk, d] or HND [pages, Hk, page, d] -> cuDNN's container
//       (pages, Hk, page, d) with the layout's strides, addressed through a page table (B, 1, T, 1);
//   ragged K/V (page_size 1, contiguous per request) -> cuDNN K/V (B, Hk, S_kv, d), strides
//       (-, d, Hk*d, 1), with ragged offsets.
// Every sequence is one of attnscope's work units: a request, or one of vLLM's virtual batches for
// chunked local attention (each an ordinary bottom-right causal sequence over its chunk's keys).
#include "cudnn_conventions.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "attnscope/workload.h"

namespace attnscope::peers::cudnn {

namespace {

std::string version_text(int v) {
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

std::string number(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

int32_t checked_i32(int64_t v, const char* what) {
  // refusal_reason() refuses cases whose offsets exceed int32; reaching this is a logic error
  if (v < 0 || v > std::numeric_limits<int32_t>::max())
    throw std::logic_error(std::string("cudnn.sdpa: ") + what + " overflows int32");
  return static_cast<int32_t>(v);
}

}  // namespace

int64_t bucket(int64_t n) {
  int64_t b = 1;
  while (b < n) b *= 2;
  return b;
}

std::string GraphKey::describe() const {
  std::ostringstream s;
  s << "B=" << batch << " Hq=" << hq << " Hk=" << hk << " d=" << d_qk;
  if (d_v != d_qk) s << "/" << d_v;
  if (fp8)
    s << " " << fp8_name(*fp8) << " Q/K/V, O " << (o_fp8 ? fp8_name(*fp8) : dtype_name(dtype));
  else
    s << " " << dtype_name(dtype);
  s << " S_q<=" << s_q << " S_kv<=" << s_kv;
  if (group > 1) s << " packed GQA decode (group " << group << ")";
  if (paged)
    s << " paged " << layout_name(layout) << " page " << page_size << " pool<=" << num_pages << " pages";
  else
    s << (dense ? " dense" : " ragged");
  if (fp8 && (causal || window)) s << (top_left ? " band top-left" : " band bottom-right");
  if (sinks) s << " sinks";
  return s.str();
}

std::string refusal_reason(const CaseSpec& c, int cudnn_version) {
  const AttentionSpec& a = c.attention;
  // Paged K/V together with ragged (THD) Q arrived in cuDNN 9.7.0 (the frontend's support check).
  if (cudnn_version < 90700)
    return "cuDNN " + version_text(cudnn_version) + " is too old: paged K/V with ragged queries needs cuDNN 9.7.0 or newer";
  if (c.dtype == DType::kFp32)
    return "dtype fp32: cuDNN's fused SDPA (flash attention) engines take fp16/bf16 Q, K and V (cuda.naive runs fp32)";
  for (const auto& [d, name] : {std::pair{c.head_dim_qk, "qk"}, std::pair{c.head_dim_vo, "vo"}})
    if (d % 8 != 0 || d > 256)
      return "head_dim " + std::string(name) + " " + std::to_string(d) +
             " is not supported: cuDNN SDPA needs head dims that are multiples of 8, at most 256";
  // Head dims above 128 (MLA's non-absorbed qk 192 / vo 128 among them) through page tables: cuDNN
  // 9.9 and older page only d <= 128 (the frontend's support check), 9.10.0 / 9.10.1 refuse fp16 /
  // bf16 SDPA for known bugs, so paged needs 9.10.2. Unpaged, Hopper takes d_qk != d_v up to 256
  // from cuDNN 9.1 (below this backend's 9.7 floor); other GPUs are left to cuDNN's own check.
  if (c.kv_cache.storage == KvStorage::kPaged && std::max(c.head_dim_qk, c.head_dim_vo) > 128 && cudnn_version < 91002)
    return "head dims qk " + std::to_string(c.head_dim_qk) + " / vo " + std::to_string(c.head_dim_vo) +
           " over a paged KV cache: cuDNN " + version_text(cudnn_version) +
           " pages only head dims up to 128 (cuDNN 9.10.2 or newer pages up to 256); ragged storage (/kv_cache/storage) "
           "runs it";
  // The sink is SDPA's sink_token input: the frontend refuses it before cuDNN 9.13.0, and
  // Transformer Engine takes it (its "learnable" softmax) from 9.13.1.
  if (c.has_sinks() && cudnn_version < 91301)
    return "cuDNN " + version_text(cudnn_version) +
           " has no sink input: attention sinks (/attention/sinks) need cuDNN 9.13.1 or newer (SDPA's sink_token)";
  if (a.soft_cap)
    return "soft-cap " + number(*a.soft_cap) +
           ": cuDNN expresses a soft-cap only as an attention score modifier, and its SDPA refuses score modifiers "
           "together with the padding mask and causal band that attnscope's ragged batches need (\"Attention score "
           "mod enabled and hence other subgraphs are disabled\")";
  for (size_t i = 0; i < c.requests.size(); ++i)
    if (c.requests[i].doc_starts.size() > 1)
      return "packed documents (request " + std::to_string(i) + " holds " + std::to_string(c.requests[i].doc_starts.size()) +
             "): cuDNN's masks are per-sequence lengths plus one diagonal band, which cannot express a block-diagonal "
             "document mask";
  if (a.prefix_lm && a.causal)
    for (size_t i = 0; i < c.requests.size(); ++i) {
      const RequestSpec& r = c.requests[i];
      // The prefix only matters where it reaches past a query's own causal range: it adds nothing
      // when every query already sees it, i.e. prefix_len <= q_abs + 1 for the first query.
      const int first_q_abs = r.kv_len - r.q_len;
      if (r.prefix_len && *r.prefix_len > first_q_abs + 1)
        return "prefix-LM: request " + std::to_string(i) + "'s prefix_len " + std::to_string(*r.prefix_len) +
               " opens keys above the causal diagonal of its first query (position " + std::to_string(first_q_abs) +
               "), which cuDNN's diagonal band cannot express; only prefixes every query already sees (prefix_len <= "
               "kv_len - q_len + 1) are accepted";
    }
  if (a.alibi) {
    // cuDNN's ALiBi requires the causal right bound 0 and refuses bottom-right alignment ("Bottom
    // right causal mask is only supported with ... is_alibi=False"), so it runs top-left: equal to
    // attnscope's bottom-right causal mask (and its slope * (k - q_abs)) only when q_len == kv_len.
    if (!a.causal) return "ALiBi without a causal mask: cuDNN's ALiBi requires the causal right bound 0";
    if (a.local_chunk)
      return "ALiBi with chunked local attention: cuDNN's ALiBi runs top-left aligned, which differs from the "
             "virtual batches' bottom-right alignment";
    for (size_t i = 0; i < c.requests.size(); ++i)
      if (c.requests[i].q_len != c.requests[i].kv_len)
        return "ALiBi with request " + std::to_string(i) + "'s q_len " + std::to_string(c.requests[i].q_len) + " < kv_len " +
               std::to_string(c.requests[i].kv_len) +
               ": cuDNN's ALiBi needs a top-left causal mask (it refuses bottom-right alignment with ALiBi), which equals "
               "attnscope's bottom-right mask only when q_len == kv_len";
  }
  // cuDNN's ragged offsets are int32 element offsets.
  const int64_t dmax = std::max(c.head_dim_qk, c.head_dim_vo);
  const int64_t limit = std::numeric_limits<int32_t>::max();
  if (c.total_q() * c.num_qo_heads * dmax > limit)
    return "the batch's " + std::to_string(c.total_q()) + " query tokens exceed cuDNN's int32 ragged offsets (" +
           std::to_string(c.total_q() * c.num_qo_heads * dmax) + " elements)";
  if (c.kv_cache.storage == KvStorage::kRagged && c.total_kv() * c.num_kv_heads * dmax > limit)
    return "the batch's " + std::to_string(c.total_kv()) + " ragged key tokens exceed cuDNN's int32 ragged offsets";
  return "";
}

std::string fp8_refusal_reason(const CaseSpec& c) {
  if (!c.fp8_kv())
    return "cudnn.sdpa_fp8 runs FP8 attention only (Q, K and V in FP8, /kv_cache/dtype and /fp8_attention): this case is " +
           std::string(dtype_name(c.dtype)) + " (cudnn.sdpa runs it)";
  if (!c.fp8_attention)
    return "FP8 KV cache without /fp8_attention: cuDNN's FP8 SDPA takes Q, K and V all in FP8 (an FP8 K/V with a " +
           std::string(dtype_name(c.dtype)) + " Q is no cuDNN graph); add /fp8_attention to quantise Q too";
  return "";
}

namespace {

// The mask and form of a translated problem in words (SdpaProblem::masks).
std::string describe(const CaseSpec& c, const GraphKey& k, int units, bool local, int padded_rows, int empty_units) {
  std::ostringstream m;
  if (k.dense)
    m << "dense: " << k.batch << " sequences of " << (k.group > 1 ? 1 : k.s_q) << " queries and " << k.s_kv
      << " keys back to back, plain strided tensors (no padding mask, no ragged offsets)";
  else
    m << "padding mask with seq_len_q/seq_len_kv per sequence";
  if (k.group > 1)
    m << "; GQA decode packed: the " << k.group << " query heads of each KV head as " << k.group
      << " rows of one sequence (each sees all of its unit's keys), K/V read once per KV head";
  if (local) m << "; chunked local attention as " << units << " vLLM virtual batches";
  if (c.attention.causal && !k.causal && k.group == 1)
    m << "; causal decode: each sequence's one query is its last key and sees every key (no band)";
  if (k.causal && k.group == 1)
    m << (k.top_left ? "; causal: right bound 0, top-left (= bottom-right, q_len == kv_len)"
                     : "; causal: right bound 0, bottom-right (q_abs = kv_len - q_len + q)");
  // attnscope's W counts the query itself (visible iff q_abs - W < k); cuDNN's left bound keeps
  // col + left_bound - (seq_kv - seq_q) > row, i.e. k > q_abs - left_bound: the same number.
  if (k.window) m << "; window W = " << k.window << " -> left bound " << k.window;
  if (k.alibi) m << "; ALiBi with cuDNN's slopes (the same formula as attnscope's)";
  if (k.sinks) m << "; sinks: one logit per query head as cuDNN's sink_token (in each row's max, denominator and Stats)";
  if (padded_rows) m << "; " << padded_rows << " padding queries left to attnscope (O = 0, LSE = -inf)";
  if (empty_units) m << ", " << empty_units << " all-padding sequences left out of cuDNN's batch";
  if (!k.dense) m << (k.paged ? "; K/V through page tables over the pool" : "; K/V through ragged offsets into the pool");
  return m.str();
}

}  // namespace

SdpaProblem translate(const CaseSpec& c, const Plan& p, const TranslateOptions& opt) {
  const bool pack_gqa_decode = opt.pack_gqa_decode, dense_when_uniform = opt.dense_when_uniform;
  SdpaProblem s;
  GraphKey& k = s.key;
  const PageTable& pt = p.pages;
  const int units = static_cast<int>(p.units.size());
  const int Hq = c.num_qo_heads, Hk = c.num_kv_heads, dqk = c.head_dim_qk, dv = c.head_dim_vo;
  const bool local = !p.local.batches.empty();
  k.dtype = c.dtype;
  k.hq = Hq;
  k.hk = Hk;
  k.d_qk = dqk;
  k.d_v = dv;
  k.paged = c.kv_cache.storage == KvStorage::kPaged;
  k.causal = c.attention.causal;
  k.alibi = c.attention.alibi;
  k.top_left = c.attention.alibi;  // see refusal_reason: only reached when q_len == kv_len
  k.window = c.attention.window.value_or(0);
  k.sinks = c.has_sinks();
  k.scale = static_cast<float>(c.sm_scale_or_default());
  // Extents over every unit, padded or not, so that editing pad_start keeps the shape class.
  int max_q = 1, max_kv = 1;
  for (const WorkUnit& u : p.units) {
    max_q = std::max(max_q, u.q_len);
    max_kv = std::max(max_kv, u.kv_len);
  }
  // At least 2: with S_q = 1 and GQA, cuDNN 9.14 on an H100 wrote O correctly but the Stats of only
  // B * Hk of the B * Hq rows (the rest kept the NaN poison: gqa-decode-long, 96 of 128). Declaring
  // S_q = 2 keeps decode batches off that path; seq_len_q still says 1, so nothing else changes.
  k.s_q = std::max<int64_t>(2, bucket(max_q));
  // A GQA decode batch (one query per unit) is packed: the group query heads of a KV head become
  // the group rows of one sequence over hk heads. Each row is then the unit's single query, which
  // sees every key of the unit under the causal mask (its own position is the last key) and
  // without one, so the graph has no causal band; a window or ALiBi would differ per row (the band
  // and the bias are functions of the row), so those batches are not packed. Measured on an H100
  // (bench/decode-paged.json; docs/perf-history-3.md "cuDNN GQA decode packing"): unpacked, every query head
  // streams its K/V again (4x the bytes). Nor with
  // sinks: the sink_token is one value per cuDNN head, and the packed rows are different query heads.
  if (pack_gqa_decode && max_q == 1 && Hq > Hk && !k.window && !k.alibi && !k.sinks) {
    k.group = Hq / Hk;
    k.s_q = k.group;
    k.causal = false;
  }
  // A decode batch's single query is its unit's last key: it sees every key, causal or not.
  if (opt.prefer_top_left && max_q == 1 && !k.window && !k.alibi) k.causal = false;
  k.s_kv = bucket(max_kv);
  if (k.paged) {
    k.layout = c.kv_cache.layout;
    k.page_size = pt.page_size;
    k.table_size = (k.s_kv + pt.page_size - 1) / pt.page_size;
    k.num_pages = bucket(pt.num_pages);
  }

  const std::vector<int64_t> first = unit_first_tokens(c, p);
  const int64_t total_q = c.total_q();
  s.computed.assign(static_cast<size_t>(total_q), 0);
  int padded_rows = 0, empty_units = 0;
  bool square = true;  // every computed sequence has S_q == S_kv
  for (int u = 0; u < units; ++u) {
    const WorkUnit& w = p.units[u];
    const RequestSpec& r = c.requests[w.request];
    // Lengths. cuDNN's padding mask is a per-sequence length on each side, and with bottom-right
    // alignment its diagonal sits at row + seq_len_kv - seq_len_q. The unit's queries are the last
    // q_len of its keys (virtual batches included), so the first query is at absolute key position
    // kv_begin + kv_len - q_len. attnscope's padding (pad_start) hides keys >= pad_start from
    // everyone and fully masks queries at positions >= pad_start: both are tails, so cutting both
    // lengths at pad_start leaves row + seq_len_kv - seq_len_q = q_abs - kv_begin unchanged, i.e.
    // the same diagonal, window bound and ALiBi distances.
    int sq = w.q_len, skv = w.kv_len;
    if (r.pad_start) {
      const int first_q_abs = w.kv_begin + w.kv_len - w.q_len;
      skv = std::clamp(*r.pad_start - w.kv_begin, 0, w.kv_len);
      sq = std::clamp(*r.pad_start - first_q_abs, 0, w.q_len);
    }
    padded_rows += w.q_len - sq;
    // A unit whose queries are all padding is left out of cuDNN's batch rather than passed as an
    // empty sequence: it has nothing to compute (its rows get the fully masked convention), and
    // every sequence cuDNN sees then has seq_len_q >= 1 and seq_len_kv >= 1 (a computed query
    // sees at least its own key).
    if (sq == 0) {
      ++empty_units;
      continue;
    }
    for (int i = 0; i < sq; ++i) s.computed[first[u] + i] = 1;
    square = square && sq == skv;
    s.seq_q.push_back(k.group > 1 ? k.group : sq);  // packed: sq is 1, its rows are the query heads
    s.seq_kv.push_back(skv);
    s.q_offsets.push_back(checked_i32(first[u] * Hq * dqk, "Q offset"));
    s.o_offsets.push_back(checked_i32(first[u] * Hq * dv, "O offset"));
    s.stats_offsets.push_back(checked_i32(first[u] * Hq, "LSE offset"));
    const int* req_pages = pt.indices.data() + pt.indptr[w.request];
    if (k.paged) {
      // The unit's block table: a request's own pages, or the virtual batch's sliced table (vLLM's,
      // clipped to the request's last page). Columns past the unit's last page are never read
      // (cuDNN stops at seq_len_kv); they repeat the last entry so that every entry is a page the
      // unit owns.
      std::vector<int> row;
      if (local)
        row = p.local.batches[u].block_table;
      else
        row.assign(req_pages, req_pages + pt.pages_of(w.request));
      for (int64_t j = 0; j < k.table_size; ++j) s.page_table.push_back(row[std::min<size_t>(j, row.size() - 1)]);
    } else {
      // Ragged storage is the pool with page_size 1, allocated contiguously in key order: the
      // unit's keys start at the slot of its first key.
      const int first_slot = req_pages[w.kv_begin];
      for (int j = 0; j < w.kv_len; ++j)
        if (req_pages[w.kv_begin + j] != first_slot + j)
          throw std::logic_error("cudnn.sdpa: ragged storage is not contiguous in request " + std::to_string(w.request));
      s.k_offsets.push_back(checked_i32(int64_t{first_slot} * Hk * dqk, "K offset"));
      s.v_offsets.push_back(checked_i32(int64_t{first_slot} * Hk * dv, "V offset"));
    }
  }
  k.batch = static_cast<int>(s.seq_q.size());
  // The last ragged offset is past the end of the packed tensor (cuDNN's convention).
  s.q_offsets.push_back(checked_i32(total_q * Hq * dqk, "Q offset"));
  s.o_offsets.push_back(checked_i32(total_q * Hq * dv, "O offset"));
  s.stats_offsets.push_back(checked_i32(total_q * Hq, "LSE offset"));
  if (!k.paged) {
    s.k_offsets.push_back(checked_i32(int64_t{pt.num_pages} * Hk * dqk, "K offset"));
    s.v_offsets.push_back(checked_i32(int64_t{pt.num_pages} * Hk * dv, "V offset"));
  }

  // The dense form. When every sequence has the same lengths, nothing is padding or left out, and
  // the sequences sit back to back in Q and in the ragged K/V pool (offset u * S), the ragged
  // tensors above are plain strided ones: (B, H, S, d) with batch stride S * H * d, which is what
  // the graph's strides already say. cuDNN then needs neither the padding mask nor ragged offsets
  // (it refuses ragged offsets without the padding mask), and runs the kernels PyTorch's SDPA gets.
  // Measured on an H100 with cuDNN 9.19 (bench/prefill-*.json): the ragged form ran 1-13% behind
  // PyTorch's call on the same dense shapes. S_q = 1 unpacked stays ragged (the Stats bug above);
  // exact lengths key the graph, so editing a length in a dense batch builds a new graph.
  bool dense = dense_when_uniform && !k.paged && !local && padded_rows == 0 && empty_units == 0 && !s.seq_q.empty() &&
               (k.group > 1 || s.seq_q[0] >= 2);
  for (size_t u = 0; dense && u < s.seq_q.size(); ++u)
    dense = s.seq_q[u] == s.seq_q[0] && s.seq_kv[u] == s.seq_kv[0] &&
            first[u] == static_cast<int64_t>(u) * (k.group > 1 ? 1 : s.seq_q[0]) &&
            s.k_offsets[u] == static_cast<int64_t>(u) * s.seq_kv[0] * Hk * dqk &&
            s.v_offsets[u] == static_cast<int64_t>(u) * s.seq_kv[0] * Hk * dv;
  if (dense) {
    k.dense = true;
    k.s_q = s.seq_q[0];
    k.s_kv = s.seq_kv[0];
    // q_len == kv_len: the top-left diagonal is the bottom-right one (PyTorch's is_causal is
    // top-left); otherwise bottom-right, as for the ragged form.
    if (k.s_q == k.s_kv && k.group == 1) k.top_left = true;
  }
  if (opt.prefer_top_left && square && k.batch > 0) k.top_left = true;

  s.masks = describe(c, k, units, local, padded_rows, empty_units);
  return s;
}

void apply_conventions(const CaseSpec& c, const SdpaProblem& s, std::vector<float>* o, std::vector<float>* lse) {
  // Padding queries are outside every cuDNN sequence (past seq_len_q), so cuDNN neither computes
  // nor writes them; in attnscope they are fully masked rows: O = 0 and LSE = -inf. Rows cuDNN does
  // compute always see at least their own key under the masks accepted here (causal, window >= 1,
  // chunk, non-causal), so cuDNN's own treatment of an empty row never reaches the result. With
  // sinks a fully masked row keeps the sink's term: LSE = s_h (docs/conventions.md section 12).
  const int Hq = c.num_qo_heads, dv = c.head_dim_vo;
  const std::vector<float> sinks = sink_logits(c);
  for (size_t t = 0; t < s.computed.size(); ++t) {
    if (s.computed[t]) continue;
    for (int h = 0; h < Hq; ++h) {
      const size_t row = t * Hq + h;
      (*lse)[row] = sinks.empty() ? -std::numeric_limits<float>::infinity() : sinks[h];
      std::fill(o->begin() + row * dv, o->begin() + (row + 1) * dv, 0.0f);
    }
  }
}

std::string unused_slot_note(const CaseSpec& c, const std::vector<float>& o, const std::vector<float>& lse,
                             const std::string& running) {
  if (!c.kv_cache.poison_unused || c.kv_cache.storage == KvStorage::kRagged) return "";
  const int64_t rows = c.total_q() * c.num_qo_heads, dv = c.head_dim_vo;
  int64_t nan_rows = 0;
  for (int64_t r = 0; r < rows; ++r) {
    bool nan = r < static_cast<int64_t>(lse.size()) && std::isnan(lse[r]);
    for (int64_t d = 0; d < dv && !nan && (r + 1) * dv <= static_cast<int64_t>(o.size()); ++d) nan = std::isnan(o[r * dv + d]);
    nan_rows += nan;
  }
  if (nan_rows == 0) return "";
  return "NaN in " + std::to_string(nan_rows) + " of " + std::to_string(rows) + " (token, head) rows: every slot a request " +
         "uses is finite, so " + running + " read K/V slots no request uses (poisoned here by /kv_cache/poison_unused; " +
         "docs/backends.md, \"cuDNN and unused page slots\")";
}

}  // namespace attnscope::peers::cudnn
