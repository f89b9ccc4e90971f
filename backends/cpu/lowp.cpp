// cpu.lowp: the naive computation in the case's low precision, rounding where an eager PyTorch
// implementation in that dtype rounds (FlashAttention's attention_ref with upcast=False): the
// scaled Q, the score matrix, each soft-cap step, the probabilities and the output are tensors in
// the dtype; matmul accumulation and the softmax itself run in fp32. It is the same-precision
// baseline of the "2x" rule: max|A - ref64| <= 2 max|lowp - ref64|. An FP8 cache is dequantised
// first, as an eager implementation does: K, V (and Q under fp8_attention) = round(fp8 * scale).
// Sinks as gpt-oss's eager reference: one more column of the score matrix (in the dtype) joins the
// softmax and is dropped before P.V.
#include <cmath>
#include <limits>

#include "cpu_common.h"

namespace attnscope::cpu {
namespace {

// An FP8 pool as an eager implementation dequantises it, once per run rather than once per query head:
// K and V = round(stored x scale) to the dtype at every slot a request uses. Each element is a pure
// function of itself, so the rows then take the unscaled path with the bits of rounding inside the loop.
Workload dequantised_pools(const CaseSpec& c, const PageTable& pt, const Workload& w, const RunOptions& opt) {
  Workload d;
  d.k_pool = w.k_pool;
  d.v_pool = w.v_pool;
  const KvAccess kv{c, pt, w};
  std::vector<std::pair<int, int>> blocks;  // (request, first key) of 256 keys each
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
    for (int k = 0; k < c.requests[r].kv_len; k += 256) blocks.emplace_back(r, k);
  RunOptions quiet = opt;
  quiet.progress = nullptr;  // the rows report the run's progress
  parallel_for(static_cast<int64_t>(blocks.size()), 1, quiet, [&](int64_t i) {
    const auto [r, k0] = blocks[i];
    for (int k = k0; k < std::min(c.requests[r].kv_len, k0 + 256); ++k)
      for (int h = 0; h < c.num_kv_heads; ++h) {
        const float ks = kv.k_scale(r, k, h), vs = kv.v_scale(r, k, h);
        const float *ko = kv.k(r, k, h), *vo = kv.v(r, k, h);
        float* kd = d.k_pool.data() + (ko - w.k_pool.data());
        float* vd = d.v_pool.data() + (vo - w.v_pool.data());
        for (int e = 0; e < c.head_dim_qk; ++e) kd[e] = round_to(c.dtype, ko[e] * ks);
        for (int e = 0; e < c.head_dim_vo; ++e) vd[e] = round_to(c.dtype, vo[e] * vs);
      }
  });
  return d;
}

// Heads h0 .. h0 + nh - 1 (nh <= kHeadBlock, one KV head's) of token t = query q of request r, each K and V row read
// once for all of them; a head's arithmetic is that of a head alone (rounded where an eager low-precision
// implementation rounds: the scaled Q, the scores, each soft-cap step, the probabilities and the output),
// so its bits do not depend on nh. Only the keys the mask allows are read: a masked key's probability is
// exactly 0. o: the result's rows, lse: the result's LSE, both at head h0.
void lowp_heads(const CaseSpec& c, const Plan& p, const Workload& w, const KvAccess& kv, const std::vector<float>& sinks, int r,
                int q, int64_t t, int h0, int nh, float* o, float* lse) {
  const DType dt = c.dtype;
  auto rd = [dt](float x) { return round_to(dt, x); };
  const int Hq = c.num_qo_heads, Dq = c.head_dim_qk, Dv = c.head_dim_vo, hk = h0 / c.group_size();
  const float scale = static_cast<float>(c.sm_scale_or_default());
  const RowMask& m = p.masks[r];
  const int qa = q_abs_of(m, q);
  int lo, hi;
  visible_range(m, qa, &lo, &hi);
  thread_local std::vector<int> keys;
  thread_local std::vector<const float*> rows;
  thread_local std::vector<float> qt, dots, s, acc;
  keys.clear();
  for (int k = lo; k < hi; ++k)
    if (mask_bit(m, qa, k)) keys.push_back(k);  // a mask_mod's holes and a sparse row's dropped tokens: never read
  const int n = static_cast<int>(keys.size()), L = head_dots_lanes(nh);
  qt.assign(static_cast<size_t>(Dq) * L, 0.f);
  for (int i = 0; i < nh; ++i) {
    const float* qv = w.q_row(t, h0 + i, c);
    for (int d = 0; d < Dq; ++d) qt[static_cast<size_t>(d) * L + i] = rd(rd(qv[d] * w.q_scale) * scale);  // a dtype tensor
  }
  rows.resize(n);
  for (int j = 0; j < n; ++j) rows[j] = kv.k(r, keys[j], hk);
  dots.resize(static_cast<size_t>(n) * L);
  head_dots_any<float>(L, qt.data(), rows.data(), n, Dq, dots.data());
  s.resize(static_cast<size_t>(nh) * n);  // head i's probabilities (first its scores) at [i * n, (i + 1) * n)
  float mx[kHeadBlock], den[kHeadBlock];
  const float cap = c.attention.soft_cap ? static_cast<float>(*c.attention.soft_cap) : 0.f;
  for (int i = 0; i < nh; ++i) {
    const int h = h0 + i;
    const float slope = c.attention.alibi ? static_cast<float>(alibi_slope(h, Hq)) : 0.f;
    const float sink = sinks.empty() ? -INFINITY : rd(sinks[h]);  // the sink column, a dtype value
    float* si = s.data() + static_cast<size_t>(i) * n;
    mx[i] = -INFINITY;
    for (int j = 0; j < n; ++j) {
      float x = rd(dots[static_cast<size_t>(j) * L + i]);  // score matrix in the dtype
      if (cap > 0) x = rd(rd(std::tanh(rd(x / cap))) * cap);
      if (c.attention.alibi) x = rd(x + rd(slope * static_cast<float>(keys[j] - qa)));
      if (p.score_mod) x = rd(static_cast<float>(apply_score_mod(c, p, r, h, qa, keys[j], x)));  // a dtype tensor
      si[j] = x;
      mx[i] = std::max(mx[i], x);
    }
    lse[i] = sink;  // a fully masked row (none visible, or every score -inf): O = 0, LSE the sink (or -inf)
    if (mx[i] == -INFINITY) continue;
    mx[i] = std::max(mx[i], sink);
    den[i] = std::exp(sink - mx[i]);  // the sink column's probability mass (0 without one)
    for (int j = 0; j < n; ++j) {
      si[j] = std::exp(si[j] - mx[i]);
      den[i] += si[j];
    }
  }
  acc.assign(static_cast<size_t>(nh) * Dv, 0.f);
  for (int j = 0; j < n; ++j) {
    const float* vr = kv.v(r, keys[j], hk);
    for (int i = 0; i < nh; ++i) {
      if (mx[i] == -INFINITY) continue;
      const float pk = rd(s[static_cast<size_t>(i) * n + j] / den[i]);  // softmax output is a dtype tensor
      float* ai = acc.data() + static_cast<size_t>(i) * Dv;
      for (int d = 0; d < Dv; ++d) ai[d] += pk * vr[d];
    }
  }
  for (int i = 0; i < nh; ++i) {
    for (int d = 0; d < Dv; ++d) o[static_cast<size_t>(i) * Dv + d] = rd(acc[static_cast<size_t>(i) * Dv + d]);
    if (mx[i] != -INFINITY) lse[i] = mx[i] + std::log(den[i]);
  }
}

class Lowp final : public Backend {
 public:
  std::string id() const override { return "cpu.lowp"; }
  std::string describe() const override { return "naive attention rounded like an eager low-precision implementation"; }
  std::string check(const CaseSpec&) const override { return ""; }

