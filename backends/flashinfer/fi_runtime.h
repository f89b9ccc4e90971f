// What flashinfer.prefill and flashinfer.decode share at run time: the lookup over the built
// instantiation table, the device and architecture check, FlashInfer's three workspaces, the
// timing loop (the same protocol as cuda.flash) and the error text of a failed launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnscope/backend.h"
#include "cuda_util.h"
#include "fi_conventions.h"

namespace attnscope::cuda {
struct DeviceWorkload;
}

namespace attnscope::peers::flashinfer {

// The built table (fi_instances.def as CMake filtered it). The table's dtype column of a case:
// "bf16" / "fp16", or "bf16_e4m3" / "bf16_e5m2" with an FP8 KV cache (FlashInfer's DTypeKV FP8
// instantiations: Q and O in the case dtype, K and V in FP8).
std::string table_dtype(const CaseSpec& c);
bool has_prefill(int head_dim, const std::string& dtype, FiVariant v, FiMask m);
bool has_decode(int head_dim, const std::string& dtype, FiVariant v);
// "64, 128, 256" for the prefill (or decode) lines of that dtype column, any variant.
std::string compiled_head_dims(const std::string& dtype, bool decode);

// FlashInfer's FP8 KV convention for its FA2 kernels, as its Python wrappers apply it
// (flashinfer/decode.py BatchDecodeWithPagedKVCacheWrapper.run and flashinfer/prefill.py
// BatchPrefillWithPagedKVCacheWrapper.run, 0.7.2.post1): `sm_scale *= k_scale` in Python floats
// (double) before the launch, and `out *= v_scale` on the dtype output after it (PyTorch's mul:
// float(out) * float(v_scale), rounded to the dtype). LSE is not touched by v_scale.
// The tensor scales of a case (1, 1 without an FP8 cache).
struct Fp8KvScales {
  double k = 1.0, v = 1.0;
};
// Read from the device workload (GPU backends get no host inputs), once, before any timed launch.
Fp8KvScales fp8_kv_scales(const CaseSpec& c, const cuda::DeviceWorkload& w);
// The result message's FP8 part: the DTypeKV instantiation and the scales as applied.
std::string fp8_note(const CaseSpec& c, const Fp8KvScales& s);
// out[i] = dtype(float(out[i]) * v_scale) on `stream`: the wrapper's `out *= v_scale`, bf16 or fp16.
void scale_output(void* out, int64_t elems, DType dt, float v_scale, cudaStream_t stream);

// Empty when device 0 can run this build's FlashInfer kernels, else why not: no device ("no CUDA
// device: ..."), or an architecture ATTNSCOPE_FLASHINFER_ARCHS did not compile for.
std::string device_refusal();

// The first problem of the case's shape for FlashInfer's FA2 kernels (dtype, head dims), with
// FlashInfer's reason where it gives one; empty when none. decode: the CUDA-core decode kernel.
std::string shape_refusal(const CaseSpec& c, bool decode);
// An FP8 KV case's refusals beyond the registry's (fp8_for: granularity, FP8 attention): the query
// dtype and the instantiated head dims; empty when fine or not FP8.
std::string fp8_refusal(const CaseSpec& c, bool decode);

// FlashInfer's workspaces as its Python wrappers allocate them: a float workspace (split-KV
// partials), an int workspace (the plan's indices, copied from the page-locked host buffer by the
// planner) and the page-locked host buffer (cudaMallocHost).
struct Workspaces {
  cuda::DeviceBuffer float_ws, int_ws;
  void* host = nullptr;
  size_t float_bytes = 0, int_bytes = 0;
  Workspaces() = default;
  Workspaces(const Workspaces&) = delete;
  Workspaces& operator=(const Workspaces&) = delete;
  ~Workspaces();
  // Sizes from FlashInfer's *PlanWorkspaceSize (at least 16 bytes each, so the pointers exist).
  void alloc(size_t float_b, size_t int_b);
};

// The GPU backends' timing protocol (cuda::time_launches, gpu_timer.h) around `once`, which
// launches only the kernels (the plan is not timed); the loop's errors checked by a device sync.
void time_launches(const RunOptions& opt, const std::function<void()>& once, Timing* t);

// Throws cuda::CudaError "kernel <what>: <error>" for a FlashInfer status that is not cudaSuccess,
// and for a pending or (sync) asynchronous fault. `what` names the kernel and its launch shape.
void check_fi_launch(cudaError_t st, const std::string& what, bool sync);

// Q rows are the units' queries in token order (FlashInfer reads them through qo_indptr, or, in
// decode, as row u of unit u): throws std::runtime_error when the plan's units are not.
void check_units_in_token_order(const CaseSpec& c, const Plan& p, const FiUnits& u);

// The units' CSR tables on the device (int32, as FlashInfer reads them).
struct DeviceUnits {
  cuda::DeviceBuffer qo_indptr, kv_indptr, kv_indices, kv_last_page_len;
};
DeviceUnits upload_units(const FiUnits& u);

// [num_qo_heads] ALiBi slopes as FlashInfer's maybe_alibi_slopes (float, attnscope's alibi_slope),
// all zero when the case has no ALiBi (the alibi variant then adds exactly 0).
std::vector<float> alibi_slopes(const CaseSpec& c);

// Output buffers in the dtype, poisoned with 0xff (NaN in fp16, bf16 and fp32) so that an element
// FlashInfer does not write shows.
struct DeviceOutputs {
  cuda::DeviceBuffer o, lse;  // [total_q, hq, head_dim_vo] dtype, [total_q, hq] float (base 2)
};
DeviceOutputs poisoned_outputs(const CaseSpec& c, int64_t total_q);

// O as floats of the dtype, LSE in natural log: FlashInfer's base-2 LSE times ln 2 (-inf stays
// -inf), plus ALiBi's position-origin shift per unit (fi_conventions.h alibi_lse_shift).
void download_outputs(const CaseSpec& c, const FiUnits& u, const std::vector<float>& slopes, const DeviceOutputs& d, Result* r);

// "sm_90" style name of a launch shape piece, e.g. "grid (18, 1, 8), block (32, 4, 1)".
std::string grid_block(dim3 grid, dim3 block);

}  // namespace attnscope::peers::flashinfer
