// CUDA-graph capture and replay of cuda.flash (graph_replay.h, docs/conventions.md "CUDA-graph
// replay"): the split kernel and the merge recorded at the bucket on fixed metadata buffers, then
// replayed for the engine's padded real batch.
#pragma once

#include <string>

#include "attnscope/graph_replay.h"
#include "flash_debug.h"

namespace attnscope::cuda {

// The Hopper kernel's code is sm_90a: it runs on compute capability 9.0 exactly (flash.cu).
bool device_is_sm90();

// Why cuda.flash does not capture this case ("" = it does).
std::string flash_graph_refusal(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad);

// GraphReplayable::capture_replay of cuda.flash; `dbg` picks the kernel as the eager run does;
// time_reps > 0: that many more replays timed (GraphReplayReport::replay_ms).
GraphReplayReport flash_capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad, const FlashDebugOptions& dbg,
                                       int time_reps);

}  // namespace attnscope::cuda
