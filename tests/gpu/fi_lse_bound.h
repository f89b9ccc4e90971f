// The bound on FlashInfer's natural-log LSE against the fp64 reference, shared by the FA2 (prefill,
// decode) and SM90 tests.
#pragma once

#include <algorithm>
#include <cmath>

#include "attnscope/backend.h"
#include "attnscope/case_spec.h"

namespace attnscope::testing {

// How far the worst LSE lies beyond its bound (<= 0: within). FlashInfer keeps m and log2(d) in
// fp32 with exp2/log2 approximations, ~1e-4 relative, hence 1e-3 + 1e-4 |lse|. A soft-cap adds
// tanh.approx.f32's error (~2^-10.7 relative) times the cap on every score: at most cap * 2^-10.
// `p_rounded`: the FA2 prefill kernel sums the row's probabilities with an MMA on P already cast to
// the input type (prefill.cuh, m16k16_rowsum_f16f16f32 on s_frag_f16), so d carries that type's
// rounding: each term within a relative u (2^-8 bf16, 2^-11 fp16), the sum too, ln(d) within u.
// Seen on an H100: 0.00135 on a bf16 smoke case, above the 1e-3 this bound had without the term.
inline double fi_lse_excess(const CaseSpec& c, const Result& a, const Result& ref, bool p_rounded) {
  double worst = 0;
  const double cap = c.attention.soft_cap.value_or(0.0);
  const double u = !p_rounded ? 0.0 : c.dtype == DType::kBf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  for (size_t i = 0; i < ref.lse.size() && i < a.lse.size(); ++i) {
    const double x = a.lse[i], y = ref.lse[i];
    if (std::isinf(y) && std::isinf(x) && (x < 0) == (y < 0)) continue;
    const double tol = 1e-3 + 1e-4 * std::abs(y) + cap * std::ldexp(1.0, -10) + u;
    worst = std::max(worst, std::isfinite(x) && std::isfinite(y) ? std::abs(x - y) - tol : INFINITY);
  }
  return worst;
}

}  // namespace attnscope::testing
