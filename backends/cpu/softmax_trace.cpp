// The softmax step-through of one row (softmax_trace.h): cpu.tiled's own row arithmetic
// (tiled_row.cpp) over the row's work items in chunk order, the fold of their partials, and
// cpu.reference's row (reference_row.h) beside it. A sink has no step of its own: it is the state the
// row's output or first chunk starts from (m = sink2, d = 1), which the tile steps show.
#include "attnscope/softmax_trace.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "attnscope/softmax_state.h"
#include "attnscope/sparse_gather.h"
#include "reference_row.h"
#include "tiled_row.h"

namespace attnscope {

namespace {

// The work unit holding the query (a request, or the vLLM virtual batch it falls in).
int unit_of(const Plan& p, int request, int query) {
  for (int i = 0; i < static_cast<int>(p.units.size()); ++i) {
    const WorkUnit& un = p.units[i];
    if (un.request == request && query >= un.q_begin && query < un.q_begin + un.q_len) return i;
  }
  throw std::logic_error("explain: no work unit holds query " + std::to_string(query));
}

// cpu.tiled's arithmetic of the row over its work items in chunk order and the fold of their partials:
// tr's plan fields, steps, partials, merges, O and LSE.
void trace_tiled(const CaseSpec& c, const Plan& p, const cpu::TiledArith& a, int request, int query, int head, SoftmaxTrace& tr) {
  const SplitPlan& sp = p.split;
  const int G = a.G, Dv = a.Dv;
  const int u = unit_of(p, request, query);
  const WorkUnit& un = p.units[u];
  const int ql = query - un.q_begin, kvh = head / G, row = ql * G + head % G;
  tr.tile_q = sp.cta_tile_q;
  tr.chunk_pages = sp.chunk_pages;
  tr.kv_warp_split = sp.kv_warp_split;
  tr.split = sp.split_kv;

  // the row's work items, in chunk order
  std::vector<int> items;
  for (int i = 0; i < static_cast<int>(sp.items.size()); ++i) {
    const WorkItem& it = sp.items[i];
    if (it.unit == u && row >= it.row_begin && row < it.row_end) items.push_back(i);
  }
  std::sort(items.begin(), items.end(), [&](int x, int y) { return sp.items[x].kv_chunk < sp.items[y].kv_chunk; });
  const size_t want = sp.split_kv ? static_cast<size_t>(sp.unit_chunks[u]) : 1;
  if (items.size() != want)
    throw std::logic_error("explain: row " + std::to_string(row) + " of unit " + std::to_string(u) + " is in " +
                           std::to_string(items.size()) + " work items, expected " + std::to_string(want));
  cpu::RowScratch scratch;
  std::vector<float> acc(Dv), part(Dv);
  float lse2 = -INFINITY;
  tr.o.assign(Dv, 0.f);
  for (size_t n = 0; n < items.size(); ++n) {
    const WorkItem& it = sp.items[items[n]];
    ChunkPartial cp;
    const cpu::RowState st = cpu::tiled_item_row(a, it, row, kvh, scratch, &tr.steps, &cp);
    cp.item = items[n];
    if (!sp.split_kv) {
      tr.lse = cpu::tiled_final(a, st, tr.o.data());
      cp.lse2 = st.den == 0.f ? -INFINITY : st.mx + std::log2(st.den);
      cp.o_head.assign(tr.o.begin(), tr.o.begin() + std::min(Dv, kTraceHeadValues));
      tr.partials.push_back(cp);
      continue;
    }
    cp.lse2 = cpu::tiled_partial(a, st, part.data());
    cp.o_head.assign(part.begin(), part.begin() + std::min(Dv, kTraceHeadValues));
    tr.partials.push_back(cp);
    if (n == 0) {  // the fold starts from chunk 0's partial, as cpu.tiled's merge does
      acc = part;
      lse2 = cp.lse2;
    } else {
      MergeStep ms;
      ms.chunk = it.kv_chunk;
      cpu::tiled_fold(Dv, acc.data(), &lse2, cp.lse2, part.data(), &ms);
      tr.merges.push_back(ms);
    }
  }
  if (sp.split_kv) {
    for (int d = 0; d < Dv; ++d) tr.o[d] = round_to(c.dtype, acc[d]);
    tr.lse = lse2_to_e(lse2);
  }
}

// The /sparse checks of the traced row (SoftmaxTrace::SparseCheck): counts, recall of mass over the
// heads, this head's dense fp64 output over every visible key, and the FP8 selection's flips.
SoftmaxTrace::SparseCheck sparse_check(const CaseSpec& c, const Plan& p, const Workload& w, const SoftmaxTrace& tr) {
  SoftmaxTrace::SparseCheck k;
  const SparseSelection& s = (*p.sparse)[tr.request];
  const int* row = s.row(tr.query);
  k.kept = s.kept(tr.query);
  k.padding = s.padding(tr.query);
  k.nans = s.nans[tr.query];
  k.plain_logits = c.attention.score_mod || c.attention.soft_cap || c.attention.alibi;
  const std::vector<double> rec = recall_of_mass(c, p.pages, w, tr.request, tr.query, row, s.top_k);
  k.recall = rec[tr.head];
  double sum = 0;
  for (int h = 0; h < static_cast<int>(rec.size()); ++h) {
    sum += rec[h];
    if (rec[h] < rec[k.recall_min_head]) k.recall_min_head = h;
  }
  k.recall_mean = sum / static_cast<double>(rec.size());
  k.recall_min = rec[k.recall_min_head];
  // dense: every causally visible key [0, q_abs], fp64
  const int n = tr.q_abs + 1, G = c.group_size(), Dq = c.head_dim_qk, Dv = c.head_dim_vo, ps = p.pages.page_size;
  const float* qv = w.q_row(tr.token, tr.head, c);
  std::vector<double> x(n), o(Dv, 0.0);
  double mx = -INFINITY;
  for (int key = 0; key < n; ++key) {
    const float* kr = w.k_pool.data() + kv_offset(c.kv_cache.layout, p.pages.page_of(tr.request, key), key % ps, tr.head / G, 0,
                                                  ps, c.num_kv_heads, Dq);
    double dot = 0;
    for (int d = 0; d < Dq; ++d) dot += static_cast<double>(qv[d]) * kr[d];
    x[key] = dot * c.sm_scale_or_default();
    mx = std::max(mx, x[key]);
  }
  double den = 0;
  for (int key = 0; key < n; ++key) {
    const double e = std::exp(x[key] - mx);
    den += e;
    const float* vr = w.v_pool.data() + kv_offset(c.kv_cache.layout, p.pages.page_of(tr.request, key), key % ps, tr.head / G, 0,
                                                  ps, c.num_kv_heads, Dv);
    for (int d = 0; d < Dv; ++d) o[d] += e * vr[d];
  }
  k.dense_lse = mx + std::log(den);
  for (int d = 0; d < Dv; ++d) k.dense_diff = std::max(k.dense_diff, std::fabs(tr.ref_o[d] - o[d] / den));
  if (c.sparse->indices.empty() && c.sparse->scoring == SparseScoring::kFp8) {
    const IndexerInputs in = indexer_inputs(c, tr.request);
    std::vector<double> sc(n);
    indexer_scores_fp64(in, tr.query, n, sc.data());
    std::vector<int> twin(s.top_k);
    select_top_k(sc.data(), n, s.top_k, twin.data());
    k.flips = selection_differs(row, twin.data(), s.top_k);
  }
  return k;
}

}  // namespace

SoftmaxTrace explain_row(const CaseSpec& c, const Plan& p, const Workload& w, int request, int query, int head,
                         bool sparse_checks) {
  const int R = static_cast<int>(c.requests.size());
  if (request < 0 || request >= R)
    throw std::invalid_argument("--request " + std::to_string(request) + ": the case has " + std::to_string(R) +
                                " requests (0 to " + std::to_string(R - 1) + ")");
  const int ql_req = c.requests[request].q_len;
  if (query < 0 || query >= ql_req)
    throw std::invalid_argument("--row " + std::to_string(query) + ": request " + std::to_string(request) + " has " +
                                std::to_string(ql_req) + " queries (0 to " + std::to_string(ql_req - 1) + ")");
  if (head < 0 || head >= c.num_qo_heads)
    throw std::invalid_argument("--head " + std::to_string(head) + ": the case has " + std::to_string(c.num_qo_heads) +
                                " query heads (0 to " + std::to_string(c.num_qo_heads - 1) + ")");
  const cpu::TiledArith a(c, p, w);
  const int u = unit_of(p, request, query);
  const WorkUnit& un = p.units[u];

  SoftmaxTrace tr;
  tr.request = request;
  tr.query = query;
  tr.head = head;
  tr.unit = u;
  tr.token = a.unit_tok[u] + query - un.q_begin;
  const RowMask& m = p.masks[request];
  tr.q_abs = q_abs_of(m, query);
  visible_range(m, tr.q_abs, &tr.visible_lo, &tr.visible_hi);
  tr.visible = std::max(0, tr.visible_hi - tr.visible_lo);
  tr.sm_scale = a.scale;
  tr.scale_log2 = a.scale_log2;
  tr.alibi = c.attention.alibi;
  tr.soft_cap = a.cap;
  tr.score_mod = p.score_mod != nullptr;
  // a /sparse row as cpu.tiled runs it: its gathered request, over the kept tokens in rank order
  if (c.is_sparse() && sparse_gather_refusal(c, &p.pages).empty()) {
    const SparseGather g = gather_sparse(c, p);
    trace_tiled(g.c, g.p, cpu::TiledArith(g.c, g.p, w), static_cast<int>(tr.token), 0, head, tr);
    const SparseSelection& s = (*p.sparse)[request];
    tr.gathered.assign(s.row(query), s.row(query) + s.kept(query));
  } else {
    trace_tiled(c, p, a, request, query, head, tr);
  }
  const int Dv = a.Dv;

  // the exact softmax (cpu.reference's row), per-key logits in the tiled arithmetic, probabilities
  tr.ref_o.assign(Dv, 0.0);
  std::vector<double> probs;
  const std::vector<float> sinks = sink_logits(c);
  tr.sink = sinks.empty() ? -INFINITY : sinks[head];
  tr.sink2 = a.sink2.empty() ? -INFINITY : a.sink2[head];
  tr.ref_lse = cpu::reference_row(c, p, w, a.kv, request, query, tr.token, head, tr.ref_o.data(), &probs, tr.sink);
  tr.sink_prob = sinks.empty() ? 0.0 : std::exp(tr.sink - tr.ref_lse);
  for (int d = 0; d < Dv; ++d) tr.max_abs_diff = std::max(tr.max_abs_diff, std::fabs(tr.o[d] - tr.ref_o[d]));
  tr.lse_diff = std::isinf(tr.ref_lse) && std::isinf(tr.lse) ? 0.0 : std::fabs(tr.lse - tr.ref_lse);
  const float* qv = w.q_row(tr.token, head, c);
  const float slope = c.attention.alibi ? static_cast<float>(alibi_slope(head, a.Hq)) : 0.f;
  for (int k = un.kv_begin; k < un.kv_begin + un.kv_len; ++k) {
    const bool seen = k >= tr.visible_lo && k < tr.visible_hi && mask_bit(p.masks[request], tr.q_abs, k);
    tr.keys.push_back(k);
    tr.logits.push_back(seen ? cpu::tiled_logit(a, qv, request, k, head, tr.q_abs, slope) : -INFINITY);
    tr.probs.push_back(seen ? probs[k - tr.visible_lo] : 0.0);
  }
  if (p.sparse && sparse_checks) tr.sparse = sparse_check(c, p, w, tr);
  return tr;
}

}  // namespace attnscope
