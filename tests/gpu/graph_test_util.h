// What the CUDA-graph GPU tests share: a session result's graph report, one of its checks by name,
// and the report as text for failure messages.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "attnscope/graph_replay.h"
#include "session.h"

namespace attnscope::testing {

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
