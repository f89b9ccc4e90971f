// cpu.reference: ground truth. fp64 arithmetic on the inputs as rounded to the case dtype, each query
// row over exactly the keys the mask allows (reference_row.h), the heads of one KV head side by side.
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
    const HeadBlocks hb(c);  // a task per token and block of heads of one KV head
    std::vector<double> sink_of(Hq, -INFINITY);
    for (int h = 0; h < Hq && !sinks.empty(); ++h) sink_of[h] = sinks[h];
    parallel_for(static_cast<int64_t>(tokens.size()) * hb.per_token, hb.grain(), opt, [&](int64_t i) {
      const int64_t t = i / hb.per_token;
      if (!sel[t]) return;
      const auto [h0, nh] = hb.heads(static_cast<int>(i % hb.per_token));
      const auto [r, q] = tokens[t];
      std::vector<double> o(static_cast<size_t>(nh) * Dv);
      double lse[kHeadBlock];
      reference_heads(c, p, w, kv, r, q, t, h0, nh, o.data(), lse, sink_of.data() + h0);
      for (int j = 0; j < nh; ++j) {
        float* out = res.o.data() + (t * Hq + h0 + j) * Dv;
        for (int d = 0; d < Dv; ++d) out[d] = static_cast<float>(o[static_cast<size_t>(j) * Dv + d]);
        res.lse[t * Hq + h0 + j] = static_cast<float>(lse[j]);
      }
    });
    return std::move(res);  // a structured binding: moved out, not copied
  }
};

}  // namespace
}  // namespace attnscope::cpu

namespace attnscope {
std::unique_ptr<Backend> make_cpu_reference() { return std::make_unique<cpu::Reference>(); }
}  // namespace attnscope
