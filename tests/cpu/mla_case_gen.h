// Seeded random MLA cases (docs/conventions.md section 13) for the CPU and GPU tests.
#pragma once

#include <algorithm>
#include <string>

#include "attnscope/case_spec.h"
#include "attnscope/rng.h"

namespace attnscope::testing {

// Seeded MLA case: small latent dims keep the fp64 checks fast; the DeepSeek dims are the examples'.
inline CaseSpec mla_case(uint64_t seed, bool absorbed, bool deepseek_dims = false) {
  SplitMix64 g(seed * 7919 + 11);
  CaseSpec c;
  c.name = "mla-" + std::to_string(seed);
  MlaSpec m;
  if (!deepseek_dims) {
    m.kv_lora_rank = 8 * g.range(2, 8);
    m.rope_dim = 8 * g.range(0, 2);
    m.qk_nope_dim = 8 * g.range(1, 4);
    m.v_head_dim = 8 * g.range(1, 4);
  }
  m.absorbed = absorbed;
  c.mla = m;
  c.num_qo_heads = g.range(1, 6);
  c.num_kv_heads = absorbed ? 1 : c.num_qo_heads;
  c.head_dim_qk = m.qk_dim();
  c.head_dim_vo = m.vo_dim();
  c.dtype = g.coin() ? DType::kBf16 : DType::kFp16;
  const int pss[] = {1, 4, 16, 64};
  c.kv_cache.page_size = pss[g.range(0, 3)];
  c.kv_cache.allocation = static_cast<PageAlloc>(g.range(0, 2));
  c.kv_cache.layout = g.coin() ? KvLayout::kNHD : KvLayout::kHND;
  c.kv_cache.poison_unused = g.coin();
  for (int i = g.range(1, 3); i > 0; --i) {
    RequestSpec r;
    r.kv_len = g.range(1, 150);
    r.q_len = g.range(1, std::min(r.kv_len, 5));
    c.requests.push_back(r);
  }
  c.data.seed = seed;
  c.split.planner = g.coin() ? Planner::kOff : Planner::kFixed;
  if (c.split.planner == Planner::kFixed) {
    c.split.fixed_split_size = std::max(1, 32 / c.effective_page_size());
    c.split.fixed_tile_q = 16;
  }
  validate_case(c);
  return c;
}

}  // namespace attnscope::testing
