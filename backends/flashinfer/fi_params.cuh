// The parameter structs FlashInfer's FA2 templates read, declared by attnscope (FlashInfer's JIT
// generates its own from batch_prefill_customize_config.jinja / batch_decode_customize_config.jinja
// plus "additional params"; the kernels only need a type with these member names), the attention
// variants attnscope instantiates, and the launcher signature of one instantiation file.
//
// Included by the generated instance units (with prefill.cuh / decode.cuh) and by the backends
// (with scheduler.cuh only). Needs the pinned CCCL first on the include path.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/fastdiv.cuh>
#include <flashinfer/page.cuh>
#include <flashinfer/pos_enc.cuh>
#include <string>
#include <type_traits>

#include "fi_conventions.h"

namespace attnscope::peers::flashinfer {

namespace fi = ::flashinfer;

// attnscope passes int32 indices, as FlashInfer's Python wrappers do (CHECK_INPUT_TYPE dl_int32).
using FiId = int32_t;

// BatchPrefillWithPagedKVCacheDispatched's Params: the fields of FlashInfer's PagedParams plus the
// FA2 default variant's additional parameters (maybe_custom_mask, maybe_mask_indptr,
// maybe_alibi_slopes, logits_soft_cap, sm_scale, rope_rcp_scale, rope_rcp_theta). The optional
// members the kernel probes with has_member (prefix lengths for multi-item scoring, NVFP4 scale
// factors) are left out, so the kernel sees nullptr for them, as when Python passes None.
// KV: the pool's element type, T or an FP8 type (__nv_fp8_e4m3 / __nv_fp8_e5m2, FlashInfer's FP8 KV
// instantiations: Q and O stay T).
template <class T, class KV = T>
struct PrefillParams {
  using DTypeQ = T;
  using DTypeKV = KV;
  using DTypeO = T;
  using IdType = FiId;

  DTypeQ* q = nullptr;                       // [total_q, num_qo_heads, head_dim], strides below
  fi::paged_kv_t<DTypeKV, IdType> paged_kv;  // the pool, its CSR page table and last_page_len
  IdType* q_indptr = nullptr;                // [units + 1] rows of q per unit
  DTypeO* o = nullptr;                       // [total_q, num_qo_heads, head_dim]
  float* lse = nullptr;                      // [total_q, num_qo_heads], base 2
  fi::uint_fastdiv group_size;               // num_qo_heads / num_kv_heads

  uint8_t* maybe_custom_mask = nullptr;  // packed bits, little bit order, one segment per unit
  IdType* maybe_mask_indptr = nullptr;   // [units + 1] byte offset of each unit's segment
  float* maybe_alibi_slopes = nullptr;   // [num_qo_heads]
  // [units, num_qo_heads] sink logits in FlashInfer's frame (fi_sinks.cuh); read by the sinks variant only
  float* maybe_sinks = nullptr;
  double logits_soft_cap = 0.0;
  double sm_scale = 1.0;
  double rope_rcp_scale = 1.0;  // RoPE is never applied (POS_ENCODING_MODE is kNone or kALiBi)
  double rope_rcp_theta = 1.0;

  uint32_t num_qo_heads = 0;
  IdType q_stride_n = 0;                                                // elements between tokens
  IdType q_stride_h = 0;                                                // elements between heads
  uint32_t k_sf_stride_page = 0, k_sf_stride_n = 0, k_sf_stride_h = 0;  // NVFP4 only: 0
  uint32_t v_sf_stride_page = 0, v_sf_stride_n = 0, v_sf_stride_h = 0;
  int32_t window_left = -1;

  // the plan, in FlashInfer's int workspace (PrefillPlanInfo offsets)
  IdType* request_indices = nullptr;
  IdType* qo_tile_indices = nullptr;
  IdType* kv_tile_indices = nullptr;
  IdType* merge_indptr = nullptr;
  IdType* o_indptr = nullptr;
  bool* block_valid_mask = nullptr;
  IdType* kv_chunk_size_ptr = nullptr;
  uint32_t max_total_num_rows = 0;
  uint32_t* total_num_rows = nullptr;
  uint32_t padded_batch_size = 0;
  bool partition_kv = false;

