// The GPU hand-off where CUDA is compiled (gpu_handoff.h): Q / K / V are the device workload's own
// allocations (make_device_workload, the bits every GPU backend sees), the int32 metadata one
// allocation, O and the LSE another; each goes to the worker as a cudaIpcMemHandle_t. IPC handles
// name whole cudaMalloc allocations, hence one allocation per shared buffer and offsets inside it.
#include <cuda_runtime.h>

#include <cstring>

#include "device_workload.h"
#include "gpu_handoff.h"

namespace attnscope::python {
namespace {

using cuda::check;
using cuda::DeviceBuffer;

std::string hex(const cudaIpcMemHandle_t& h) {
  static const char* d = "0123456789abcdef";
  std::string s;
  const auto* b = reinterpret_cast<const unsigned char*>(&h);
  for (size_t i = 0; i < sizeof h; ++i) s += {d[b[i] >> 4], d[b[i] & 15]};
  return s;
}

nlohmann::json shared(const std::string& name, const DeviceBuffer& b, size_t offset, const char* dtype,
                      std::vector<int64_t> shape) {
  cudaIpcMemHandle_t h;
  check(cudaIpcGetMemHandle(&h, b.as<void>()), ("cudaIpcGetMemHandle of " + name).c_str());
  return {{"name", name}, {"handle", hex(h)}, {"offset", offset}, {"dtype", dtype}, {"shape", shape}};
}

const char* dtype_code(DType t) { return t == DType::kFp32 ? "f32" : t == DType::kFp16 ? "f16" : "bf16"; }

class CudaHandoff final : public GpuHandoff {
 public:
  CudaHandoff(const CaseSpec& c, const Plan& p, const std::vector<IntArray>& meta) : w_(cuda::make_device_workload(c, p)) {
    const int64_t tq = c.total_q(), kvh = c.num_kv_heads, np = p.pages.num_pages, ps = p.pages.page_size;
    const bool ragged = c.kv_cache.storage == KvStorage::kRagged, nhd = c.kv_cache.layout == KvLayout::kNHD;
    auto pool = [&](int d) -> std::vector<int64_t> {
      if (ragged) return {np * ps, kvh, d};
      return nhd ? std::vector<int64_t>{np, ps, kvh, d} : std::vector<int64_t>{np, kvh, ps, d};
    };
    if (w_.k_elems != np * ps * kvh * c.head_dim_qk || w_.v_elems != np * ps * kvh * c.head_dim_vo)
      throw std::runtime_error("the device K / V pools do not have the host pool's shape");
    const char* dt = dtype_code(c.dtype);
    buffers_.push_back(shared("q", w_.q, 0, dt, {tq, c.num_qo_heads, c.head_dim_qk}));
    buffers_.push_back(shared("k_cache", w_.k, 0, dt, pool(c.head_dim_qk)));
    buffers_.push_back(shared("v_cache", w_.v, 0, dt, pool(c.head_dim_vo)));
    // the metadata: one allocation, each array 256-byte aligned
    std::vector<size_t> off;
    size_t bytes = 0;
    for (const auto& a : meta) {
      off.push_back(bytes);
      bytes += (a.count * sizeof(int) + 255) / 256 * 256;
    }
    meta_.alloc(std::max<size_t>(bytes, 256));
    for (size_t i = 0; i < meta.size(); ++i) {
      if (meta[i].count)
        check(cudaMemcpy(meta_.as<char>() + off[i], meta[i].data, meta[i].count * sizeof(int), cudaMemcpyHostToDevice),
              "cudaMemcpy of the metadata");
      buffers_.push_back(shared(meta[i].name, meta_, off[i], "i32", meta[i].shape));
    }
    // O then the LSE, float32; NaN until the worker writes them
    o_elems_ = static_cast<size_t>(tq) * c.num_qo_heads * c.head_dim_vo;
    lse_elems_ = static_cast<size_t>(tq) * c.num_qo_heads;
    lse_off_ = (o_elems_ * 4 + 255) / 256 * 256;
    out_.alloc(lse_off_ + std::max<size_t>(lse_elems_ * 4, 4));
    check(cudaMemset(out_.as<void>(), 0xff, out_.bytes()), "cudaMemset of the output");
    buffers_.push_back(shared("o", out_, 0, "f32", {tq, c.num_qo_heads, c.head_dim_vo}));
    buffers_.push_back(shared("lse", out_, lse_off_, "f32", {tq, c.num_qo_heads}));
    check(cudaGetDevice(&device_), "cudaGetDevice");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before the hand-off");  // the worker reads them at once
  }
  nlohmann::json header() const override { return {{"device", device_}, {"buffers", buffers_}}; }
  void download(bool with_lse, std::vector<float>* o, std::vector<float>* lse) override {
    o->resize(o_elems_);
    check(cudaMemcpy(o->data(), out_.as<void>(), o_elems_ * 4, cudaMemcpyDeviceToHost), "cudaMemcpy of O");
    lse->clear();
    if (!with_lse) return;
    lse->resize(lse_elems_);
    check(cudaMemcpy(lse->data(), out_.as<char>() + lse_off_, lse_elems_ * 4, cudaMemcpyDeviceToHost), "cudaMemcpy of the LSE");
  }

 private:
  cuda::DeviceWorkload w_;
  DeviceBuffer meta_, out_;
  nlohmann::json buffers_ = nlohmann::json::array();
  size_t o_elems_ = 0, lse_elems_ = 0, lse_off_ = 0;
  int device_ = 0;
};

}  // namespace

std::string gpu_handoff_unavailable() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // a missing driver is not sticky; clear it for the other backends
    return std::string("no CUDA device (") + cudaGetErrorString(e) + ")";
  }
  return n > 0 ? "" : "no CUDA device";
}

std::unique_ptr<GpuHandoff> make_gpu_handoff(const CaseSpec& c, const Plan& p, const std::vector<IntArray>& meta) {
  try {
    return std::make_unique<CudaHandoff>(c, p, meta);
  } catch (const cuda::CudaError& e) {
    throw std::runtime_error(e.what());
  }
}

}  // namespace attnscope::python
