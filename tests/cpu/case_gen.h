// Seeded random cases for property tests: every mask, GQA ratio, page size, layout, allocation.
#pragma once

#include "attnscope/case_spec.h"
#include "attnscope/rng.h"

namespace attnscope::testing {

struct GenLimits {
  int max_requests = 5;
  int max_q = 80;
  int max_kv = 300;
  bool allow_fp32 = true;
};

inline CaseSpec random_case(uint64_t seed, const GenLimits& lim = {}) {
  SplitMix64 g(seed * 7919 + 17);
  CaseSpec c;
  c.name = "random-" + std::to_string(seed);
  const int kv_heads[] = {1, 2, 4};
  const int groups[] = {1, 2, 3, 4, 8};
  c.num_kv_heads = kv_heads[g.range(0, 2)];
  c.num_qo_heads = c.num_kv_heads * groups[g.range(0, 4)];
  const int dims[] = {8, 16, 32, 64};
  c.head_dim_qk = dims[g.range(0, 3)];
  c.head_dim_vo = g.coin() ? c.head_dim_qk : dims[g.range(0, 3)];
  const DType dts[] = {DType::kBf16, DType::kFp16, DType::kFp32};
  c.dtype = dts[g.range(0, lim.allow_fp32 ? 2 : 1)];
  const int pss[] = {1, 4, 16, 64};
  if (g.range(0, 4) == 0) {
    c.kv_cache.storage = KvStorage::kRagged;
    c.kv_cache.page_size = 1;
    c.kv_cache.null_page = false;
  } else {
    c.kv_cache.page_size = pss[g.range(0, 3)];
    c.kv_cache.layout = g.coin() ? KvLayout::kNHD : KvLayout::kHND;
    c.kv_cache.allocation = static_cast<PageAlloc>(g.range(0, 2));
    c.kv_cache.allocation_seed = g.next() % 1000;
    c.kv_cache.null_page = g.coin();
    c.kv_cache.poison_unused = g.coin();
  }
  const int mask_kind = g.range(0, 6);  // 0 causal, 1 non-causal, 2 window, 3 local, 4 prefix, 5 docs, 6 padding
  c.attention.causal = mask_kind != 1 || g.coin();
  const int nreq = g.range(1, lim.max_requests);
  for (int i = 0; i < nreq; ++i) {
    RequestSpec r;
    r.kv_len = g.range(1, lim.max_kv);
    r.q_len = g.range(1, std::min(r.kv_len, lim.max_q));
    if (g.range(0, 3) == 0) r.q_len = 1;  // decode rows
    c.requests.push_back(r);
  }
  if (mask_kind == 2) c.attention.window = g.range(1, 120);
  if (mask_kind == 3) {
    c.attention.causal = true;
    c.attention.local_chunk = c.effective_page_size() * g.range(1, std::max(1, 96 / c.effective_page_size()));
  }
  if (mask_kind == 4) {
    c.attention.causal = true;
    c.attention.prefix_lm = true;
    for (auto& r : c.requests) r.prefix_len = g.range(0, r.kv_len);
  }
  if (mask_kind == 5) {
    for (auto& r : c.requests) {
      r.doc_starts = {0};
      while (g.coin() && r.doc_starts.back() + 1 < r.kv_len)
        r.doc_starts.push_back(g.range(r.doc_starts.back() + 1, r.kv_len - 1));
    }
  }
  if (mask_kind == 6) {
    for (auto& r : c.requests) r.pad_start = g.range(0, r.kv_len);
  }
  if (g.range(0, 3) == 0) c.attention.soft_cap = 5.0 + g.range(0, 40);
  if (g.range(0, 4) == 0) c.attention.alibi = true;
  const Planner pls[] = {Planner::kFlashInfer, Planner::kFlashAttn, Planner::kFixed, Planner::kOff};
  c.split.planner = pls[g.range(0, 3)];
  c.split.num_sms = g.range(1, 16) * 8;
  if (c.split.planner == Planner::kFixed) c.split.fixed_split_size = g.range(1, 40);
  if (g.range(0, 3) == 0) {
    const int tiles[] = {16, 64, 128};
    c.split.fixed_tile_q = tiles[g.range(0, 2)];
  }
  if ((c.split.planner == Planner::kFlashInfer || c.split.planner == Planner::kFixed) && g.range(0, 4) == 0)
    c.split.cuda_graph = true;
  c.split.partials = g.coin() ? PartialPrecision::kFp32 : PartialPrecision::kDtype;
  c.data.seed = g.next();
  c.data.std = 0.5 + 0.25 * g.range(0, 6);
  c.backends = {"cpu.reference", "cpu.lowp", "cpu.tiled"};
  validate_case(c);
  return c;
}

// Gives a generated case one head dim for Q/K and V, keeping the rest valid: a fixed query tile of
// 128 becomes 64 at head dim 256 and above (case_rules.cpp: FlashInfer uses at most 64 there).
inline void set_head_dim(CaseSpec& c, int dim) {
  c.head_dim_qk = c.head_dim_vo = dim;
  if (dim >= 256 && c.split.fixed_tile_q == 128) c.split.fixed_tile_q = 64;
}

// Gives every request with q_len >= 2 a random speculative tree over its new tokens (each parent -1 or
// an earlier token, drawn from SplitMix64(rng_seed)), on the causal mask alone (no window or local chunk).
inline CaseSpec with_random_trees(CaseSpec c, uint64_t rng_seed) {
  SplitMix64 g(rng_seed);
  c.attention.causal = true;
  c.attention.window.reset();
  c.attention.local_chunk.reset();
  for (auto& r : c.requests) {
    if (r.q_len < 2) continue;
    r.tree_parents.clear();
    for (int i = 0; i < r.q_len; ++i) r.tree_parents.push_back(i == 0 ? -1 : static_cast<int>(g.range(-1, i - 1)));
  }
  validate_case(c);
  return c;
}

}  // namespace attnscope::testing
