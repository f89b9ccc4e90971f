// One instantiation of FlashInfer's Hopper paged prefill (BatchPrefillWithPagedKVCacheDispatched,
// include/flashinfer/attention/hopper/prefill_sm90.cuh) behind the Sm90Launcher signature.
// Included only by the units sm90.cmake generates from fi_sm90_instances.def, which compile for
// sm_90a alone (wgmma, TMA and setmaxnreg exist nowhere else).
//
// FlashInfer's JIT declares the params struct from batch_prefill_sm90_customize_config.jinja; the
// kernel needs only a type with the member names it reads, so attnscope declares its own below
// with exactly those members. The "additional params" are FlashInfer's for the non-fp8 fa3 module
// (sm_scale and logits_soft_cap as double, as its Python passes them) minus maybe_scale_v /
// scale_v_scalar: without them get_v_scale() is 1, which is what Python's default v_scale of 1.0
// gives. The kernel probes the multi-item-scoring members with has_member; they are absent, as
// for every mask mode but kMultiItemScoring.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/attention/mask.cuh>
#include <flashinfer/cutlass_utils.cuh>
#include <type_traits>

// after the variants, as FlashInfer's generated config orders them
#include <flashinfer/attention/hopper/prefill_sm90.cuh>

#include "fi_sm90_launch.h"

namespace attnscope::peers::flashinfer::sm90 {

namespace fi = ::flashinfer;

// The tile BatchPrefillWithPagedKVCacheDispatched picks for equal head dims (CTA_Q, CTA_KV), written
// out again only to name the kernel's shape in messages: the launch itself goes through FlashInfer's
// dispatch, which makes its own choice. PrefillSM90Plan's cta_tile_q (192 for head_dim_vo 64, else
// 128) must equal CTA_Q; the backend checks that before launching.
template <int D>
struct Tile;
template <>
struct Tile<64> {
  static constexpr int kQ = 192, kKV = 96;
};
template <>
struct Tile<128> {
  static constexpr int kQ = 128, kKV = 96;
};
template <>
struct Tile<256> {
  static constexpr int kQ = 128, kKV = 32;
};

// The additional params of a (T, F8) instantiation: the 16-bit module's below for F8 = T; the FP8
// module's are specialised in fi_sm90_fp8_kernel.cuh.
template <class T, class F8, class Bf16>
struct AdditionalParamsOf {
  using type = Bf16;
};

// T: the output type (and Q / K / V's without FP8); F8: Q / K / V's FP8 type, or T.
template <class T, class F8 = T>
struct PagedParams {
  using DTypeQ = fi::cutlass_dtype_t<F8>;  // cutlass::bfloat16_t / half_t / float_e4m3_t: the GMMA selectors need them
  using DTypeKV = DTypeQ;
  using DTypeO = fi::cutlass_dtype_t<T>;
  using IdType = int32_t;

  DTypeQ* q_ptr = nullptr;
  DTypeKV* k_ptr = nullptr;
  DTypeKV* v_ptr = nullptr;
  DTypeO* o_ptr = nullptr;
  float* lse_ptr = nullptr;

  IdType* qo_tile_indices = nullptr;
  IdType* qo_indptr = nullptr;
  IdType* kv_indptr = nullptr;
  IdType* kv_indices = nullptr;
  IdType* qo_lens = nullptr;
  IdType* kv_lens = nullptr;
  IdType* head_indices = nullptr;
  IdType* work_indptr = nullptr;
  IdType* batch_indices = nullptr;

  struct Bf16AdditionalParams {
    double logits_soft_cap = 0.0;  // LogitsSoftCap: pre-tanh scale sm_scale / cap, post-tanh cap * log2(e)
    double sm_scale = 1.0;         // StandardAttention: sm_scale * log2(e) in the online softmax
  };
  using AdditionalParams = typename AdditionalParamsOf<T, F8, Bf16AdditionalParams>::type;
  AdditionalParams additional_params;

