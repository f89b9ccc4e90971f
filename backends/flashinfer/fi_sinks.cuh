// attnscope's attention-sink variant for FlashInfer's FA2 prefill (docs/conventions.md section 12),
// written against the kernel's variant interface (variant_helper.cuh): transform_output calls
// update_m_d(params, kv_tile_idx, qo_head_idx, m, d, scale) once per row after the KV loop and the
// warps' merge, then OutputTransform per output element, and writes LSE = log2(d) + m from the same
// (m, d). The pinned headers have no sink variant of their own (FlashInfer's lives in its Python JIT).
//
// Units at that point: m is the row's running max in base 2 of the final logits (finalize_m has
// multiplied it by sm_scale_log2), d = sum_j 2^(x_j log2(e) - m), and o is the unnormalised sum. The
// sink enters as one more term 2^(s log2(e) - m) of d with no value vector, so the row's O and LSE
// become those of section 12. With split-KV each chunk writes its own (O, LSE) partial for the merge:
// the sink is folded into chunk 0's partial only, before it is rounded to the dtype, so the merge
// counts it exactly once. A row with no visible key (m = -inf) gets m = s, d = 1, O = 0: LSE = s.
#pragma once

#include <cstdint>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/math.cuh>

namespace attnscope::peers::flashinfer {

// The window-and-ALiBi DefaultAttention (both switchable at run time, fi_params.cuh AlibiVariant)
// plus the sink: one variant serves gpt-oss's sliding and full layers. Params needs maybe_sinks:
// [units, num_qo_heads] floats, natural log, in FlashInfer's logit frame (fi_conventions.h
// fi_sink_rows: the sink less ALiBi's per-unit origin shift, so that the row's softmax is attnscope's).
template <bool kCustom>
struct SinkAttention : ::flashinfer::DefaultAttention<kCustom, true, false, true> {
  using Base = ::flashinfer::DefaultAttention<kCustom, true, false, true>;
  uint32_t sink_base;  // this unit's first sink in params.maybe_sinks ([units, num_qo_heads]): 32 bits held
                       // through the KV loop, not a 64-bit pointer (the variant lives in the kernel's registers)

  template <typename Params>
  __device__ __host__ SinkAttention(const Params& params, uint32_t batch_idx, uint8_t* smem_ptr)
      : Base(params, batch_idx, smem_ptr), sink_base(batch_idx * params.num_qo_heads) {}

  // scale: what OutputTransform multiplies the unnormalised output by, one factor per row: the rescale of
  // o to the new m, 1 / d and V's scale (the default variant multiplies each element by 1 / d and V's scale;
  // a per-element rescale on top cost the sink 6% of a gpt-oss window prefill).
  template <typename Params, typename T_M>
  __device__ __forceinline__ void update_m_d(const Params& params, uint32_t kv_tile_idx, uint32_t qo_head_idx, T_M& m, float& d,
                                             float& scale) {
    namespace fm = ::flashinfer::math;
    float rescale = 1.f;
    if (!params.partition_kv || kv_tile_idx == 0) {  // chunk 0 carries the sink; another chunk's partial does not
      const float s2 = params.maybe_sinks[sink_base + qo_head_idx] * fm::log2e;
      const float m_old = static_cast<float>(m);
      if (m_old == -fm::inf) {  // no visible key in this partial: the sink alone (o is 0)
        m = T_M(s2);
        d = 1.f;
        rescale = 0.f;
      } else {
        const float m_new = fmaxf(m_old, s2);
        rescale = fm::ptx_exp2(m_old - m_new);
        d = d * rescale + fm::ptx_exp2(s2 - m_new);
        m = T_M(m_new);
      }
    }
    const float d_rcp = static_cast<float>(m) != -fm::inf ? fm::ptx_rcp(d) : 0.f;
    scale = rescale * d_rcp * Base::get_v_scale(params);
  }
  template <typename Params, typename T, typename T_M>
  __device__ __forceinline__ T OutputTransform(const Params&, T output, uint32_t, uint32_t, uint32_t, T_M&, float&, float scale) {
    return output * scale;
  }
};

}  // namespace attnscope::peers::flashinfer
