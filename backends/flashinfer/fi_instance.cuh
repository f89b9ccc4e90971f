// The body of the generated instance files (CMake writes fi_d<D>_<dtype>.cu from the lines of
// fi_instances.def with that head dim and dtype; each includes this header and calls the templates
// below for its lines). It is the
// only place that includes FlashInfer's kernel templates (prefill.cuh, decode.cuh): every other
// unit of the family sees the launchers through FiKernels.
//
// Per FI_PREFILL line: BatchPrefillWithPagedKVCacheDispatched for every query tile the FA2 planner
// can choose for the head dim (each dispatches FlashInfer's NUM_MMA_KV choices at run time). Per
// FI_DECODE line: BatchDecodeWithPagedKVCacheDispatched and its DecodePlan, both dispatching the GQA
// group sizes FlashInfer supports.
#pragma once

#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <type_traits>

#include "fi_params.cuh"
#include "fi_sinks.cuh"

namespace attnscope::peers::flashinfer::instance {

// The variant's DefaultAttention and the POS_ENCODING_MODE FlashInfer's JIT pairs with it
// (use_alibi is pos_encoding_mode == ALIBI there; the FA2 kernels only branch on kRoPELlama).
template <FiVariant V, bool kCustom>
struct VariantOf;
template <bool kCustom>
struct VariantOf<FiVariant::kPlain, kCustom> {
  using type = PlainVariant<kCustom>;
  static constexpr fi::PosEncodingMode kPos = fi::PosEncodingMode::kNone;
};
template <bool kCustom>
struct VariantOf<FiVariant::kAlibi, kCustom> {
  using type = AlibiVariant<kCustom>;
  static constexpr fi::PosEncodingMode kPos = fi::PosEncodingMode::kALiBi;
};
template <bool kCustom>
struct VariantOf<FiVariant::kSoftcap, kCustom> {
  using type = SoftcapVariant<kCustom>;
  static constexpr fi::PosEncodingMode kPos = fi::PosEncodingMode::kNone;
};
template <bool kCustom>
struct VariantOf<FiVariant::kSinks, kCustom> {  // the alibi variant plus the sink: its pos mode
  using type = SinkAttention<kCustom>;
  static constexpr fi::PosEncodingMode kPos = fi::PosEncodingMode::kALiBi;
};

// SAME_KV_STRIDES = true: attnscope's K and V pools have the same shape (equal head dims are all
// this table instantiates), as FlashInfer's runtime dispatch picks for identical strides.
// USE_FP16_QK_REDUCTION = false, as FlashInfer's Python default.
template <uint32_t D, class T, class KV, FiVariant V, fi::MaskMode M>
cudaError_t prefill_mask(PrefillParams<T, KV>& p, T* tmp_v, float* tmp_s, int cta_tile_q, cudaStream_t s) {
  using Var = typename VariantOf<V, M == fi::MaskMode::kCustom>::type;
  constexpr fi::PosEncodingMode kPos = VariantOf<V, M == fi::MaskMode::kCustom>::kPos;
  switch (cta_tile_q) {
    case 16:
      return fi::BatchPrefillWithPagedKVCacheDispatched<true, 16, D, D, kPos, false, M, Var, PrefillParams<T, KV>>(
          p, tmp_v, tmp_s, false, s);
    case 64:
      return fi::BatchPrefillWithPagedKVCacheDispatched<true, 64, D, D, kPos, false, M, Var, PrefillParams<T, KV>>(
          p, tmp_v, tmp_s, false, s);
    case 128:
      // FA2DetermineCtaTileQ picks 128 only for head_dim_vo < 256 (utils.cuh): not instantiated
      // beyond, like FlashInfer's own kernel-instantiation lists
      if constexpr (D < 256)
        return fi::BatchPrefillWithPagedKVCacheDispatched<true, 128, D, D, kPos, false, M, Var, PrefillParams<T, KV>>(
            p, tmp_v, tmp_s, false, s);
      break;
    default:
      break;
  }
  return cudaErrorInvalidConfiguration;  // a tile the planner never chooses for this head dim
}

template <uint32_t D, class T, class KV, FiVariant V>
cudaError_t decode(DecodeParams<T, KV>& p, T* tmp_v, float* tmp_s, cudaStream_t s) {
  using Var = typename VariantOf<V, false>::type;
  return fi::BatchDecodeWithPagedKVCacheDispatched<D, VariantOf<V, false>::kPos, Var, DecodeParams<T, KV>>(p, tmp_v, tmp_s, false,
                                                                                                           s);
}

// DecodePlan with the work estimation of the decode kernel for the batch's GQA group size, as
// batch_decode.cu's plan does through DISPATCH_GQA_GROUP_SIZE (group sizes 1, 2, 3, 4, 6, 8, 16).
// The dispatch is spelled out here: FlashInfer's macros name flashinfer::Error, which inside this
// namespace would resolve to attnscope::peers::flashinfer.
template <uint32_t D, class T, class KV, FiVariant V>
cudaError_t decode_plan(const DecodePlanArgs& a, fi::DecodePlanInfo* info, size_t* float_bytes, size_t* int_bytes) {
  using Var = typename VariantOf<V, false>::type;
  constexpr fi::PosEncodingMode kPos = VariantOf<V, false>::kPos;
  cudaError_t st = cudaErrorInvalidValue;
  auto one = [&](auto group) {
    constexpr uint32_t kGroup = decltype(group)::value;
    auto estimate = fi::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<kGroup, D, kPos, Var, DecodeParams<T, KV>>;
    if (a.size_only) {
      st = fi::DecodePlanWorkspaceSize<D, kPos, Var, DecodeParams<T, KV>>(*float_bytes, *int_bytes, a.kv_indptr_h, a.batch_size,
                                                                          a.num_qo_heads, a.page_size, a.enable_cuda_graph,
                                                                          a.stream, estimate);
    } else {
      st = fi::DecodePlan<D, kPos, Var, DecodeParams<T, KV>>(a.float_buffer, a.float_bytes, a.int_buffer, a.host_buffer,
                                                             a.int_bytes, *info, a.kv_indptr_h, a.batch_size, a.num_qo_heads,
                                                             a.page_size, a.enable_cuda_graph, a.stream, estimate);
    }
  };
  switch (a.num_qo_heads / a.num_kv_heads) {
    case 1:
      one(std::integral_constant<uint32_t, 1>{});
      break;
    case 2:
      one(std::integral_constant<uint32_t, 2>{});
      break;
    case 3:
      one(std::integral_constant<uint32_t, 3>{});
      break;
    case 4:
      one(std::integral_constant<uint32_t, 4>{});
      break;
    case 6:
      one(std::integral_constant<uint32_t, 6>{});
      break;
    case 8:
      one(std::integral_constant<uint32_t, 8>{});
      break;
    case 16:
      one(std::integral_constant<uint32_t, 16>{});
      break;
    default:
      break;  // refused in check() with FlashInfer's reason ("Unsupported group_size")
  }
  return st;
}

}  // namespace attnscope::peers::flashinfer::instance
