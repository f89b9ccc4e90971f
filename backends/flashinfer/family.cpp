// The flashinfer family: FlashInfer's own kernels and planner, compiled from the pinned wheel's
// headers. The descriptor is compiled in every build; the backends and planner only where found.
#include "attnscope/backend.h"
#include "fi_library_plan.h"
#include "fi_script.h"
#if ATTNSCOPE_FAMILY_COMPILED
#include "fi_backends.h"
#endif

namespace attnscope {

BackendFamily flashinfer_family() {
  using E = Expressions;
  BackendFamily f;
  f.name = "flashinfer";
  f.backends = {
      {"flashinfer.prefill", "FlashInfer FA2 batch prefill (BatchPrefillWithPagedKVCacheDispatched) planned by its PrefillPlan",
       "bf16 / fp16, the head dims of fi_instances.def, paged or ragged KV, causal / window / chunked local (as vLLM's "
       "virtual batches), a mask_mod or a speculative tree (tree_parents) as its custom mask, soft-cap / ALiBi score_mods; "
       "attention sinks (bf16, head dims 64 / 128) through attnscope's sink variant of its kernel; an FP8 KV cache (bf16 "
       "queries) with "
       "tensor scales, FlashInfer's k_scale / v_scale convention; FlashInfer's own plan",
       E::kFull, E::kLowered, true, true, true, Role::kNone, fp8_bit(ScaleGranularity::kTensor)},
      {"flashinfer.prefill_sm90",
       "FlashInfer Hopper paged prefill (prefill_sm90.cuh: wgmma, TMA, warp-specialised) planned by PrefillSM90Plan",
       "bf16 / fp16 on sm_90, the head dims of fi_sm90_instances.def, paged KV, causal / window, soft-cap; FP8 attention "
       "(Q, K, V in e4m3, bf16 output) with tensor or per-head scales through its FP8 kernel "
       "(BatchFP8PrefillWithPagedKVCacheDispatched); FlashInfer's own plan",
       E::kNone, E::kLowered, true, true, true, Role::kNone,
       fp8_bit(ScaleGranularity::kTensor) | fp8_bit(ScaleGranularity::kHead), true},
      {"flashinfer.decode", "FlashInfer CUDA-core batch decode (BatchDecodeWithPagedKVCacheDispatched) planned by its DecodePlan",
       "single-token queries, bf16 / fp16, the head dims of fi_instances.def, paged KV, window, soft-cap / ALiBi; an FP8 KV "
       "cache (bf16 queries) with tensor scales, FlashInfer's k_scale / v_scale convention; FlashInfer's own plan",
       E::kNone, E::kLowered, true, true, true, Role::kNone, fp8_bit(ScaleGranularity::kTensor)},
      {"flashinfer.mla", "FlashInfer MLA decode (mla.cuh BatchMLAPagedAttention, FA2 style) planned by its MLAPlan",
       "absorbed MLA (kv_lora_rank 512, rope_dim 64) in bf16 / fp16 on sm_80+, paged or ragged latent cache, causal or not; "
       "no window, mask or score variant, sinks, trees or FP8; FlashInfer's own MLA plan",
       E::kNone, E::kNone, true, false, true, Role::kNone, 0},
      {"flashinfer.mla_sm90", "FlashInfer Hopper MLA decode (mla_hopper.cuh BatchMLAPageAttentionHopper) planned by its MLAPlan",
       "absorbed MLA (kv_lora_rank 512, rope_dim 64) in bf16 / fp16 on sm_90, paged or ragged latent cache, causal or not; "
       "no window, mask or score variant, sinks, trees or FP8; FlashInfer's own MLA plan",
       E::kNone, E::kNone, true, false, true, Role::kNone, 0},
  };
  f.backends[0].trees = true;        // flashinfer.prefill: a tree's mask bits go in as its custom mask (choose_mask)
  f.backends[0].sinks = true;        // ... and sinks through attnscope's SinkAttention variant (fi_sinks.cuh)
  f.backends[3].mla = kMlaAbsorbed;  // flashinfer.mla / mla_sm90: the absorbed form only
  f.backends[4].mla = kMlaAbsorbed;
  f.library_plan = [](const CaseSpec& c, const std::vector<WorkUnit>& units, LibraryPlans* out) {
    out->flashinfer = flashinfer_library_plan(c, units);
    out->flashinfer_mla = flashinfer_mla_library_plan(c, units);
  };
  f.script_part = peers::flashinfer::script_part;  // host code: scripts export from any build
#if ATTNSCOPE_FAMILY_COMPILED
  f.compiled = true;
  f.note = ATTNSCOPE_FLASHINFER_PIN;  // the pinned flashinfer-python wheel whose headers were compiled
  f.pin = ATTNSCOPE_FLASHINFER_PIN;
  f.make = [](const std::string& id) -> std::unique_ptr<Backend> {
    if (id == "flashinfer.prefill") return peers::flashinfer::make_prefill_backend();
    if (id == "flashinfer.prefill_sm90") return peers::flashinfer::make_prefill_sm90_backend();
    if (id == "flashinfer.mla" || id == "flashinfer.mla_sm90")
      return peers::flashinfer::make_mla_backend(id == "flashinfer.mla_sm90");
    return peers::flashinfer::make_decode_backend();
  };
#else
  f.note = ATTNSCOPE_FAMILY_WHY;
#endif
  return f;
}

}  // namespace attnscope