  int64_t q_stride_n = 0, k_stride_n = 0, v_stride_n = 0, o_stride_n = 0;
  int64_t q_stride_h = 0, k_stride_h = 0, v_stride_h = 0, o_stride_h = 0;
  int64_t nnz_qo = 0;
  int64_t k_page_stride = 0, v_page_stride = 0;  // paged_k_cache.stride(0) in FlashInfer's binding

  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int page_size = 0;
  int window_left = -1;
};

template <class T>
constexpr DType dtype_of() {
  return std::is_same_v<T, nv_bfloat16> ? DType::kBf16 : DType::kFp16;
}

template <FiVariant V>
using Variant = fi::DefaultAttention<V == FiVariant::kSoftcap>;  // StandardAttention / LogitsSoftCap

template <FiMask M>
constexpr fi::MaskMode mask_mode() {
  static_assert(M == FiMask::kCausal || M == FiMask::kNone, "the SM90 kernels return cudaErrorNotSupported for kCustom");
  return M == FiMask::kCausal ? fi::MaskMode::kCausal : fi::MaskMode::kNone;
}

// Sm90Args -> PagedParams, then FlashInfer's dispatch with the persistent scheduler
// (SAME_SCHEDULE_FOR_ALL_HEADS = false). FlashInfer's binding instantiates both schedulers and
// picks by plan_info.same_schedule_for_all_heads, which PrefillSM90Plan sets only beyond 4096 work
// tiles per head (over half a million queries); attnscope instantiates the one every smaller batch
// uses, halving the compile, and the backend refuses a plan that wants the other.
template <class P>
void fill(const Sm90Args& a, P& p) {
  p.q_ptr = static_cast<typename P::DTypeQ*>(const_cast<void*>(a.q));
  p.k_ptr = static_cast<typename P::DTypeKV*>(const_cast<void*>(a.k));
  p.v_ptr = static_cast<typename P::DTypeKV*>(const_cast<void*>(a.v));
  p.o_ptr = static_cast<typename P::DTypeO*>(a.o);
  p.lse_ptr = a.lse;
  p.qo_tile_indices = a.qo_tile_indices;
  p.qo_indptr = a.qo_indptr;
  p.kv_indptr = a.kv_indptr;
  p.kv_indices = const_cast<int32_t*>(a.kv_indices);
  p.qo_lens = a.qo_lens;
  p.kv_lens = a.kv_lens;
  p.head_indices = a.head_indices;
  p.work_indptr = a.work_indptr;
  p.batch_indices = a.batch_indices;
  p.additional_params.sm_scale = a.sm_scale;
  p.q_stride_n = a.q_stride_n;
  p.q_stride_h = a.q_stride_h;
  p.o_stride_n = a.o_stride_n;
  p.o_stride_h = a.o_stride_h;
  // the sparse mainloop reads V through K's page offsets (FlashInfer's binding checks that K and V
  // share page stride and stride_n); attnscope's pools have one shape, so one set of strides
  p.k_stride_n = p.v_stride_n = a.kv_stride_n;
  p.k_stride_h = p.v_stride_h = a.kv_stride_h;
  p.k_page_stride = p.v_page_stride = a.kv_page_stride;
  p.nnz_qo = a.nnz_qo;
  p.num_qo_heads = a.num_qo_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.page_size = a.page_size;
  p.window_left = a.window_left;
}

template <int D, class T, FiVariant V, FiMask M, bool W>
cudaError_t launch(const Sm90Args& a, cudaStream_t stream) {
  PagedParams<T> p;
  fill(a, p);
  p.additional_params.logits_soft_cap = a.logits_soft_cap;
  return fi::BatchPrefillWithPagedKVCacheDispatched<D, D, mask_mode<M>(), W, /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false, Variant<V>>(
      p, /*enable_pdl=*/false, stream);
}

// The registry entry of one instantiation (called by the generated unit).
template <int D, class T, FiVariant V, FiMask M, bool W>
Sm90Instance instance() {
  using P = PagedParams<T>;
  using Traits = fi::AttentionKernelTraits</*USE_TMA_LOAD_KV=*/false, D, D, Tile<D>::kQ, Tile<D>::kKV, /*NUM_STAGES=*/2,
                                           typename P::DTypeQ, typename P::DTypeKV, typename P::DTypeO, int32_t, Variant<V>>;
  Sm90Instance i;
  i.head_dim = D;
  i.dtype = dtype_of<T>();
  i.variant = V;
  i.mask = M;
  i.window = W;
  i.launch = &launch<D, T, V, M, W>;
  i.cta_q = Traits::CTA_Q;
  i.cta_kv = Traits::CTA_KV;
  i.threads = Traits::NUM_WARPS * 32;
  i.smem_bytes = sizeof(typename Traits::SharedStorage);
  return i;
}

}  // namespace attnscope::peers::flashinfer::sm90
