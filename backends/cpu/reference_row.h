// cpu.reference's arithmetic for one token's rows, in one place: fp64 softmax on the inputs as
// rounded to the case dtype (FP8: stored values times their scales, exact in fp64), over exactly the
// keys the mask allows. cpu.reference runs it for every row; the softmax step-through runs it for the row
// it explains, with the per-key probabilities.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_common.h"

namespace attnscope::cpu {

// Heads h0 .. h0 + nh - 1 (1 <= nh <= kHeadBlock, all of one KV head) of token t = query q of request r.
// Each K and V row is read once for all of them; each head's arithmetic is that of a head alone (its dot
// products summed over d in order, then its max, its sum and P.V in key order), so a head's bits do not
// depend on nh. o: nh x Dv values; lse[i]: head h0 + i's natural-log LSE (-inf for a fully masked row,
// whose O is 0). sinks (may be null): the heads' sink logits (sink_logits; -inf: none), a term e^sink of
// the denominator with no value vector, so a fully masked row has O = 0, LSE = sink. probs (nh == 1 only,
// may be null) receives exp(s_k - lse) for the visible keys [lo, hi), indexed k - lo.
inline void reference_heads(const CaseSpec& c, const Plan& p, const Workload& w, const KvAccess& kv, int r, int q, int64_t t,
                            int h0, int nh, double* o, double* lse, const double* sinks, std::vector<double>* probs = nullptr) {
  const int Hq = c.num_qo_heads, Dq = c.head_dim_qk, Dv = c.head_dim_vo, hk = h0 / c.group_size();
  const double scale = c.sm_scale_or_default();
  const RowMask& m = p.masks[r];
  const int qa = q_abs_of(m, q);
  int lo, hi;
  visible_range(m, qa, &lo, &hi);
  if (probs) probs->clear();
  auto sink = [&](int i) { return sinks ? sinks[i] : -INFINITY; };
  auto masked_head = [&](int i) {  // O = 0, LSE = -inf (FlashAttention and FlashInfer agree), or the sink
    std::fill(o + static_cast<size_t>(i) * Dv, o + static_cast<size_t>(i + 1) * Dv, 0.0);
    lse[i] = sink(i);
  };
  thread_local std::vector<int> keys;
  keys.clear();
  for (int k = lo; k < hi; ++k)
    if (mask_bit(m, qa, k)) keys.push_back(k);  // a mask_mod's holes, a sparse row's dropped tokens: never read
  const int n = static_cast<int>(keys.size());
  // the heads' Q side by side ([d][lane], lanes the next power of two), so each K element meets all of them
  const int L = head_dots_lanes(nh);
  thread_local std::vector<double> qt, dots, s;
  thread_local std::vector<const float*> rows;
  qt.assign(static_cast<size_t>(Dq) * L, 0.0);
  for (int i = 0; i < nh; ++i) {
    const float* qv = w.q_row(t, h0 + i, c);
    for (int d = 0; d < Dq; ++d) qt[static_cast<size_t>(d) * L + i] = qv[d];
  }
  rows.resize(n);
  for (int j = 0; j < n; ++j) rows[j] = kv.k(r, keys[j], hk);
  dots.resize(static_cast<size_t>(n) * L);
  head_dots_any<double>(L, qt.data(), rows.data(), n, Dq, dots.data());
  s.resize(static_cast<size_t>(nh) * n);  // head i's scores at [i * n, (i + 1) * n)
  for (int j = 0; j < n; ++j) {
    const double ks = static_cast<double>(w.q_scale) * kv.k_scale(r, keys[j], hk);  // FP8: scales factor out
    for (int i = 0; i < nh; ++i) s[static_cast<size_t>(i) * n + j] = dots[static_cast<size_t>(j) * L + i] * ks * scale;
  }
  double mx[kHeadBlock], den[kHeadBlock];
  for (int i = 0; i < nh; ++i) {
    const int h = h0 + i;
    const double slope = c.attention.alibi ? alibi_slope(h, Hq) : 0.0;
    double* si = s.data() + static_cast<size_t>(i) * n;
    mx[i] = -INFINITY;
    for (int j = 0; j < n; ++j) {
      double x = si[j];
      if (c.attention.soft_cap) x = *c.attention.soft_cap * std::tanh(x / *c.attention.soft_cap);
      if (c.attention.alibi) x += slope * (keys[j] - qa);
      si[j] = x = apply_score_mod(c, p, r, h, qa, keys[j], x);
      mx[i] = std::max(mx[i], x);
    }
    // every visible key scored -inf (a score_mod), or none is visible: fully masked (O 0, LSE the sink)
    if (mx[i] == -INFINITY) continue;
    mx[i] = std::max(mx[i], sink(i));
    den[i] = std::exp(sink(i) - mx[i]);  // the sink's term (0 without one); it adds nothing to O
  }
  thread_local std::vector<double> acc;
  acc.assign(static_cast<size_t>(nh) * Dv, 0.0);
  for (int j = 0; j < n; ++j) {
    const float* vr = kv.v(r, keys[j], hk);
    const double vs = kv.v_scale(r, keys[j], hk);
    for (int i = 0; i < nh; ++i) {
      const double x = s[static_cast<size_t>(i) * n + j];
      if (mx[i] == -INFINITY || x == -INFINITY) continue;  // adds exactly 0; V unread
      const double e = std::exp(x - mx[i]);
      den[i] += e;
      const double ev = e * vs;
      double* ai = acc.data() + static_cast<size_t>(i) * Dv;
      for (int d = 0; d < Dv; ++d) ai[d] += ev * vr[d];
    }
  }
  for (int i = 0; i < nh; ++i) {
    if (mx[i] == -INFINITY) {
      masked_head(i);
      continue;
    }
    for (int d = 0; d < Dv; ++d) o[static_cast<size_t>(i) * Dv + d] = acc[static_cast<size_t>(i) * Dv + d] / den[i];
    lse[i] = mx[i] + std::log(den[i]);
  }
  if (!probs || hi <= lo) return;
  probs->assign(hi - lo, 0.0);  // masked keys and a fully masked row: 0
  if (mx[0] != -INFINITY)
    for (int j = 0; j < n; ++j) (*probs)[keys[j] - lo] = std::exp(s[j] - lse[0]);
}

// One row (token t, qo head h): reference_heads for one head. Returns the natural-log LSE.
inline double reference_row(const CaseSpec& c, const Plan& p, const Workload& w, const KvAccess& kv, int r, int q, int64_t t,
                            int h, double* o, std::vector<double>* probs = nullptr, double sink = -INFINITY) {
  double lse;
  reference_heads(c, p, w, kv, r, q, t, h, 1, o, &lse, &sink, probs);
  return lse;
}

}  // namespace attnscope::cpu
