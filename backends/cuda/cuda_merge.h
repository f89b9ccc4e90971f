// cuda.merge: attnscope's merge of partials (partition.h's merge_partials) on the device, bit-identical
// to the host's: the same fold, weights and rounding, written once in partition.h / softmax_state.h.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "attnscope/merge.h"

namespace attnscope::cuda {

constexpr int kMaxMergeParts = 64;  // partition_rule's most ranks

// Merges P partials already on the current device: o[k] [rows, dv] and lse[k] [rows] floats (natural
// log), into o_out [rows, dv] (dtype values as floats) and lse_out [rows] (natural log); launched on
// `stream`, not waited for. Throws CudaError (P over kMaxMergeParts: std::invalid_argument).
void launch_merge_partials(const std::vector<const float*>& o, const std::vector<const float*>& lse, int64_t rows, int dv,
                           DType dt, LseBase native, LseBase read, float* o_out, float* lse_out, cudaStream_t stream);

// The Merger's run: in.on_device's buffers where they are on in.device, else in.parts uploaded to
// in.device; the merge timed by CUDA events (device_ms), O and LSE downloaded. Never throws.
MergeRun run_cuda_merge(const MergeInput& in);

// The cuda family's mergers (BackendFamily::mergers).
std::vector<Merger> cuda_mergers();

}  // namespace attnscope::cuda
