// The GPU hand-off where CUDA is compiled (gpu_handoff.h): Q / K / V hold the device workload's bits
// (make_device_workload, the bits every GPU backend sees), the int32 metadata one allocation, O and
// the LSE another; each goes to the worker as a cudaIpcMemHandle_t. IPC handles name whole cudaMalloc
// allocations, hence one allocation per shared buffer and offsets inside it. The allocations outlive
// the call (gpu_handoff_for): opening a handle is most of the hand-off's cost, so the worker keeps
// its mappings while the allocations stay the same.
#include <cuda_runtime.h>

#include <algorithm>
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

// An FP8 case's format and scales for the header: the device pools hold the FP8 values themselves (in
// the case dtype, exactly), so an adapter that runs FP8 (python.fa3's descale factors) needs the scales
// the device workload computed. Tensor and head scales only (1 or kv_heads numbers); token scales are
// left out (no adapter takes them). Null without FP8.
nlohmann::json fp8_scales(const CaseSpec& c, const cuda::DeviceWorkload& w) {
  if (!w.fp8) return nullptr;
  const char* gran = w.granularity == ScaleGranularity::kTensor ? "tensor"
                     : w.granularity == ScaleGranularity::kHead ? "head"
                                                                : "token";
  nlohmann::json f = {{"format", *w.fp8 == Fp8Format::kE4M3 ? "e4m3" : "e5m2"}, {"granularity", gran}};
  f["q_scale"] = c.fp8_attention ? nlohmann::json(w.q_scale) : nlohmann::json(nullptr);
  if (w.granularity == ScaleGranularity::kToken) return f;
  const size_t n = w.granularity == ScaleGranularity::kTensor ? 1 : static_cast<size_t>(c.num_kv_heads);
  std::vector<float> k(n), v(n);
  check(cudaMemcpy(k.data(), w.k_scale.as<void>(), n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy of the K scales");
  check(cudaMemcpy(v.data(), w.v_scale.as<void>(), n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy of the V scales");
  f["k_scale"] = k;
  f["v_scale"] = v;
  return f;
}

// The sizes that decide whether a call can reuse the previous call's allocations.
struct Sizes {
  size_t q = 0, k = 0, v = 0, meta = 0, out = 0;
  bool operator==(const Sizes&) const = default;
};

class CudaHandoff final : public GpuHandoff {
 public:
  explicit CudaHandoff(const Sizes& s, int epoch) : sizes_(s), epoch_(epoch) {
    q_.alloc(s.q);
    k_.alloc(s.k);
    v_.alloc(s.v);
    meta_.alloc(s.meta);
    out_.alloc(s.out);
  }
  const Sizes& sizes() const { return sizes_; }

  // This call's inputs into the allocations, copied from a freshly generated device workload every
  // call: a function that wrote into its inputs last call must not see its own writes.
  void fill(const CaseSpec& c, const Plan& p, const std::vector<IntArray>& meta, const std::vector<size_t>& off,
            const cuda::DeviceWorkload& w) {
    const int64_t tq = c.total_q(), kvh = c.num_kv_heads, np = p.pages.num_pages, ps = p.pages.page_size;
    const bool ragged = c.kv_cache.storage == KvStorage::kRagged, nhd = c.kv_cache.layout == KvLayout::kNHD;
    auto pool = [&](int d) -> std::vector<int64_t> {
      if (ragged) return {np * ps, kvh, d};
      return nhd ? std::vector<int64_t>{np, ps, kvh, d} : std::vector<int64_t>{np, kvh, ps, d};
    };
    if (w.k_elems != np * ps * kvh * c.head_dim_qk || w.v_elems != np * ps * kvh * c.head_dim_vo || w.q.bytes() < sizes_.q ||
        w.k.bytes() < sizes_.k || w.v.bytes() < sizes_.v)
      throw std::runtime_error("the device K / V pools do not have the host pool's shape");
    check(cudaMemcpy(q_.as<void>(), w.q.as<void>(), sizes_.q, cudaMemcpyDeviceToDevice), "cudaMemcpy of Q");
    check(cudaMemcpy(k_.as<void>(), w.k.as<void>(), sizes_.k, cudaMemcpyDeviceToDevice), "cudaMemcpy of K");
    check(cudaMemcpy(v_.as<void>(), w.v.as<void>(), sizes_.v, cudaMemcpyDeviceToDevice), "cudaMemcpy of V");
    buffers_ = nlohmann::json::array();
    const char* dt = dtype_code(c.dtype);
    buffers_.push_back(shared("q", q_, 0, dt, {tq, c.num_qo_heads, c.head_dim_qk}));
    buffers_.push_back(shared("k_cache", k_, 0, dt, pool(c.head_dim_qk)));
    buffers_.push_back(shared("v_cache", v_, 0, dt, pool(c.head_dim_vo)));
    for (size_t i = 0; i < meta.size(); ++i) {
      if (meta[i].count)
        check(cudaMemcpy(meta_.as<char>() + off[i], meta[i].data, meta[i].count * sizeof(int), cudaMemcpyHostToDevice),
              "cudaMemcpy of the metadata");
      buffers_.push_back(shared(meta[i].name, meta_, off[i], "i32", meta[i].shape));
    }
    // O then the LSE, float32; NaN until the worker writes them (never the last call's values)
    o_elems_ = static_cast<size_t>(tq) * c.num_qo_heads * c.head_dim_vo;
    lse_elems_ = static_cast<size_t>(tq) * c.num_qo_heads;
    lse_off_ = (o_elems_ * 4 + 255) / 256 * 256;
    check(cudaMemset(out_.as<void>(), 0xff, out_.bytes()), "cudaMemset of the output");
    buffers_.push_back(shared("o", out_, 0, "f32", {tq, c.num_qo_heads, c.head_dim_vo}));
    buffers_.push_back(shared("lse", out_, lse_off_, "f32", {tq, c.num_qo_heads}));
    fp8_ = fp8_scales(c, w);
    check(cudaGetDevice(&device_), "cudaGetDevice");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before the hand-off");  // the worker reads them at once
  }
  nlohmann::json header() const override {
    nlohmann::json h = {{"device", device_}, {"epoch", epoch_}, {"buffers", buffers_}};
    if (!fp8_.is_null()) h["fp8"] = fp8_;
    return h;
  }
  void download(bool with_lse, std::vector<float>* o, std::vector<float>* lse) override {
    o->resize(o_elems_);
    check(cudaMemcpy(o->data(), out_.as<void>(), o_elems_ * 4, cudaMemcpyDeviceToHost), "cudaMemcpy of O");
    lse->clear();
    if (!with_lse) return;
    lse->resize(lse_elems_);
    check(cudaMemcpy(lse->data(), out_.as<char>() + lse_off_, lse_elems_ * 4, cudaMemcpyDeviceToHost), "cudaMemcpy of the LSE");
  }

 private:
  Sizes sizes_;
  int epoch_ = 0;
  DeviceBuffer q_, k_, v_, meta_, out_;
  nlohmann::json buffers_ = nlohmann::json::array();
  nlohmann::json fp8_;  // an FP8 case's format and scales (null otherwise)
  size_t o_elems_ = 0, lse_elems_ = 0, lse_off_ = 0;
  int device_ = 0;
};

// The live hand-off and the one it replaced (kept until the worker has answered a call of the new
// epoch, so no allocation is freed while the worker may still have it mapped). Never destroyed: the
// CUDA runtime may be gone by the time static destructors run.
struct Cache {
  std::unique_ptr<CudaHandoff> live, retired;
  int epoch = 0;
};
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

GpuHandoff& handoff_for(const CaseSpec& c, const Plan& p, const std::vector<IntArray>& meta) {
  Cache& k = cache();
  k.retired.reset();  // the worker answered the call that moved it to the live epoch
  std::vector<size_t> off;
  size_t meta_bytes = 0;
  for (const auto& a : meta) {
    off.push_back(meta_bytes);
    meta_bytes += (a.count * sizeof(int) + 255) / 256 * 256;
  }
  const size_t el = dtype_bytes(c.dtype);
  const int64_t tq = c.total_q(), slots = int64_t{p.pages.num_pages} * p.pages.page_size * c.num_kv_heads;
  const size_t o_elems = static_cast<size_t>(tq) * c.num_qo_heads * c.head_dim_vo;
  Sizes s;
  s.q = static_cast<size_t>(tq) * c.num_qo_heads * c.head_dim_qk * el;
  s.k = static_cast<size_t>(slots) * c.head_dim_qk * el;
  s.v = static_cast<size_t>(slots) * c.head_dim_vo * el;
  s.meta = std::max<size_t>(meta_bytes, 256);
  s.out = (o_elems * 4 + 255) / 256 * 256 + std::max<size_t>(static_cast<size_t>(tq) * c.num_qo_heads * 4, 4);
  if (!k.live || !(k.live->sizes() == s)) {
    k.retired = std::move(k.live);
    k.live = std::make_unique<CudaHandoff>(s, ++k.epoch);
  }
  const cuda::DeviceWorkload w = cuda::make_device_workload(c, p);
  k.live->fill(c, p, meta, off, w);
  return *k.live;
}

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

GpuHandoff& gpu_handoff_for(const CaseSpec& c, const Plan& p, const std::vector<IntArray>& meta) {
  try {
    return handoff_for(c, p, meta);
  } catch (const cuda::CudaError& e) {
    throw std::runtime_error(e.what());
  }
}

}  // namespace attnscope::python
