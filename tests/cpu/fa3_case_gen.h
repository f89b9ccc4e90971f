// Seeded random cases python.fa3 takes (FA3 from the fa3-fwd wheel: bf16, causal or none, GQA / MQA / MHA,
// its head dims, soft-cap, paged NHD / HND or ragged storage): the GPU test runs them under the 2x rule
// (PythonGpu.Fa3RandomCasesMeetTheTwiceLowpRule), a CPU test checks that they are valid and not refused.
#pragma once

#include <algorithm>
#include <random>
#include <string>

#include "attnscope/case_spec.h"

namespace attnscope::testing {

inline CaseSpec fa3_random_case(int seed) {
  std::mt19937 g(static_cast<unsigned>(seed));
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  CaseSpec c;
  c.name = "fa3-random-" + std::to_string(seed);
  for (int r = pick(1, 4); r > 0; --r) {  // decode, short and long prefills
    const int kv = pick(1, 1200), q = pick(0, 2) == 0 ? 1 : pick(1, std::min(kv, 200));
    c.requests.push_back({q, kv});
  }
  const int heads[][2] = {{8, 2}, {16, 16}, {32, 8}, {8, 1}, {4, 4}};
  const int dims[] = {64, 96, 128, 192, 256};
  const auto* h = heads[pick(0, 4)];
  c.num_qo_heads = h[0];
  c.num_kv_heads = h[1];
  c.head_dim_qk = c.head_dim_vo = dims[pick(0, 4)];
  c.dtype = DType::kBf16;
  c.attention.causal = pick(0, 1) == 1;
  if (pick(0, 3) == 0) c.attention.soft_cap = 30;
  const int store = pick(0, 3);
  if (store == 0) {
    c.kv_cache.storage = KvStorage::kRagged;  // one contiguous varlen buffer already
    c.kv_cache.page_size = 1;
    c.kv_cache.null_page = false;
  } else {
    c.kv_cache.layout = store == 1 ? KvLayout::kHND : KvLayout::kNHD;
    c.kv_cache.page_size = pick(0, 1) ? 16 : 64;
    c.kv_cache.allocation = PageAlloc::kShuffled;
  }
  c.data.seed = static_cast<uint64_t>(seed);
  return c;
}

}  // namespace attnscope::testing
