// The run-time pieces flashinfer.prefill and flashinfer.decode share (fi_runtime.h), and the lookup
// over the generated instance files.
#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "attnscope/mask.h"
#include "device_check.h"
#include "device_workload.h"
#include "fi_params.cuh"
#include "fi_runtime.h"
#include "gpu_timer.h"

namespace attnscope::peers::flashinfer {

// ---- the built table ----------------------------------------------------------------------------

#define FI_UNIT(D, N, T, KV) const FiKernels<T, KV>& fi_kernels_d##D##_##N();
#include "fi_units_built.def"
#undef FI_UNIT

namespace {

// &k when the unit's types (U, UKV) are the asked-for (T, KV) (the built list mixes dtypes).
template <class T, class KV, class U, class UKV>
const FiKernels<T, KV>* if_dtype(const FiKernels<U, UKV>& k) {
  if constexpr (std::is_same_v<T, U> && std::is_same_v<KV, UKV>)
    return &k;
  else
    return nullptr;
}

template <class T, class KV = T>
const FiKernels<T, KV>* lookup(int head_dim) {
#define FI_UNIT(D, N, T_, KV_) \
  if (head_dim == D)           \
    if (const FiKernels<T, KV>* k = if_dtype<T, KV>(fi_kernels_d##D##_##N())) return k;
#include "fi_units_built.def"
#undef FI_UNIT
  (void)head_dim;
  return nullptr;
}

}  // namespace

template <>
const FiKernels<nv_bfloat16, __nv_fp8_e4m3>* find_fp8_kernels<__nv_fp8_e4m3>(int head_dim) {
  return lookup<nv_bfloat16, __nv_fp8_e4m3>(head_dim);
}
template <>
const FiKernels<nv_bfloat16, __nv_fp8_e5m2>* find_fp8_kernels<__nv_fp8_e5m2>(int head_dim) {
  return lookup<nv_bfloat16, __nv_fp8_e5m2>(head_dim);
}

template <>
const FiKernels<nv_bfloat16>* find_kernels<nv_bfloat16>(int head_dim) {
  return lookup<nv_bfloat16>(head_dim);
}
template <>
const FiKernels<half>* find_kernels<half>(int head_dim) {
  return lookup<half>(head_dim);
}

namespace {

struct Line {
  bool decode;
  int head_dim;
  const char* dtype;    // "bf16" / "fp16" / "bf16_e4m3" / "bf16_e5m2"
  const char* variant;  // "plain" / "alibi" / "softcap"
  const char* mask;     // prefill: "none" / "causal" / "custom"; decode: ""
};

const std::vector<Line>& lines() {
  static const std::vector<Line> l = {
#define FI_PREFILL(D, N, V, M) {false, D, #N, #V, #M},
#define FI_DECODE(D, N, V) {true, D, #N, #V, ""},
#include "fi_instances_built.def"
#undef FI_PREFILL
#undef FI_DECODE
  };
  return l;
}

bool matches(const Line& l, bool decode, int head_dim, const std::string& dtype, FiVariant v) {
  return l.decode == decode && l.head_dim == head_dim && l.dtype == dtype && std::string(l.variant) == fi_variant_name(v);
}

}  // namespace

std::string table_dtype(const CaseSpec& c) {
  std::string s = c.dtype == DType::kBf16 ? "bf16" : c.dtype == DType::kFp16 ? "fp16" : "fp32";
  if (c.fp8_kv()) s += *c.kv_cache.fp8 == Fp8Format::kE4M3 ? "_e4m3" : "_e5m2";
  return s;
}

bool has_prefill(int head_dim, const std::string& dtype, FiVariant v, FiMask m) {
  for (const Line& l : lines())
    if (matches(l, false, head_dim, dtype, v) && std::string(l.mask) == fi_mask_name(m)) return true;
  return false;
}

bool has_decode(int head_dim, const std::string& dtype, FiVariant v) {
  for (const Line& l : lines())
    if (matches(l, true, head_dim, dtype, v)) return true;
  return false;
}

std::string compiled_head_dims(const std::string& dtype, bool decode) {
  std::set<int> dims;
  for (const Line& l : lines())
    if (l.decode == decode && l.dtype == dtype) dims.insert(l.head_dim);
  std::string s;
  for (int d : dims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s.empty() ? "none" : s;
}

// ---- device and shape checks --------------------------------------------------------------------

namespace {

// Does one entry of CMAKE-style architectures ("90-real", "80", "90-virtual", "90a-real") give
// code that runs on compute capability cc (major * 10 + minor)? SASS runs on its major version
// with an equal or newer minor; PTX is compiled by the driver for any newer device; arch-specific
// ("a") code runs on its own capability only.
bool arch_runs(const std::string& entry, int cc) {
  if (entry == "all" || entry == "all-major" || entry == "native") return true;
  const size_t dash = entry.find('-');
  std::string num = entry.substr(0, dash);
  const std::string kind = dash == std::string::npos ? "" : entry.substr(dash + 1);
  const bool specific = !num.empty() && (num.back() == 'a' || num.back() == 'f');
  if (specific) num.pop_back();
  int a = 0;
  try {
    a = std::stoi(num);
  } catch (...) {
    return false;
  }
  if (specific) return cc == a;
  const bool sass = kind.empty() || kind == "real", ptx = kind.empty() || kind == "virtual";
  return (sass && cc / 10 == a / 10 && cc >= a) || (ptx && cc >= a);
}

}  // namespace

std::string device_refusal() {
  if (auto why = cuda::device_check(); !why.empty()) return why;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "no CUDA device: cudaGetDeviceProperties failed";
  const int cc = prop.major * 10 + prop.minor;
  if (cc < 80)
    return std::string("device 0 (") + prop.name + ") is sm_" + std::to_string(cc) +
           ": FlashInfer's FA2 kernels need sm_80 or newer (bf16 tensor cores, cp.async)";
  std::string archs = ATTNSCOPE_FLASHINFER_ARCHS_TEXT;
  std::stringstream ss(archs);
  // CMake's list, its ';' written as ','
  for (std::string e; std::getline(ss, e, ',');)
    if (arch_runs(e, cc)) return "";
  return "this build compiled the flashinfer.prefill / flashinfer.decode kernels for " + archs +
         " (ATTNSCOPE_FLASHINFER_ARCHS); device 0 (" + prop.name + ") is sm_" + std::to_string(cc) +
         ": reconfigure with -DATTNSCOPE_FLASHINFER_ARCHS=" + std::to_string(cc) + "-real";
}

std::string shape_refusal(const CaseSpec& c, bool decode) {
  const std::string kind = decode ? "flashinfer.decode" : "flashinfer.prefill";
  if (c.dtype == DType::kFp32)
    return decode ? "dtype fp32: flashinfer.decode instantiates fp16 and bf16 only (FlashInfer's wrappers run the decode "
                    "kernel on 16-bit or fp8 inputs)"
                  : "dtype fp32: FlashInfer's FA2 prefill takes fp16/bf16 queries only (prefill.cuh: "
                    "static_assert(sizeof(DTypeQ) == 2))";
  if (!decode && c.head_dim_vo < 64)
    return "head_dim_vo " + std::to_string(c.head_dim_vo) +
           " < 64: FlashInfer's FA2 prefill rejects it (KernelTraits::IsInvalid, NUM_MMA_D_VO < 4: \"FlashInfer Internal "
           "Error: Invalid configuration\", flashinfer#1048); cuda.flash_padded runs the zero-padding workaround";
  if (c.head_dim_qk != c.head_dim_vo)
    return decode ? "head_dim qk " + std::to_string(c.head_dim_qk) + " != vo " + std::to_string(c.head_dim_vo) +
                        ": FlashInfer: \"CUDA cores template only supports equal head dim for QK and VO, please use tensor "
                        "cores template for different head dim\""
                  : "head_dim qk " + std::to_string(c.head_dim_qk) + " != vo " + std::to_string(c.head_dim_vo) +
                        ": not instantiated (fi_instances.def has equal head dims only)";
  if (auto why = fp8_refusal(c, decode); !why.empty()) return why;
  const bool have = c.fp8_kv()                ? true
                    : c.dtype == DType::kBf16 ? find_kernels<nv_bfloat16>(c.head_dim_qk) != nullptr
                                              : find_kernels<half>(c.head_dim_qk) != nullptr;
  if (!have)
    return "head_dim " + std::to_string(c.head_dim_qk) + " is not instantiated in this build (" + kind + " " +
           dtype_name(c.dtype) + ": " + compiled_head_dims(table_dtype(c), decode) + ")";
  if (decode) {
    const int g = c.group_size();
    if (g != 1 && g != 2 && g != 3 && g != 4 && g != 6 && g != 8 && g != 16)
      return "GQA group size " + std::to_string(g) +
             ": FlashInfer's CUDA-core decode dispatches group sizes 1, 2, 3, 4, 6, 8, 16 only (DISPATCH_GQA_GROUP_SIZE: "
             "\"Unsupported group_size: " +
             std::to_string(g) + "\")";
  }
  return "";
}

std::string fp8_refusal(const CaseSpec& c, bool decode) {
  if (!c.fp8_kv()) return "";
  const std::string kind = decode ? "flashinfer.decode" : "flashinfer.prefill";
  const std::string kv = fp8_name(*c.kv_cache.fp8);
  if (c.dtype != DType::kBf16)
    return std::string("dtype ") + dtype_name(c.dtype) + " with an " + kv + " KV cache is not instantiated in this build (" +
           kind + " instantiates FlashInfer's FP8 KV kernels with bf16 queries and output only, fi_instances.def)";
  const bool have = *c.kv_cache.fp8 == Fp8Format::kE4M3 ? find_fp8_kernels<__nv_fp8_e4m3>(c.head_dim_qk) != nullptr
                                                        : find_fp8_kernels<__nv_fp8_e5m2>(c.head_dim_qk) != nullptr;
  bool line = false;  // a line of this kind (prefill or decode) for the head dim, not only the unit
  for (const Line& l : lines()) line = line || (l.decode == decode && l.head_dim == c.head_dim_qk && l.dtype == table_dtype(c));
  const std::string dims = compiled_head_dims(table_dtype(c), decode);
  if (!have || !line)
    return "head_dim " + std::to_string(c.head_dim_qk) + " with an " + kv + " KV cache is not instantiated in this build (" +
           kind + " bf16 / " + kv + ": head dims " + dims + ", fi_instances.def)";
  return "";
}

Fp8KvScales fp8_kv_scales(const CaseSpec& c, const cuda::DeviceWorkload& w) {
  Fp8KvScales s;
  if (!c.fp8_kv()) return s;
  // tensor granularity (the registry refuses the others from the descriptor): one float each,
  // handed to Python as a float and widened to double there
  if (w.granularity != ScaleGranularity::kTensor || w.k_scale.bytes() < sizeof(float) || w.v_scale.bytes() < sizeof(float))
    throw std::runtime_error("FlashInfer's FA2 FP8 path takes one K and one V scale (tensor granularity)");
  s.k = static_cast<double>(w.k_scale.to_host<float>(1)[0]);
  s.v = static_cast<double>(w.v_scale.to_host<float>(1)[0]);
  return s;
}

std::string fp8_note(const CaseSpec& c, const Fp8KvScales& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "k_scale %.9g folded into sm_scale, out *= v_scale %.9g after the kernel", s.k, s.v);
  return std::string("FP8 KV: DTypeKV __nv_fp8_") + (*c.kv_cache.fp8 == Fp8Format::kE4M3 ? "e4m3" : "e5m2") +
         " (FlashInfer's wrapper convention: " + buf + ")";
}

namespace {

template <class T>
__global__ void scale_output_kernel(T* o, int64_t n, float s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    o[i] = static_cast<T>(static_cast<float>(o[i]) * s);
}

}  // namespace

void scale_output(void* out, int64_t elems, DType dt, float v_scale, cudaStream_t stream) {
  if (elems <= 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((elems + threads - 1) / threads, 4096));
  if (dt == DType::kBf16)
    scale_output_kernel<<<blocks, threads, 0, stream>>>(static_cast<nv_bfloat16*>(out), elems, v_scale);
  else
    scale_output_kernel<<<blocks, threads, 0, stream>>>(static_cast<half*>(out), elems, v_scale);
}

// ---- workspaces, timing, errors -----------------------------------------------------------------

Workspaces::~Workspaces() {
  if (host) cudaFreeHost(host);
}

void Workspaces::alloc(size_t float_b, size_t int_b) {
  float_bytes = std::max<size_t>(float_b, 16);
  int_bytes = std::max<size_t>(int_b, 16);
  float_ws.alloc(float_bytes);
  int_ws.alloc(int_bytes);
  if (host) cudaFreeHost(host);
  host = nullptr;
  cuda::check(cudaMallocHost(&host, int_bytes), "cudaMallocHost (FlashInfer's page-locked int workspace)");
}

void time_launches(const RunOptions& opt, const std::function<void()>& once, Timing* t) {
  cuda::time_launches(
      opt, once, [] { cuda::check(cudaDeviceSynchronize(), "benchmark loop"); }, t);
}

void check_fi_launch(cudaError_t st, const std::string& what, bool sync) {
  cudaError_t e = st;
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e == cudaSuccess && sync) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) throw cuda::CudaError("kernel " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

std::string grid_block(dim3 g, dim3 b) {
  return "grid (" + std::to_string(g.x) + ", " + std::to_string(g.y) + ", " + std::to_string(g.z) + "), block (" +
         std::to_string(b.x) + ", " + std::to_string(b.y) + ", " + std::to_string(b.z) + ")";
}

// ---- inputs and outputs -------------------------------------------------------------------------

void check_units_in_token_order(const CaseSpec& c, const Plan& p, const FiUnits& u) {
  const std::vector<int64_t> first = unit_first_tokens(c, p);
  for (size_t i = 0; i < first.size(); ++i)
    if (first[i] != u.qo_indptr[i])
      throw std::runtime_error("unit " + std::to_string(i) + " starts at token " + std::to_string(first[i]) + ", not " +
                               std::to_string(u.qo_indptr[i]) + ": the plan's units are not contiguous in token order");
  if (u.total_q != c.total_q()) throw std::runtime_error("the plan's units do not cover every query");
}

DeviceUnits upload_units(const FiUnits& u) {
  DeviceUnits d;
  d.qo_indptr = cuda::DeviceBuffer::from(u.qo_indptr);
  d.kv_indptr = cuda::DeviceBuffer::from(u.kv_indptr);
  // FlashInfer may form (never dereference) the address one past the indices: keep one element
  d.kv_indices = cuda::DeviceBuffer::from(u.kv_indices.empty() ? std::vector<int>{0} : u.kv_indices);
  d.kv_last_page_len = cuda::DeviceBuffer::from(u.kv_last_page_len);
  return d;
}

std::vector<float> alibi_slopes(const CaseSpec& c) {
  std::vector<float> s(c.num_qo_heads, 0.0f);
  if (c.attention.alibi)
    for (int h = 0; h < c.num_qo_heads; ++h) s[h] = static_cast<float>(alibi_slope(h, c.num_qo_heads));
  return s;
}

DeviceOutputs poisoned_outputs(const CaseSpec& c, int64_t total_q) {
  DeviceOutputs d;
  d.o.alloc(std::max<int64_t>(total_q, 1) * c.num_qo_heads * c.head_dim_vo * dtype_bytes(c.dtype));
  d.lse.alloc(std::max<int64_t>(total_q, 1) * c.num_qo_heads * sizeof(float));
  cuda::check(cudaMemset(d.o.as<void>(), 0xff, d.o.bytes()), "cudaMemset (poison O)");
  cuda::check(cudaMemset(d.lse.as<void>(), 0xff, d.lse.bytes()), "cudaMemset (poison LSE)");
  return d;
}

void download_outputs(const CaseSpec& c, const FiUnits& u, const std::vector<float>& slopes, const DeviceOutputs& d, Result* r) {
  const int Hq = c.num_qo_heads;
  r->o = cuda::download_as_float(d.o, u.total_q * Hq * c.head_dim_vo, c.dtype);
  r->lse = d.lse.to_host<float>(static_cast<size_t>(u.total_q * Hq));
  for (size_t i = 0; i + 1 < u.qo_indptr.size(); ++i)
    for (int64_t t = u.qo_indptr[i]; t < u.qo_indptr[i + 1]; ++t)
      for (int h = 0; h < Hq; ++h) {
        float& l = r->lse[t * Hq + h];
        l = lse2_to_natural(l);
        // ALiBi: FlashInfer's positions are relative to the unit (fi_conventions.h); a fully masked
        // row keeps -inf
        if (c.attention.alibi && std::isfinite(l))
          l = static_cast<float>(l + alibi_lse_shift(slopes[h], u.kv_begin[i], u.q_abs_first[i]));
      }
}

}  // namespace attnscope::peers::flashinfer
