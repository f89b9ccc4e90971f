// DeepSeek Sparse Attention's indexer, top-k, mask bits, slots, checks and rules: sparse.h.
#include "attnscope/sparse.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

#include "attnscope/fp8.h"
#include "attnscope/gen.h"
#include "attnscope/workload.h"
#include "on_cores.h"

namespace attnscope {

namespace {

void require(bool ok, const std::string& path, const std::string& rule) {
  if (!ok) throw CaseError(path, rule);
}

}  // namespace

const char* scoring_name(SparseScoring s) { return s == SparseScoring::kFp8 ? "fp8" : "fp64"; }

IndexerInputs indexer_inputs(const CaseSpec& c, int r) {
  const SparseSpec& s = *c.sparse;
  const RequestSpec& rq = c.requests[r];
  IndexerInputs in;
  in.heads = s.index_heads;
  in.dim = s.index_head_dim;
  in.q_len = rq.q_len;
  in.kv_len = rq.kv_len;
  const uint64_t seed = c.request_seed(r);
  auto gen = [&](TensorId t, uint64_t i) { return gen_value(seed, t, i, 0.0, 1.0, 1.0, DType::kBf16); };
  in.q.resize(static_cast<size_t>(in.q_len) * in.heads * in.dim);
  in.w.resize(static_cast<size_t>(in.q_len) * in.heads);
  in.k.resize(static_cast<size_t>(in.kv_len) * in.dim);
  for (int q = 0; q < in.q_len; ++q)
    for (int j = 0; j < in.heads; ++j) {
      const uint64_t row = static_cast<uint64_t>(q + rq.q_offset) * in.heads + j;  // the generator's query, as Q's
      in.w[static_cast<size_t>(q) * in.heads + j] = gen(TensorId::kIdxW, row);
      for (int d = 0; d < in.dim; ++d)
        in.q[(static_cast<size_t>(q) * in.heads + j) * in.dim + d] = gen(TensorId::kIdxQ, row * in.dim + d);
    }
  parallel_blocks(in.kv_len, static_cast<int64_t>(in.kv_len) * in.dim * 16, [&](int a, int b) {  // pure in the index
    for (size_t i = static_cast<size_t>(a) * in.dim; i < static_cast<size_t>(b) * in.dim; ++i) in.k[i] = gen(TensorId::kIdxK, i);
  });
  return in;
}

float quantize_block_e4m3(const float* x, int n, float* q8) {
  // inference/kernel.py act_quant_kernel: amax floored at 1e-4; round_scale (ue8m0) gives
  // 2^ceil(log2(amax / 448)) from the float's bits (fast_round_scale); y = clamp(x / s, -448, 448) to e4m3
  float amax = 0.f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  amax = std::max(amax, 1e-4f);
  const uint32_t b = f32_bits(amax * (1.0f / 448.0f));
  const int e = static_cast<int>((b >> 23) & 0xffu) - 127 + ((b & 0x7fffffu) != 0 ? 1 : 0);
  const float s = std::ldexp(1.0f, e), inv = std::ldexp(1.0f, -e);  // x * 2^-e is x / 2^e, rounded the same
  for (int i = 0; i < n; ++i) q8[i] = e4m3_value(std::min(448.0f, std::max(-448.0f, x[i] * inv)));
  return s;
}

IndexerFp8 quantize_indexer(const IndexerInputs& in) {
  IndexerFp8 f;
  f.q8.resize(in.q.size());
  f.k8.resize(in.k.size());
  f.q_scale.resize(static_cast<size_t>(in.q_len) * in.heads);
  f.k_scale.resize(in.kv_len);
  for (size_t row = 0; row < f.q_scale.size(); ++row)
    f.q_scale[row] = quantize_block_e4m3(in.q.data() + row * in.dim, in.dim, f.q8.data() + row * in.dim);
  parallel_blocks(in.kv_len, static_cast<int64_t>(in.kv_len) * in.dim * 16, [&](int a, int b) {  // a key per block
    for (int s = a; s < b; ++s)
      f.k_scale[s] = quantize_block_e4m3(in.k.data() + static_cast<size_t>(s) * in.dim, in.dim,
                                         f.k8.data() + static_cast<size_t>(s) * in.dim);
  });
  return f;
}

// One query row's scores of keys [a, b), 8 keys side by side: key s's sum over the heads of
// w[j] * ReLU(q_j . k_s) runs in T, over d then the heads in order, as one key alone would (the same
// bits); the 8 keys' columns, transposed once per block and reused by every head, let the compiler
// vectorise across keys. Each key's total goes to finish(s, acc).
template <class T, class Finish>
void score_keys(const float* qrow, const float* keys, int heads, int dim, const T* wj, int a, int b, Finish finish) {
  constexpr int B = 8;
  thread_local std::vector<float> kt;
  kt.resize(static_cast<size_t>(dim) * B);
  for (int s0 = a; s0 < b; s0 += B) {
    const int nb = std::min(B, b - s0);
    for (int l = 0; l < B; ++l)
      for (int d = 0; d < dim; ++d)
        kt[static_cast<size_t>(d) * B + l] = l < nb ? keys[static_cast<size_t>(s0 + l) * dim + d] : 0.f;
    T acc[B] = {};
    for (int j = 0; j < heads; ++j) {
      const float* qj = qrow + static_cast<size_t>(j) * dim;
      T dot[B] = {};
      for (int d = 0; d < dim; ++d) {
        const T x = static_cast<T>(qj[d]);
        const float* kd = kt.data() + static_cast<size_t>(d) * B;
        for (int l = 0; l < B; ++l) dot[l] += x * static_cast<T>(kd[l]);
      }
      for (int l = 0; l < B; ++l) acc[l] += std::max(dot[l], T(0)) * wj[j];
    }
    for (int l = 0; l < nb; ++l) finish(s0 + l, acc[l]);
  }
}

void indexer_scores_fp64(const IndexerInputs& in, int q, int n, double* out) {
  const double c = 1.0 / std::sqrt(static_cast<double>(in.heads)) / std::sqrt(static_cast<double>(in.dim));
  std::vector<double> wj(in.heads);
  for (int j = 0; j < in.heads; ++j) wj[j] = in.w[static_cast<size_t>(q) * in.heads + j] * c;
  const float* qrow = in.q.data() + static_cast<size_t>(q) * in.heads * in.dim;
  parallel_blocks(n, static_cast<int64_t>(n) * in.heads * in.dim, [&](int a, int b) {
    score_keys<double>(qrow, in.k.data(), in.heads, in.dim, wj.data(), a, b, [&](int s, double acc) { out[s] = acc; });
  });
}

void indexer_scores_fp8(const IndexerInputs& in, const IndexerFp8& f, int q, int n, double* out) {
  // model.py: weights = weights_proj(x) * n_heads^-0.5 (a bf16 tensor), then * q_scale * softmax_scale in
  // fp32; kernel.py fp8_index: relu(q8 . k8) * weights summed over the heads, times the key's scale.
  // Products of two e4m3 values are exact in fp32; the sums round.
  const float h_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in.heads)));
  const float softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in.dim)));
  std::vector<float> wj(in.heads);
  for (int j = 0; j < in.heads; ++j) {
    const size_t row = static_cast<size_t>(q) * in.heads + j;
    wj[j] = (round_to(DType::kBf16, in.w[row] * h_scale) * f.q_scale[row]) * softmax_scale;
  }
  const float* qrow = f.q8.data() + static_cast<size_t>(q) * in.heads * in.dim;
  parallel_blocks(n, static_cast<int64_t>(n) * in.heads * in.dim, [&](int a, int b) {
    score_keys<float>(qrow, f.k8.data(), in.heads, in.dim, wj.data(), a, b,
                      [&](int s, float acc) { out[s] = static_cast<double>(acc * f.k_scale[s]); });
  });
}

