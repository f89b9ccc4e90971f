// CUDA helpers: error checks that throw (never abort) with the kernel name and launch shape, and
// an owning device buffer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnscope::cuda {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline std::string shape(dim3 g, dim3 b, size_t smem) {
  return "grid (" + std::to_string(g.x) + ", " + std::to_string(g.y) + ", " + std::to_string(g.z) + "), block (" +
         std::to_string(b.x) + ", " + std::to_string(b.y) + ", " + std::to_string(b.z) + "), " + std::to_string(smem) +
         " B shared";
}

// After a launch: the launch error at once, and (when sync) any fault the kernel raised, both
// reported with the kernel's name and launch shape.
inline void check_launch(const char* kernel, dim3 g, dim3 b, size_t smem, bool sync = true) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && sync) e = cudaDeviceSynchronize();
  if (e != cudaSuccess)
    throw CudaError(std::string("kernel ") + kernel + " with " + shape(g, b, smem) + ": " + cudaGetErrorName(e) + " (" +
                    cudaGetErrorString(e) + ")");
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { alloc(bytes); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_), owned_(o.owned_) {
    o.p_ = nullptr;
    o.n_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = o.p_;
      n_ = o.n_;
      owned_ = o.owned_;
      o.p_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }
  ~DeviceBuffer() { reset(); }
  void alloc(size_t bytes) {
    reset();
    if (bytes == 0) return;
    check(cudaMalloc(&p_, bytes), ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
    n_ = bytes;
  }
  void reset() {
    if (p_ && owned_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
    owned_ = true;
  }
  // A view of b's memory that never frees it: the owner must outlive it (a gathered DeviceWorkload
  // holds the workload it borrows from).
  static DeviceBuffer borrow(const DeviceBuffer& b) {
    DeviceBuffer v;
    v.p_ = b.p_;
    v.n_ = b.n_;
    v.owned_ = false;
    return v;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return n_; }

  template <class T>
  static DeviceBuffer from(const std::vector<T>& v) {
    DeviceBuffer b(v.size() * sizeof(T));
    if (!v.empty()) check(cudaMemcpy(b.p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
    return b;
  }
  template <class T>
  std::vector<T> to_host(size_t count) const {
    std::vector<T> v(count);
    if (count) check(cudaMemcpy(v.data(), p_, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return v;
  }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
  bool owned_ = true;
};

}  // namespace attnscope::cuda
