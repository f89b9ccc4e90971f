// attnscope's stand-in for the two PyTorch error checks flash_fwd_launch_template.h uses: a failed
// CUDA call or launch throws (never aborts), and the backend turns it into an error status.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace attnscope::peers::flash_attn {
[[noreturn]] inline void cuda_failed(cudaError_t e, const char* what) {
  throw std::runtime_error(std::string("FlashAttention-2: ") + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                           ")");
}
}  // namespace attnscope::peers::flash_attn

#define C10_CUDA_CHECK(EXPR)                                                       \
  do {                                                                             \
    const cudaError_t _e = (EXPR);                                                 \
    if (_e != cudaSuccess) ::attnscope::peers::flash_attn::cuda_failed(_e, #EXPR); \
  } while (0)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
