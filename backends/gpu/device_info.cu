// Device discovery and the device check every GPU family shares (the GPU runtime, backends/gpu/).
#include <cuda_runtime.h>

#include "attnscope/device.h"
#include "device_check.h"

namespace attnscope {

static_assert(cudaErrorInsufficientDriver == 35 && cudaErrorNoDevice == 100, "the codes no_device_reason reads");

std::vector<DeviceProps> query_devices(std::string* why) {
  std::vector<DeviceProps> out;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    int driver = 0;      // 0: no driver loaded
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    if (why) *why = no_device_reason(e, cudaGetErrorString(e), driver, CUDART_VERSION);
    return out;
  }
  if (n == 0 && why) *why = "no CUDA device: the runtime reports 0 devices";
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceProps d;
    d.index = i;
    d.name = p.name;
    d.sm_count = p.multiProcessorCount;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
    out.push_back(d);
  }
  return out;
}

bool set_current_device(int index, std::string* why) {
  const cudaError_t e = cudaSetDevice(index);
  if (e == cudaSuccess) return true;
  cudaGetLastError();
  if (why) *why = "cudaSetDevice(" + std::to_string(index) + "): " + cudaGetErrorString(e);
  return false;
}

namespace cuda {
std::string device_check() {
  std::string why;
  const auto devs = query_devices(&why);
  if (devs.empty()) return why;
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  if (major < 8) return "device 0 has compute capability " + std::to_string(major) + ".x; attnscope's kernels need 8.0 or newer";
  return "";
}
}  // namespace cuda

}  // namespace attnscope

#include <algorithm>

#include "attnscope/plan.h"
#include "device_workload.h"

namespace attnscope {

bool device_generated_inputs(const CaseSpec& c, const Plan& p, std::vector<float>* q, std::vector<float>* k,
                             std::vector<float>* v, std::string* why) {
  if (auto w = cuda::device_check(); !w.empty()) {
    if (why) *why = w;
    return false;
  }
  cuda::DeviceWorkload w = cuda::make_device_workload(c, p);
  *q = cuda::download_as_float(w.q, w.q_elems, c.dtype);
  *k = cuda::download_as_float(w.k, w.k_elems, c.dtype);
  *v = cuda::download_as_float(w.v, w.v_elems, c.dtype);
  return true;
}

double measure_copy_bandwidth_gbps(std::string* why) {
  if (auto w = cuda::device_check(); !w.empty()) {
    if (why) *why = w;
    return 0;
  }
  const size_t bytes = size_t{1} << 30;
  cuda::DeviceBuffer a(bytes), b(bytes);
  cuda::check(cudaMemset(a.as<void>(), 1, bytes), "cudaMemset");
  cudaEvent_t e0, e1;
  cuda::check(cudaEventCreate(&e0), "cudaEventCreate");
  cuda::check(cudaEventCreate(&e1), "cudaEventCreate");
  std::vector<float> ms;
  for (int i = 0; i < 7; ++i) {
    cuda::check(cudaEventRecord(e0), "cudaEventRecord");
    cuda::check(cudaMemcpy(b.as<void>(), a.as<void>(), bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D");
    cuda::check(cudaEventRecord(e1), "cudaEventRecord");
    cuda::check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float t = 0;
    cuda::check(cudaEventElapsedTime(&t, e0, e1), "cudaEventElapsedTime");
    if (i > 1) ms.push_back(t);  // the first two warm up
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

}  // namespace attnscope