  Result run(const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& opt) override {
    auto [res, tokens, sel] = start_row_run(id(), c, opt);
    const Workload deq = w.has_scales() ? dequantised_pools(c, p.pages, w, opt) : Workload{};
    const KvAccess kv{c, p.pages, w.has_scales() ? deq : w};  // no scales: the pool holds dtype values
    const std::vector<float> sinks = sink_logits(c);
    const int Hq = c.num_qo_heads, Dv = c.head_dim_vo;
    const HeadBlocks hb(c);  // a task per token and block of heads of one KV head
    parallel_for(static_cast<int64_t>(tokens.size()) * hb.per_token, hb.grain(), opt, [&](int64_t i) {
      const int64_t t = i / hb.per_token;
      if (!sel[t]) return;
      const auto [h0, nh] = hb.heads(static_cast<int>(i % hb.per_token));
      const auto [r, q] = tokens[t];
      lowp_heads(c, p, w, kv, sinks, r, q, t, h0, nh, res.o.data() + (t * Hq + h0) * Dv, res.lse.data() + t * Hq + h0);
    });
    return std::move(res);  // a structured binding: moved out, not copied
  }
};

}  // namespace
}  // namespace attnscope::cpu

namespace attnscope {
std::unique_ptr<Backend> make_cpu_lowp() { return std::make_unique<cpu::Lowp>(); }
}  // namespace attnscope
