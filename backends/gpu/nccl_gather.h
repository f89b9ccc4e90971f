// The gather of partials across GPUs through NCCL (attnscope/collective.h, nccl_gather.cu), at the level
// of device buffers: what the app-facing gather_partials runs once each rank's buffers are on its GPU.
#pragma once

#include <string>
#include <vector>

#include "device_partials.h"

namespace attnscope::cuda {

// Rank r's partial on GPU `device`: o [rows, dv] and lse [rows] floats.
struct RankBuffers {
  int device = 0;
  const float* o = nullptr;
  const float* lse = nullptr;
};

// Sends every rank's buffers into `into` (a GpuPartials on GPU 0 with one slot per rank) through NCCL
// communicators over GPUs 0 .. gpus - 1 (made once per process and count, ncclCommInitAll); a rank
// already on GPU 0 is copied on GPU 0's stream. Returns the milliseconds between two CUDA events on
// GPU 0's stream around the group (every GPU synchronised first). Throws CudaError.
double nccl_gather_to(const std::vector<RankBuffers>& ranks, const GpuPartials& into, int gpus);

// "NCCL 2.28.9 from ... (the pin)": the configure-time text with the loaded library's version.
std::string nccl_library_text();

}  // namespace attnscope::cuda
