// Seeded random FP8 cases (docs/conventions.md section 10) for the CPU and GPU tests: random_case's
// masks, GQA, pages and layouts, with an FP8 format, a scale granularity, amax or given scales (some
// small enough to saturate), outlier channels and FP8 attention drawn from the seed.
#pragma once

#include "attnscope/fp8.h"
#include "case_gen.h"

namespace attnscope::testing {

inline CaseSpec random_fp8_case(uint64_t seed, GenLimits lim = {}) {
  lim.allow_fp32 = false;  // an FP8 cache is read by bf16 / fp16 kernels
  CaseSpec c = random_case(seed, lim);
  SplitMix64 g(seed * 104729 + 3);
  c.name = "fp8-" + std::to_string(seed);
  const Fp8Format f = g.coin() ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
  c.kv_cache.fp8 = f;
  c.kv_cache.scales.granularity = static_cast<ScaleGranularity>(g.range(0, 2));
  if (g.range(0, 2) == 0) {  // outlier channels: where e5m2 / e4m3 choices and saturation show
    c.data.outlier_channels = {0, static_cast<int>(g.range(0, c.head_dim_qk - 1))};
    c.data.outlier_scale = 4.0 + g.range(0, 60);
  }
  if (c.kv_cache.scales.granularity != ScaleGranularity::kToken && g.coin()) {
    // given scales around the amax recipe's (values reach about 3.5 std): x0.25 saturates, x4 wastes range
    const double factors[] = {0.25, 1.0, 4.0};
    const int n = c.kv_cache.scales.granularity == ScaleGranularity::kTensor ? 1 : c.num_kv_heads;
    for (auto* v : {&c.kv_cache.scales.k, &c.kv_cache.scales.v})
      for (int i = 0; i < n; ++i) v->push_back(3.5 * c.data.std * factors[g.range(0, 2)] / fp8_max(f));
  }
  if (g.range(0, 2) == 0) {
    c.fp8_attention = Fp8AttentionSpec{};
    if (g.coin()) c.fp8_attention->q_scale = 3.5 * c.data.std / fp8_max(f) * (g.coin() ? 1.0 : 0.5);
  }
  validate_case(c);
  return c;
}

// Sets the FP8 format and granularity of an FP8 case (tests that must cover each), keeping it valid:
// given scales are resized to the granularity's count (dropped for token scales).
inline void force_fp8(CaseSpec& c, Fp8Format f, ScaleGranularity g) {
  c.kv_cache.fp8 = f;
  c.kv_cache.scales.granularity = g;
  const size_t n = g == ScaleGranularity::kTensor ? 1 : g == ScaleGranularity::kHead ? c.num_kv_heads : 0;
  for (auto* v : {&c.kv_cache.scales.k, &c.kv_cache.scales.v})
    if (!v->empty()) {
      const double first = v->front();
      v->resize(n, first);
    }
  validate_case(c);
}

}  // namespace attnscope::testing