  __host__ __device__ __forceinline__ uint32_t get_qo_len(uint32_t batch_idx) const {
    return q_indptr[batch_idx + 1] - q_indptr[batch_idx];
  }
  __host__ __device__ __forceinline__ uint32_t get_kv_len(uint32_t batch_idx) const { return paged_kv.get_length(batch_idx); }
};

// BatchDecodeWithPagedKVCacheDispatched's Params (FlashInfer's decode Params plus the decode
// default variant's additional parameters: maybe_alibi_slopes, logits_soft_cap, sm_scale, rope).
template <class T, class KV = T>
struct DecodeParams {
  using DTypeQ = T;
  using DTypeKV = KV;
  using DTypeO = T;
  using IdType = FiId;

  DTypeQ* q = nullptr;  // [batch, num_qo_heads, head_dim]: one query per request
  fi::paged_kv_t<DTypeKV, IdType> paged_kv;
  DTypeO* o = nullptr;
  float* lse = nullptr;  // base 2

  float* maybe_alibi_slopes = nullptr;
  double logits_soft_cap = 0.0;
  double sm_scale = 1.0;
  double rope_rcp_scale = 1.0;
  double rope_rcp_theta = 1.0;

  uint32_t padded_batch_size = 0;
  uint32_t num_qo_heads = 0;
  IdType q_stride_n = 0;
  IdType q_stride_h = 0;
  int32_t window_left = -1;
  bool enable_pdl = false;

  IdType* request_indices = nullptr;
  IdType* kv_tile_indices = nullptr;
  IdType* o_indptr = nullptr;
  IdType* kv_chunk_size_ptr = nullptr;
  bool* block_valid_mask = nullptr;
  bool partition_kv = false;

