// The python family's GPU hand-off (docs/python-backends.md, "On the GPU"): the case's inputs as
// attnscope's device workload (backends/gpu/device_workload.h) plus the metadata and an output buffer,
// each shared with the worker as a CUDA IPC handle, so the worker's PyTorch tensors are views of these
// allocations (no copy). gpu_handoff.cu where CUDA is compiled, gpu_handoff_stub.cpp elsewhere.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscope/backend.h"

namespace attnscope::python {

// An int32 metadata array of the call (the same ones the NumPy path sends).
struct IntArray {
  std::string name;
  const int* data = nullptr;
  size_t count = 0;
  std::vector<int64_t> shape;
};

class GpuHandoff {
 public:
  virtual ~GpuHandoff() = default;
  // The header's "cuda" object: {"device", "buffers": [{name, handle (hex), offset, dtype, shape}]}.
  virtual nlohmann::json header() const = 0;
  // O and (when the worker wrote one) the LSE, copied back from the output buffer. Throws on a CUDA error.
  virtual void download(bool with_lse, std::vector<float>* o, std::vector<float>* lse) = 0;
};

// "" when this build has CUDA and a device to share buffers on, else why not.
std::string gpu_handoff_unavailable();

// The device inputs of the case, its metadata and an O / LSE buffer, ready to share; throws
// std::runtime_error (a CUDA error, not enough memory). The allocations of the previous call are kept
// and refilled when this call's sizes match, so the worker's opened IPC mappings (cached by handle)
// stay valid; new allocations get a new epoch in header(), on which the worker drops its mappings. The
// replaced allocations are freed on the call after, once the worker has closed its mappings of them.
// Call with the worker's lock held; the hand-off lives until the next call.
GpuHandoff& gpu_handoff_for(const CaseSpec& c, const Plan& p, const std::vector<IntArray>& meta);

}  // namespace attnscope::python
