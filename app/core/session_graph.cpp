// The session's CUDA-graph step (session.h): here rather than in cuda_graph_run.cpp, so that the
// graph code does not depend on the session that calls it.
#include "cuda_graph_run.h"
#include "session.h"

namespace attnscope {

void check_graph_replays(Session& s) {
  if (!s.spec().cuda_graph) return;
  const ResultLookup result = [&s](const std::string& id) { return s.result(id); };
  ResultList out;
  for (const auto& r : s.results) {
    if (!r.graph || !r.graph->captured || r.graph->o.empty()) {
      out.push_back(r);
      continue;
    }
    Result n = r;
    n.graph->checks.insert(n.graph->checks.begin(), real_rows_check(s.spec(), r, *r.graph, result));
    n.graph->o.clear();
    n.graph->lse.clear();
    out.push_back(std::move(n));
  }
  s.results = std::move(out);
}

}  // namespace attnscope