  __host__ __device__ __forceinline__ int32_t get_qo_len(int32_t) const { return 1; }
  __host__ __device__ __forceinline__ int32_t get_kv_len(int32_t batch_idx) const { return paged_kv.get_length(batch_idx); }
};

// The attention variants attnscope instantiates (fi_instances.def), as FlashInfer's default
// variant DefaultAttention<custom_mask, sliding_window, logits_soft_cap, alibi>:
//   plain    <custom, false, false, false>: no window, no soft-cap, no ALiBi (the fast path; the
//            benchmarks run it). window_left must be -1: the kernel skips KV tiles left of the
//            window from params.window_left whatever the variant says.
//   alibi    <custom, true, false, true>, POS_ENCODING_MODE kALiBi (as FlashInfer's JIT pairs them):
//            window and ALiBi both switch off at run time (window_left = -1 makes the window
//            predicate always true; zero slopes add exactly 0). Serves window-only cases too.
//   softcap  <custom, true, true, false>: soft-cap on (it cannot be switched off: cap = inf gives
//            inf * tanh(0) = NaN), window switchable.
//   sinks    attnscope's SinkAttention<custom> (fi_sinks.cuh): the alibi variant plus the sink folded
//            into the row's (m, d); window and ALiBi switchable as there. Soft-cap with sinks is refused.
// Soft-cap together with ALiBi is refused: DefaultAttention then applies sm_scale twice (the ALiBi
// branch multiplies by sm_scale, the soft-cap branch's pre-tanh scale includes it again).
template <bool kCustom>
using PlainVariant = fi::DefaultAttention<kCustom, false, false, false>;
template <bool kCustom>
using AlibiVariant = fi::DefaultAttention<kCustom, true, false, true>;
template <bool kCustom>
using SoftcapVariant = fi::DefaultAttention<kCustom, true, true, false>;

// What one generated instance file (the fi_instances.def lines of one head dim and dtype) provides.
// prefill runs FlashInfer's dispatcher for the plan's cta_tile_q, the variant and the mask mode;
// decode_plan runs DecodePlan (or DecodePlanWorkspaceSize) with the decode kernel's occupancy, which
// is why it lives beside the kernel. They return FlashInfer's status, or cudaErrorNotSupported for
// a (variant, mask) the table does not have; FlashInfer's own errors (flashinfer::Error) propagate
// as exceptions.
struct DecodePlanArgs {
  void* float_buffer = nullptr;  // device, float_bytes (unused with size_only)
  size_t float_bytes = 0;
  void* int_buffer = nullptr;   // device, int_bytes
  void* host_buffer = nullptr;  // page-locked, int_bytes
  size_t int_bytes = 0;
  FiId* kv_indptr_h = nullptr;  // [batch + 1] pages
  uint32_t batch_size = 0, num_qo_heads = 0, num_kv_heads = 0, page_size = 1;
  bool enable_cuda_graph = false;
  bool size_only = false;  // DecodePlanWorkspaceSize: fill *float_bytes_out / *int_bytes_out only
  cudaStream_t stream = nullptr;
};

template <class T, class KV = T>
struct FiKernels {
  cudaError_t (*prefill)(PrefillParams<T, KV>& p, T* tmp_v, float* tmp_s, int cta_tile_q, FiVariant v, FiMask m,
                         cudaStream_t s) = nullptr;
  cudaError_t (*decode)(DecodeParams<T, KV>& p, T* tmp_v, float* tmp_s, FiVariant v, cudaStream_t s) = nullptr;
  cudaError_t (*decode_plan)(const DecodePlanArgs& a, FiVariant v, fi::DecodePlanInfo* info, size_t* float_bytes_out,
                             size_t* int_bytes_out) = nullptr;
};

// The launchers of head_dim for dtype T; nullptr when the built table (fi_instances.def as CMake
// filtered it) has no line with that head dim and dtype. Defined in fi_runtime.cu.
template <class T>
const FiKernels<T>* find_kernels(int head_dim);
template <>
const FiKernels<nv_bfloat16>* find_kernels<nv_bfloat16>(int head_dim);
template <>
const FiKernels<half>* find_kernels<half>(int head_dim);
// The FP8-KV launchers (bf16 Q and O, KV in FP8 format KV) of head_dim; nullptr when not built.
template <class KV>
const FiKernels<nv_bfloat16, KV>* find_fp8_kernels(int head_dim);
template <>
const FiKernels<nv_bfloat16, __nv_fp8_e4m3>* find_fp8_kernels<__nv_fp8_e4m3>(int head_dim);
template <>
const FiKernels<nv_bfloat16, __nv_fp8_e5m2>* find_fp8_kernels<__nv_fp8_e5m2>(int head_dim);

// The launchers of the case's (Q, KV) types for head_dim: find_kernels for a 16-bit cache,
// find_fp8_kernels for an FP8 one.
template <class T, class KV>
const FiKernels<T, KV>* kernels_for(int head_dim) {
  if constexpr (std::is_same_v<T, KV>)
    return find_kernels<T>(head_dim);
  else
    return find_fp8_kernels<KV>(head_dim);
}

// Calls f(T{}, KV{}) with the case's Q / O type and KV pool type: (bf16, bf16), (fp16, fp16), or
// bf16 with __nv_fp8_e4m3 / __nv_fp8_e5m2 for an FP8 cache (fp8_refusal refuses the rest first).
template <class F>
decltype(auto) with_types(const CaseSpec& c, F&& f) {
  if (c.fp8_kv()) {
    if (*c.kv_cache.fp8 == Fp8Format::kE4M3) return f(nv_bfloat16{}, __nv_fp8_e4m3{});
    return f(nv_bfloat16{}, __nv_fp8_e5m2{});
  }
  if (c.dtype == DType::kBf16) return f(nv_bfloat16{}, nv_bfloat16{});
  return f(half{}, half{});
}

}  // namespace attnscope::peers::flashinfer
