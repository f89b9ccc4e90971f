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

class Lowp final : public Backend {
 public:
  std::string id() const override { return "cpu.lowp"; }
  std::string describe() const override { return "naive attention rounded like an eager low-precision implementation"; }
  std::string check(const CaseSpec&) const override { return ""; }

  Result run(const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& opt) override {
    auto [res, tokens, sel] = start_row_run(id(), c, opt);
    const DType dt = c.dtype;
    auto rd = [dt](float x) { return round_to(dt, x); };
    const int Hq = c.num_qo_heads, G = c.group_size(), Dq = c.head_dim_qk, Dv = c.head_dim_vo;
    const float scale = static_cast<float>(c.sm_scale_or_default());
    const Workload deq = w.has_scales() ? dequantised_pools(c, p.pages, w, opt) : Workload{};
    const KvAccess kv{c, p.pages, w.has_scales() ? deq : w};  // no scales: the pool holds dtype values
    const std::vector<float> sinks = sink_logits(c);
    parallel_for(static_cast<int64_t>(tokens.size()) * Hq, 16, opt, [&](int64_t i) {
      const int64_t t = i / Hq;
      const int h = static_cast<int>(i % Hq);
      if (!sel[t]) return;
      const auto [r, q] = tokens[t];
      const RowMask& m = p.masks[r];
      const int qa = q_abs_of(m, q);
      int lo, hi;
      visible_range(m, qa, &lo, &hi);
      float* o = res.o.data() + (t * Hq + h) * Dv;
      const float sink = sinks.empty() ? -INFINITY : rd(sinks[h]);  // the sink column, a dtype value
      auto fully_masked = [&] {  // O = 0, LSE = -inf (FlashAttention and FlashInfer agree), or the sink's logit
        for (int d = 0; d < Dv; ++d) o[d] = 0.f;
        res.lse[t * Hq + h] = sink;
      };
      if (hi <= lo) return fully_masked();
      const float* qv = w.q_row(t, h, c);
      std::vector<float> qs(Dq);
      for (int d = 0; d < Dq; ++d) qs[d] = rd(rd(qv[d] * w.q_scale) * scale);  // q * sm_scale is a dtype tensor
      const float slope = c.attention.alibi ? static_cast<float>(alibi_slope(h, Hq)) : 0.f;
      const float cap = c.attention.soft_cap ? static_cast<float>(*c.attention.soft_cap) : 0.f;
      std::vector<float> s(hi - lo, -INFINITY);
      // only the keys the mask allows are read (a sparse row keeps 2048 of thousands); a masked key's
      // probability is exactly 0, so skipping it changes no bit. The rows' dot products go together
      // (dot_rows: the same bits as one at a time)
      thread_local std::vector<int> keys;
      thread_local std::vector<const float*> rows;
      thread_local std::vector<float> dots;
      keys.clear();
      rows.clear();
      for (int k = lo; k < hi; ++k)
        if (mask_bit(m, qa, k)) keys.push_back(k);  // a mask_mod's holes and a sparse row's dropped tokens stay -inf
      for (int k : keys) rows.push_back(kv.k(r, k, h / G));
      dots.resize(rows.size());
      dot_rows<float>(qs.data(), rows.data(), static_cast<int>(rows.size()), Dq, dots.data());
      float mx = -INFINITY;
      for (size_t i = 0; i < keys.size(); ++i) {
        const int k = keys[i];
        const float dot = dots[i];
        float x = rd(dot);  // score matrix in the dtype
        if (cap > 0) x = rd(rd(std::tanh(rd(x / cap))) * cap);
        if (c.attention.alibi) x = rd(x + rd(slope * static_cast<float>(k - qa)));
        if (p.score_mod) x = rd(static_cast<float>(apply_score_mod(c, p, r, h, qa, k, x)));  // a dtype tensor
        s[k - lo] = x;
        mx = std::max(mx, x);
      }
      if (mx == -INFINITY) return fully_masked();  // every visible key scored -inf (a score_mod)
      mx = std::max(mx, sink);
      float den = std::exp(sink - mx);  // the sink column's probability mass (0 without one)
      for (int k : keys) {
        float& x = s[k - lo];
        x = std::exp(x - mx);
        den += x;
      }
      std::vector<float> acc(Dv, 0.f);
      for (int k : keys) {
        const float pk = rd(s[k - lo] / den);  // softmax output is a dtype tensor
        const float* vr = kv.v(r, k, h / G);
        for (int d = 0; d < Dv; ++d) acc[d] += pk * vr[d];
      }
      for (int d = 0; d < Dv; ++d) o[d] = rd(acc[d]);
      res.lse[t * Hq + h] = mx + std::log(den);
    });
    return std::move(res);  // a structured binding: moved out, not copied
  }
};

}  // namespace
}  // namespace attnscope::cpu

namespace attnscope {
std::unique_ptr<Backend> make_cpu_lowp() { return std::make_unique<cpu::Lowp>(); }
}  // namespace attnscope
