// cpu.reference's arithmetic for one (token, head) row, in one place: fp64 softmax on the inputs as
// rounded to the case dtype (FP8: stored values times their scales, exact in fp64), over exactly the
// keys the mask allows. cpu.reference runs it for every row; the softmax step-through runs it for the row it explains, with the
// per-key probabilities.
#pragma once

#include <cmath>
#include <vector>

#include "cpu_common.h"

namespace attnscope::cpu {

// Row (token t = query q of request r, qo head h). o: Dv values; returns the natural-log LSE
// (-inf for a fully masked row, whose O is 0). probs (may be null) receives exp(s_k - lse) for the
// visible keys [lo, hi), indexed k - lo. `sink` is head h's sink logit (sink_logits; -inf: none): a
// term e^sink of the denominator with no value vector, so a fully masked row has O = 0, LSE = sink.
inline double reference_row(const CaseSpec& c, const Plan& p, const Workload& w, const KvAccess& kv, int r, int q, int64_t t,
                            int h, double* o, std::vector<double>* probs = nullptr, double sink = -INFINITY) {
  const int Hq = c.num_qo_heads, G = c.group_size(), Dq = c.head_dim_qk, Dv = c.head_dim_vo;
  const double scale = c.sm_scale_or_default();
  const RowMask& m = p.masks[r];
  const int qa = q_abs_of(m, q);
  int lo, hi;
  visible_range(m, qa, &lo, &hi);
  if (probs) probs->clear();
  if (hi <= lo) {  // fully masked row: O = 0, LSE = -inf (FlashAttention and FlashInfer agree), or the sink
    for (int d = 0; d < Dv; ++d) o[d] = 0.0;
    return sink;
  }
  const float* qv = w.q_row(t, h, c);
  const double slope = c.attention.alibi ? alibi_slope(h, Hq) : 0.0;
  std::vector<double> s(hi - lo);
  // the allowed keys' K rows, then their dot products together (dot_rows: the same bits)
  thread_local std::vector<const float*> rows;
  thread_local std::vector<int> keys;
  thread_local std::vector<double> dots;
  rows.clear();
  keys.clear();
  for (int k = lo; k < hi; ++k) {
    if (!mask_bit(m, qa, k)) {  // a mask_mod's hole inside the row's range
      s[k - lo] = -INFINITY;
      continue;
    }
    keys.push_back(k);
    rows.push_back(kv.k(r, k, h / G));
  }
  dots.resize(keys.size());
  dot_rows<double>(qv, rows.data(), static_cast<int>(rows.size()), Dq, dots.data());
  double mx = -INFINITY;
  for (size_t i = 0; i < keys.size(); ++i) {
    const int k = keys[i];
    // FP8: the row's values are stored value * scale; the scales factor out of the dot product
    double x = dots[i] * (static_cast<double>(w.q_scale) * kv.k_scale(r, k, h / G)) * scale;
    if (c.attention.soft_cap) x = *c.attention.soft_cap * std::tanh(x / *c.attention.soft_cap);
    if (c.attention.alibi) x += slope * (k - qa);
    x = apply_score_mod(c, p, r, h, qa, k, x);
    s[k - lo] = x;
    mx = std::max(mx, x);
  }
  if (mx == -INFINITY) {  // every visible key scored -inf (a score_mod): fully masked, as above
    for (int d = 0; d < Dv; ++d) o[d] = 0.0;
    if (probs) probs->assign(s.size(), 0.0);
    return sink;
  }
  mx = std::max(mx, sink);
  std::vector<double> acc(Dv, 0.0);
  double den = std::exp(sink - mx);  // the sink's term (0 without one); it adds nothing to O
  for (int k = lo; k < hi; ++k) {
    if (s[k - lo] == -INFINITY) continue;  // masked (a sparse row's dropped tokens): adds exactly 0, V unread
    const double e = std::exp(s[k - lo] - mx);
    den += e;
    const float* vr = kv.v(r, k, h / G);
    const double ev = e * kv.v_scale(r, k, h / G);
    for (int d = 0; d < Dv; ++d) acc[d] += ev * vr[d];
  }
  for (int d = 0; d < Dv; ++d) o[d] = acc[d] / den;
  const double lse = mx + std::log(den);
  if (probs)
    for (double x : s) probs->push_back(std::exp(x - lse));
  return lse;
}

}  // namespace attnscope::cpu
