// FlashInfer's SM90 FP8 kernel (include/flashinfer/attention/hopper/quantization/prefill_sm90.cuh,
// BatchFP8PrefillWithPagedKVCacheDispatched) behind the Sm90Launcher signature: Q, K and V in one
// FP8 type, the output in bf16, the params of FlashInfer's fa3 FP8 module. Included, after
// fi_sm90_kernel.cuh, only by the generated units that have FP8 lines (sm90.cmake), so the others do
// not pay for the FP8 headers.
#pragma once

#include <cuda_fp8.h>

#include <flashinfer/attention/hopper/quantization/prefill_sm90.cuh>
#include <type_traits>

#include "fi_sm90_kernel.cuh"

namespace attnscope::peers::flashinfer::sm90 {

// The additional params of FlashInfer's fa3 FP8 module (jit/attention/modules.py, fp8_enabled:
// maybe_scale_q / _k / _v float tensors, sm_scale and the scale_*_scalar fallbacks as double).
struct Fp8AdditionalParams {
  float* maybe_scale_q = nullptr;  // [num_qo_heads] or null (then scale_q_scalar)
  float* maybe_scale_k = nullptr;  // [num_kv_heads] or null
  float* maybe_scale_v = nullptr;  // [num_kv_heads] or null
  double sm_scale = 1.0;
  double scale_q_scalar = 1.0, scale_k_scalar = 1.0, scale_v_scalar = 1.0;
};

template <class T, class B>
struct AdditionalParamsOf<T, __nv_fp8_e4m3, B> {
  using type = Fp8AdditionalParams;
};
template <class T, class B>
struct AdditionalParamsOf<T, __nv_fp8_e5m2, B> {
  using type = Fp8AdditionalParams;
};

// The FP8 kernel's tile (BatchFP8PrefillWithPagedKVCacheDispatched, quantization/prefill_sm90.cuh).
template <int D>
struct Fp8Tile;
template <>
struct Fp8Tile<64> {
  static constexpr int kQ = 192, kKV = 128;
};
template <>
struct Fp8Tile<128> {
  static constexpr int kQ = 128, kKV = 128;
};
template <>
struct Fp8Tile<256> {
  static constexpr int kQ = 128, kKV = 64;
};

// The FP8 kernel (quantization/prefill_sm90.cuh) with FlashInfer's fa3 FP8 module's variant,
// DefaultFP8Attention: S = Q.K^T in FP8 wgmma, scaled by q_scale * k_scale * sm_scale; P scaled by
// the format's max (448 for e4m3) and quantised to FP8 for the P.V wgmma; O times v_scale / that max.
template <int D, class T, class F8, FiMask M, bool W>
cudaError_t launch_fp8(const Sm90Args& a, cudaStream_t stream) {
  PagedParams<T, F8> p;
  fill(a, p);
  p.additional_params.maybe_scale_q = const_cast<float*>(a.q_scale);
  p.additional_params.maybe_scale_k = const_cast<float*>(a.k_scale);
  p.additional_params.maybe_scale_v = const_cast<float*>(a.v_scale);
  p.additional_params.scale_q_scalar = a.q_scale_scalar;
  p.additional_params.scale_k_scalar = a.k_scale_scalar;
  p.additional_params.scale_v_scalar = a.v_scale_scalar;
  return fi::BatchFP8PrefillWithPagedKVCacheDispatched<D, mask_mode<M>(), W, /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
                                                       fi::DefaultFP8Attention>(p, /*enable_pdl=*/false, stream);
}

// The registry entry of one FP8 instantiation (Q, K, V in F8, O in T).
template <int D, class T, class F8, FiMask M, bool W>
Sm90Instance instance_fp8() {
  using P = PagedParams<T, F8>;
  using Traits =
      fi::FP8AttentionKernelTraits</*USE_TMA_LOAD_KV=*/false, D, Fp8Tile<D>::kQ, Fp8Tile<D>::kKV, /*NUM_STAGES=*/2,
                                   typename P::DTypeQ, typename P::DTypeKV, typename P::DTypeO, int32_t, fi::DefaultFP8Attention>;
  Sm90Instance i;
  i.head_dim = D;
  i.dtype = dtype_of<T>();
  i.fp8 = std::is_same_v<F8, __nv_fp8_e4m3> ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
  i.variant = FiVariant::kPlain;
  i.mask = M;
  i.window = W;
  i.launch = &launch_fp8<D, T, F8, M, W>;
  i.cta_q = Traits::CTA_Q;
  i.cta_kv = Traits::CTA_KV;
  i.threads = Traits::NUM_WARPS * 32;
  i.smem_bytes = sizeof(typename Traits::SharedStorage);
  return i;
}

}  // namespace attnscope::peers::flashinfer::sm90
