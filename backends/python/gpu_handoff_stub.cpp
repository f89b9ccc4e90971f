// The GPU hand-off where this build has no CUDA: the python family runs on NumPy arrays only.
#include <stdexcept>

#include "gpu_handoff.h"

namespace attnscope::python {

std::string gpu_handoff_unavailable() { return "this build of attnscope has no CUDA"; }

GpuHandoff& gpu_handoff_for(const CaseSpec&, const Plan&, const std::vector<IntArray>&) {
  throw std::runtime_error(gpu_handoff_unavailable());
}

}  // namespace attnscope::python
