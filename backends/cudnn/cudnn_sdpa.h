// Factories of the cudnn backends (cudnn_sdpa.cu, cudnn_sdpa_fp8.cu), used by family.cpp.
#pragma once

#include <memory>

#include "attnscope/backend.h"

namespace attnscope::peers::cudnn {

// cuDNN's fused scaled-dot-product attention through the frontend graph API, on attnscope's own
// device workload (token-packed Q, the paged or ragged K/V pool read in place).
std::unique_ptr<Backend> make_sdpa_backend();

// cuDNN's FP8 SDPA forward on FP8 attention cases (cudnn_sdpa_fp8.cu).
std::unique_ptr<Backend> make_sdpa_fp8_backend();

}  // namespace attnscope::peers::cudnn
