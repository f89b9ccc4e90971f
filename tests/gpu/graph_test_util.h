// What the CUDA-graph GPU tests share: their batch, a session result's graph report, one of its checks
// by name, and the report as text for failure messages.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "attnscope/case_spec.h"
#include "attnscope/graph_replay.h"
#include "session.h"

namespace attnscope::testing {

// The CUDA-graph tests' batch: head_dim 128 bf16 (every FlashInfer build has it), GQA 4, a shuffled
// pool of 16-token pages with poisoned unused pages and slots; n requests of q_len tokens, kv lengths
// drawn from `seed` in [q_len, max_kv], captured under engine e at `bucket`. No backends: the caller's.
inline CaseSpec graph_batch(int n, int q_len, int bucket, GraphEngine e, uint64_t seed, int max_kv) {
  std::mt19937_64 g(seed);
  CaseSpec c;
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.dtype = DType::kBf16;
  c.kv_cache.page_size = 16;
  c.kv_cache.allocation = PageAlloc::kShuffled;
  c.kv_cache.allocation_seed = seed;
  c.kv_cache.poison_unused = true;
  c.split.cuda_graph = true;
  c.cuda_graph = CudaGraphSpec{bucket, e};
  c.data.seed = seed;
  for (int r = 0; r < n; ++r) {
    RequestSpec q;
    q.q_len = q_len;
    q.kv_len = q_len + static_cast<int>(g() % static_cast<uint64_t>(max_kv - q_len + 1));
    c.requests.push_back(q);
  }
  return c;
}

// Backend `id`'s graph report in the session (a failed expectation and an empty report if none).
inline const GraphReplayReport& graph_of(const Session& s, const std::string& id) {
  const Result* r = s.result(id);
  EXPECT_NE(r, nullptr) << id;
  EXPECT_TRUE(r && r->graph.has_value()) << id;
  static const GraphReplayReport none;
  return r && r->graph ? *r->graph : none;
}

inline const GraphCheck* check_of(const GraphReplayReport& g, const std::string& what) {
  for (const auto& k : g.checks)
    if (k.what == what) return &k;
  return nullptr;
}

inline std::string checks_text(const GraphReplayReport& g) {
  std::string s = g.not_captured;
  for (const auto& k : g.checks) s += "\n  " + k.what + ": " + (k.pass ? "pass " : k.skipped ? "skip " : "FAIL ") + k.detail;
  return s;
}

}  // namespace attnscope::testing
