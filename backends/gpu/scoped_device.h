// Makes a GPU current for a scope and restores the one before: a merge or a collective on GPU g must
// not leave the caller's thread on g (its own header: cuda_util.h is in every CUDA unit).
#pragma once

#include <string>

#include "cuda_util.h"

namespace attnscope::cuda {

class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    if (device != prev_) check(cudaSetDevice(device), ("cudaSetDevice(" + std::to_string(device) + ")").c_str());
  }
  ~ScopedDevice() { cudaSetDevice(prev_); }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int prev_ = 0;
};

}  // namespace attnscope::cuda