int select_top_k(const double* scores, int n, int top_k, int* out) {
  std::vector<int> cand;
  cand.reserve(n);
  int nans = 0;
  for (int k = 0; k < n; ++k) {
    if (std::isnan(scores[k]))
      ++nans;  // never selected: a NaN has no rank (an engine's top-k would return it as garbage)
    else
      cand.push_back(k);
  }
  const int m = std::min<int>(top_k, static_cast<int>(cand.size()));
  std::partial_sort(cand.begin(), cand.begin() + m, cand.end(),
                    [&](int a, int b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
  for (int i = 0; i < top_k; ++i) out[i] = i < m ? cand[i] : -1;
  return nans;
}

int SparseSelection::kept(int q) const {
  const int* r = row(q);
  return static_cast<int>(std::count_if(r, r + top_k, [](int x) { return x >= 0; }));
}
int SparseSelection::padding(int q) const { return top_k - kept(q); }

SparseSelection indexer_selection(const CaseSpec& c, int r, SparseScoring scoring) {
  const IndexerInputs in = indexer_inputs(c, r);
  const IndexerFp8 f = scoring == SparseScoring::kFp8 ? quantize_indexer(in) : IndexerFp8{};
  SparseSelection s;
  s.q_len = in.q_len;
  s.top_k = c.sparse->top_k;
  s.idx.assign(static_cast<size_t>(s.q_len) * s.top_k, -1);
  s.nans.assign(s.q_len, 0);
  std::vector<double> scores(in.kv_len);
  for (int q = 0; q < in.q_len; ++q) {
    const int n = in.kv_len - in.q_len + q + 1;  // causal: the keys at positions <= the query's
    if (scoring == SparseScoring::kFp8)
      indexer_scores_fp8(in, f, q, n, scores.data());
    else
      indexer_scores_fp64(in, q, n, scores.data());
    s.nans[q] = select_top_k(scores.data(), n, s.top_k, s.idx.data() + static_cast<size_t>(q) * s.top_k);
  }
  return s;
}

SparseSelection sparse_selection(const CaseSpec& c, int r) {
  const SparseSpec& sp = *c.sparse;
  if (sp.indices.empty()) return indexer_selection(c, r, sp.scoring);
  SparseSelection s;
  s.q_len = c.requests[r].q_len;
  s.top_k = sp.top_k;
  s.given = true;
  s.idx.assign(static_cast<size_t>(s.q_len) * s.top_k, -1);
  s.nans.assign(s.q_len, 0);
  for (int q = 0; q < s.q_len; ++q) {
    const std::vector<int>& row = sp.indices[r][q];
    std::copy(row.begin(), row.end(), s.idx.begin() + static_cast<ptrdiff_t>(q) * s.top_k);
  }
  return s;
}

MaskBits sparse_mask_bits(const SparseSelection& s, const RowMask& builtin) {
  MaskBits mb;
  mb.words = (builtin.kv_len + 63) / 64;
  mb.bits.assign(static_cast<size_t>(s.q_len) * mb.words, 0);
  mb.bounds.assign(2 * static_cast<size_t>(s.q_len), 0);
  for (int q = 0; q < s.q_len; ++q) {
    int lo, hi;
    visible_range(builtin, q_abs_of(builtin, q), &lo, &hi);
    uint64_t* row = mb.bits.data() + static_cast<size_t>(q) * mb.words;
    int first = hi, last = lo;
    const int* sel = s.row(q);
    for (int i = 0; i < s.top_k; ++i) {
      const int k = sel[i];
      if (k < lo || k >= hi) continue;  // -1 padding, or outside the built-in mask (ANDed)
      row[k >> 6] |= 1ull << (k & 63);
      first = std::min(first, k);
      last = std::max(last, k + 1);
    }
    mb.bounds[2 * q] = first < last ? first : 0;
    mb.bounds[2 * q + 1] = first < last ? last : 0;
  }
  return mb;
}

std::vector<int64_t> sparse_slots(const SparseSelection& s, const PageTable& pt, int r) {
  std::vector<int64_t> out(s.idx.size());
  const int* pages = pt.indices.data() + pt.indptr[r];
  for (size_t i = 0; i < s.idx.size(); ++i) out[i] = sparse_slot(pages, pt.page_size, s.idx[i]);
  return out;
}

int selection_differs(const int* a, const int* b, int top_k) {
  std::vector<int> sb(b, b + top_k);
  std::sort(sb.begin(), sb.end());
  int n = 0;
  for (int i = 0; i < top_k; ++i)
    if (a[i] >= 0 && !std::binary_search(sb.begin(), sb.end(), a[i])) ++n;
  return n;
}

std::vector<double> recall_of_mass(const CaseSpec& c, const PageTable& pt, const Workload& w, int r, int q, const int* kept,
                                   int n) {
  const int Hq = c.num_qo_heads, G = c.group_size(), D = c.head_dim_qk;
  const int qa = c.requests[r].kv_len - c.requests[r].q_len + q;
  const double scale = c.sm_scale_or_default();
  std::vector<char> in_sel(qa + 1, 0);
  for (int i = 0; i < n; ++i)
    if (kept[i] >= 0 && kept[i] <= qa) in_sel[kept[i]] = 1;
  std::vector<double> out(Hq), x(qa + 1);
  for (int h = 0; h < Hq; ++h) {
    const float* qv = w.q_row(w.q_indptr[r] + q, h, c);
    double mx = -INFINITY;
    for (int k = 0; k <= qa; ++k) {
      const float* kr = w.k_pool.data() + kv_offset(c.kv_cache.layout, pt.page_of(r, k), k % pt.page_size, h / G, 0, pt.page_size,
                                                    c.num_kv_heads, D);
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += static_cast<double>(qv[d]) * kr[d];
      x[k] = dot * scale;
      mx = std::max(mx, x[k]);
    }
    double all = 0, sel = 0;
    for (int k = 0; k <= qa; ++k) {
      const double e = std::exp(x[k] - mx);
      all += e;
      if (in_sel[k]) sel += e;
    }
    out[h] = sel / all;
  }
  return out;
}

namespace {

// The masks /sparse is not combined with: the indexer and the selection are causal (DeepSeek-V3.2).
void validate_sparse_masks(const CaseSpec& c) {
  const auto& a = c.attention;
  const std::string why = "not with /sparse: the indexer selects among the causally visible tokens";
  require(a.causal, "/attention/causal", "false with /sparse: the indexer scores the tokens at positions <= the query's");
  require(!a.window, "/attention/window", why);
  require(!a.local_chunk, "/attention/local_chunk", why);
  require(!a.prefix_lm, "/attention/prefix_lm", why);
  require(!a.mask_mod, "/attention/mask_mod", why + " (the selection is the request's mask bits)");
  require(!c.parallel, "/parallel", why + " (a partition's keys are not at their positions)");
  for (size_t i = 0; i < c.requests.size(); ++i) {
    const RequestSpec& r = c.requests[i];
    const std::string at = "/requests/" + std::to_string(i) + "/";
    require(r.doc_starts.empty(), at + "doc_starts", why);
    require(!r.pad_start, at + "pad_start", why);
    require(r.tree_parents.empty(), at + "tree_parents", why);
  }
}

// /sparse/indices: one list of rows per request, one row per query, each at most top_k logical indices
// in [0, kv_len), visible to its query under causality, listed once, then -1 padding only.
void validate_indices(const CaseSpec& c) {
  const SparseSpec& s = *c.sparse;
  const size_t R = c.requests.size();
  require(s.indices.size() == R, "/sparse/indices",
          "has " + std::to_string(s.indices.size()) + " entries, must have one per request (" + std::to_string(R) + ")");
  for (size_t r = 0; r < R; ++r) {
    const RequestSpec& rq = c.requests[r];
    const std::string pr = "/sparse/indices/" + std::to_string(r);
    require(static_cast<int>(s.indices[r].size()) == rq.q_len, pr,
            "has " + std::to_string(s.indices[r].size()) + " rows, must have one per query token (q_len " +
                std::to_string(rq.q_len) + ")");
    for (int q = 0; q < rq.q_len; ++q) {
      const std::vector<int>& row = s.indices[r][q];
      const std::string pq = pr + "/" + std::to_string(q);
      require(static_cast<int>(row.size()) <= s.top_k, pq,
              "has " + std::to_string(row.size()) + " entries, more than top_k " + std::to_string(s.top_k));
      const int qa = rq.kv_len - rq.q_len + q;
      std::unordered_map<int, size_t> first;
      bool padding = false;
      for (size_t j = 0; j < row.size(); ++j) {
        const int v = row[j];
        const std::string pj = pq + "/" + std::to_string(j);
        require(v >= -1 && v < rq.kv_len, pj,
                std::to_string(v) + " is out of range, must be -1 (padding) or a token index in [0, kv_len " +
                    std::to_string(rq.kv_len) + ")");
        if (v == -1) {
          padding = true;
          continue;
        }
        require(!padding, pj, std::to_string(v) + " follows a -1: -1 is padding and comes only after the kept tokens");
        require(v <= qa, pj,
                std::to_string(v) + " is not visible to query " + std::to_string(q) + " (position " + std::to_string(qa) +
                    "): causal, a query sees the tokens at positions <= its own");
        const auto [it, fresh] = first.emplace(v, j);
        require(fresh, pj,
                std::to_string(v) + " repeats entry " + std::to_string(it->second) +
                    " of this row: each kept token is listed once (a buffer with 0 where -1 belongs makes a gathering kernel "
                    "attend token 0 once per repeat)");
      }
    }
  }
}

}  // namespace

int64_t indexer_macs(const CaseSpec& c) {
  if (!c.sparse || !c.sparse->indices.empty()) return 0;
  constexpr int64_t kSat = int64_t{1} << 61;
  int64_t macs = 0;
  for (const RequestSpec& r : c.requests) {
    const int64_t q = std::max(0, r.q_len), kv = std::max(0, r.kv_len);
    macs = std::min(kSat, macs + std::min(kSat / 1048576, q * kv) * c.sparse->index_heads * c.sparse->index_head_dim);
  }
  return macs;
}

void validate_sparse(const CaseSpec& c) {
  if (!c.sparse) return;
  const SparseSpec& s = *c.sparse;
  require(c.mla.has_value(), "/sparse", "needs /mla: DeepSeek Sparse Attention selects the tokens MLA attends (DeepSeek-V3.2)");
  auto in = [](int v, int lo, int hi, const std::string& path) {
    require(v >= lo && v <= hi, path,
            std::to_string(v) + " is out of range, must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  in(s.top_k, 1, kMaxTokens, "/sparse/top_k");
  in(s.index_heads, 1, 256, "/sparse/index_heads");
  in(s.index_head_dim, 1, 1024, "/sparse/index_head_dim");
  if (s.scoring == SparseScoring::kFp8)
    require(s.index_head_dim <= 128, "/sparse/index_head_dim",
            std::to_string(s.index_head_dim) +
                " with scoring fp8: a row is one e4m3 quantisation block of at most 128 dims (the reference's block_size "
                "128), use at most 128 or scoring fp64");
  validate_sparse_masks(c);
  int64_t bytes = 0, entries = 0;
  constexpr int64_t kSat = int64_t{1} << 61;
  for (const RequestSpec& r : c.requests) {
    const int64_t q = std::max(0, r.q_len), kv = std::max(0, r.kv_len);
    bytes = std::min(kSat, bytes + q * ((kv + 63) / 64 * 8 + 2 * static_cast<int64_t>(sizeof(int))));
    entries += q * s.top_k;  // at most 2^12 requests x 2^22 x 2^22: no overflow
  }
  require(entries <= kMaxSelectionEntries, "/sparse/top_k",
          std::to_string(s.top_k) + " makes an index buffer of " + std::to_string(entries) +
              " entries (the sum of q_len x top_k), more than the " + std::to_string(kMaxSelectionEntries) + " a case may have");
  require(bytes <= kMaxMaskBytes, "/sparse",
          "the selection makes " + std::to_string(bytes) +
              " bytes of mask bits (q_len x kv_len bits per request), more than the " + std::to_string(kMaxMaskBytes) +
              " a case may have");
  if (!s.indices.empty()) return validate_indices(c);
  const int64_t macs = indexer_macs(c);
  require(macs <= kMaxIndexerMacs, "/sparse",
          "the indexer would take " + std::to_string(macs) +
              " multiply-adds (q_len x kv_len x index_heads x index_head_dim summed over the requests), more than the " +
              std::to_string(kMaxIndexerMacs) + " a case may have: shorten the requests or give /sparse/indices");
}

}  // namespace attnscope
