// Factory of the cudnn.sdpa backend (cudnn_sdpa.cu), used by cudnn_family.cpp.
#pragma once

#include <memory>

#include "attnscope/backend.h"

namespace attnscope::peers::cudnn {

// cuDNN's fused scaled-dot-product attention through the frontend graph API, on attnscope's own
// device workload (token-packed Q, the paged or ragged K/V pool read in place).
std::unique_ptr<Backend> make_sdpa_backend();

}  // namespace attnscope::peers::cudnn
