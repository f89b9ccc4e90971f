// cpu.reference: ground truth. fp64 arithmetic on the inputs as rounded to the case dtype, one
// query row at a time over exactly the keys the mask allows.
#include <cmath>
#include <limits>

#include "cpu_common.h"

namespace attnscope::cpu {
namespace {

class Reference final : public Backend {
 public:
  std::string id() const override { return "cpu.reference"; }
  std::string describe() const override { return "fp64 naive softmax on the CPU (ground truth)"; }
  std::string check(const CaseSpec&) const override { return ""; }

  Result run(const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& opt) override {
    Result res = poisoned_result(id(), c);
    const auto tokens = token_list(c);
    const auto sel = row_selection(c, opt.sample_rows);
    if (opt.sample_rows) {
      res.row_valid = sel;
      res.message = "sampled " + std::to_string(*opt.sample_rows) + " query rows per request";
    }
    const int Hq = c.num_qo_heads, G = c.group_size(), Dq = c.head_dim_qk, Dv = c.head_dim_vo;
    const double scale = c.sm_scale_or_default();
    const KvAccess kv{c, p.pages, w};
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
      if (hi <= lo) {  // fully masked row: O = 0, LSE = -inf (FlashAttention and FlashInfer agree)
        for (int d = 0; d < Dv; ++d) o[d] = 0.f;
        res.lse[t * Hq + h] = -std::numeric_limits<float>::infinity();
        return;
      }
      const float* qv = w.q_row(t, h, c);
      const double slope = c.attention.alibi ? alibi_slope(h, Hq) : 0.0;
      std::vector<double> s(hi - lo);
      double mx = -INFINITY;
      for (int k = lo; k < hi; ++k) {
        const float* kr = kv.k(r, k, h / G);
        double dot = 0;
        for (int d = 0; d < Dq; ++d) dot += static_cast<double>(qv[d]) * kr[d];
        double x = dot * scale;
        if (c.attention.soft_cap) x = *c.attention.soft_cap * std::tanh(x / *c.attention.soft_cap);
        if (c.attention.alibi) x += slope * (k - qa);
        s[k - lo] = x;
        mx = std::max(mx, x);
      }
      std::vector<double> acc(Dv, 0.0);
      double den = 0;
      for (int k = lo; k < hi; ++k) {
        const double e = std::exp(s[k - lo] - mx);
        den += e;
        const float* vr = kv.v(r, k, h / G);
        for (int d = 0; d < Dv; ++d) acc[d] += e * vr[d];
      }
      for (int d = 0; d < Dv; ++d) o[d] = static_cast<float>(acc[d] / den);
      res.lse[t * Hq + h] = static_cast<float>(mx + std::log(den));
    });
    return res;
  }
};

}  // namespace
}  // namespace attnscope::cpu

namespace attnscope {
std::unique_ptr<Backend> make_cpu_reference() { return std::make_unique<cpu::Reference>(); }
}  // namespace attnscope
