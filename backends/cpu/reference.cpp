// cpu.reference: ground truth. fp64 arithmetic on the inputs as rounded to the case dtype, one
// query row at a time over exactly the keys the mask allows (reference_row.h).
#include <cmath>
#include <limits>

#include "reference_row.h"

namespace attnscope::cpu {
namespace {

class Reference final : public Backend {
 public:
  std::string id() const override { return "cpu.reference"; }
  std::string describe() const override { return "fp64 naive softmax on the CPU (ground truth)"; }
  std::string check(const CaseSpec&) const override { return ""; }

  Result run(const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& opt) override {
    auto [res, tokens, sel] = start_row_run(id(), c, opt);
    const int Hq = c.num_qo_heads, Dv = c.head_dim_vo;
    const KvAccess kv{c, p.pages, w};
    const std::vector<float> sinks = sink_logits(c);
    parallel_for(static_cast<int64_t>(tokens.size()) * Hq, 16, opt, [&](int64_t i) {
      const int64_t t = i / Hq;
      const int h = static_cast<int>(i % Hq);
      if (!sel[t]) return;
      const auto [r, q] = tokens[t];
      std::vector<double> o(Dv);
      const double lse = reference_row(c, p, w, kv, r, q, t, h, o.data(), nullptr, sinks.empty() ? -INFINITY : sinks[h]);
      float* out = res.o.data() + (t * Hq + h) * Dv;
      for (int d = 0; d < Dv; ++d) out[d] = static_cast<float>(o[d]);
      res.lse[t * Hq + h] = static_cast<float>(lse);
    });
    return std::move(res);  // a structured binding: moved out, not copied
  }
};

}  // namespace
}  // namespace attnscope::cpu

namespace attnscope {
std::unique_ptr<Backend> make_cpu_reference() { return std::make_unique<cpu::Reference>(); }
}  // namespace attnscope
