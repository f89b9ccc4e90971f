// The session's part of /cuda_graph (docs/conventions.md, "CUDA-graph replay"): after a backend's
// eager run, its capture and replay (backends/include/attnscope/graph_replay.h) or why not; after
// every backend, the replay's real rows against the eager run.
#pragma once

#include <functional>
#include <string>

#include "attnscope/backend.h"

namespace attnscope {

// A result of the run by backend id (null when the backend did not run).
using ResultLookup = std::function<const Result*(const std::string& id)>;

// Fills r->graph for a case with /cuda_graph: the backend's capture and replay, or "not captured"
// with the reason (a CPU backend, a GPU backend without the capability, an eager run that did not run).
void attach_graph_replay(const std::string& id, const CaseSpec& c, const Plan& p, Result* r);

// The "real rows" check of a captured replay `g` of `eager`: bit-identical to the eager run where the
// planner promises it (FlashInfer with a fixed split size), else the twice_lowp rule against the run's
// reference and low-precision baseline (`result`). check_graph_replays (session.h) runs it on a session.
GraphCheck real_rows_check(const CaseSpec& c, const Result& eager, const GraphReplayReport& g, const ResultLookup& result);

// `plan`'s CUDA GRAPH section: the padded batch the engine replays, entry by entry ("" without /cuda_graph).
std::string graph_pad_text(const CaseSpec& c, const Plan& p);

// The replay of one result as text lines (the CLI's report): "graph  <backend>: captured ...", the
// grids, one line per check; "" without a report.
std::string graph_report_text(const Result& r);
// "graph replay median <ms> ms (<n> replays), eager launch median <ms> ms" (timed runs)
std::string graph_time_text(const GraphReplayReport& g);

}  // namespace attnscope
