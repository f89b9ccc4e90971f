// Optional capability of a GPU backend: capture its launch into a CUDA graph at a bucket batch size and
// replay it for the real batch padded the way an engine pads (docs/conventions.md, "CUDA-graph
// replay"; the padding is model/include/attnscope/cuda_graph_pad.h). The session asks a backend for it
// with dynamic_cast after the backend's eager run of the real batch.
#pragma once

#include "attnscope/backend.h"
#include "attnscope/cuda_graph_pad.h"

namespace attnscope {

class GraphReplayable {
 public:
  virtual ~GraphReplayable() = default;
  // Set-up at the bucket size (metadata buffers sized for it, the plan of pad.capture with CUDA-graph
  // planning, the workspaces): no allocation or sync inside the capture, which records the launch on
  // a non-default stream. Then pad.entries' metadata is written into the same buffers, the batch is
  // re-planned into the same workspace, the output poisoned and the graph replayed. The report holds
  // the two grids, the fit verdict, the padded-row check and the real rows (the session compares
  // them with the eager run). Never throws for what it cannot do: `not_captured` says why.
  virtual GraphReplayReport capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad) = 0;
  // After the checks, this many more replays timed with CUDA events (their median goes to
  // GraphReplayReport::replay_ms); 0 = none. The session sets it when the run is timed.
  void set_graph_time_reps(int n) { graph_time_reps_ = n; }

 protected:
  int graph_time_reps_ = 0;
};

}  // namespace attnscope
