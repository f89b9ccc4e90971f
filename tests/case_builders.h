// Small hand-made cases several test files build the same way: requests from (q_len, kv_len) pairs, the
// CUDA-graph form of such a batch, and validate_case's refusal as "path: rule".
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "attnscope/case_spec.h"

namespace attnscope::testing {

using QKv = std::vector<std::pair<int, int>>;

// One request per (q_len, kv_len) pair, appended to c's.
inline void add_requests(CaseSpec& c, const QKv& q_kv) {
  for (auto [q, kv] : q_kv) {
    RequestSpec r;
    r.q_len = q;
    r.kv_len = kv;
    c.requests.push_back(r);
  }
}

// The batch `q_kv` on pages of `page_size`, captured under engine e's CUDA-graph rules at `bucket`
// (split.cuda_graph on); cpu.reference runs it. The caller sets the shape (head dims, MLA, ...).
inline CaseSpec graph_case(const QKv& q_kv, int page_size, int bucket, GraphEngine e) {
  CaseSpec c;
  c.backends = {"cpu.reference"};
  c.kv_cache.page_size = page_size;
  c.split.cuda_graph = true;
  c.cuda_graph = CudaGraphSpec{bucket, e};
  add_requests(c, q_kv);
  return c;
}

// validate_case's refusal of c as "path: rule", "" when valid.
inline std::string rule_of(const CaseSpec& c) {
  try {
    validate_case(c);
  } catch (const CaseError& e) {
    return e.path() + ": " + e.rule();
  }
  return "";
}

}  // namespace attnscope::testing
