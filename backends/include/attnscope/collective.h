// The partials of a context-parallel run gathered across GPUs on a real collective (issue 44): each
// rank's partial on its own GPU, all of them sent to GPU 0 through NCCL, where a device merge can run
// (MergeInput::on_device). One process drives every GPU (ncclCommInitAll). Compiled in every build:
// without CUDA or NCCL it says "not compiled: <why>" (backends/gpu/nccl_gather.cu, stub/collective_stub.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/merge.h"
#include "attnscope/result.h"

namespace attnscope {

// One rank's partial: rows of the whole case, O [rows, dv] and LSE [rows] (natural log), as
// PartitionPart holds them. Either a GPU backend's device copy (Result::device: the rank runs on that
// copy's GPU and its buffers are sent as they are) or host rows, uploaded to GPU r % n (n GPUs used).
struct RankPartial {
  const float* o = nullptr;
  const float* lse = nullptr;
  std::shared_ptr<const DeviceResultCopy> device;  // preferred where given and not dropped
};

struct GatheredPartials {
  Status status = Status::kOk;
  std::string message;                            // why not; or what ran: "NCCL 2.28.9: 4 ranks on GPUs 0-1, gathered to GPU 0"
  std::vector<std::vector<float>> o, lse;         // [ranks] in rank order, as they arrived on GPU 0
  std::vector<int> rank_gpu;                      // [ranks] the GPU each rank's partial was on
  std::shared_ptr<const DevicePartials> on_gpu0;  // the gathered buffers on GPU 0, when asked to keep them
  double collective_ms = 0;                       // the sends and receives on GPU 0's stream (CUDA events), staging excluded
  int gpus = 0;                                   // GPUs used
  std::string library;                            // "NCCL 2.28.9 from ... (the pin)", or why none
};

// "" when `ranks` partials can be gathered across GPUs here; else why not: "not compiled: NCCL not found
// (...)", "no CUDA device: ...", "fewer than 2 GPUs (1 visible): the ranks run virtually on one".
std::string gather_unavailable(int ranks);

// Gathers every rank's partial onto GPU 0 over up to max_gpus GPUs (0: every visible one, at most one per
// rank). Never throws: a failure is the status with its message. keep_on_gpu0: on_gpu0 holds the
// gathered buffers (for cuda.merge through MergeInput::on_device).
GatheredPartials gather_partials(const std::vector<RankPartial>& ranks, int64_t rows, int dv, bool keep_on_gpu0,
                                 int max_gpus = 0);

}  // namespace attnscope
