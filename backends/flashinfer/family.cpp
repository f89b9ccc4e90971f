// The flashinfer family: FlashInfer's own kernels and planner, compiled from the pinned wheel's
// headers. The descriptor is compiled in every build; the backends and planner only where found.
#include "attnscope/backend.h"
#include "fi_library_plan.h"
#include "fi_script.h"
#include "fi_topk.h"
#if ATTNSCOPE_FAMILY_COMPILED
#include "attnscope/merge.h"
#include "fi_backends.h"
#include "fi_merge.h"
#endif

namespace attnscope {

BackendFamily flashinfer_family() {
  using E = Expressions;
  BackendFamily f;
  f.name = "flashinfer";
  // Every backend runs FlashInfer's own plan (library_plan) and is timed by default.
  f.backends = {
      {.id = "flashinfer.prefill",
       .summary = "FlashInfer FA2 batch prefill (BatchPrefillWithPagedKVCacheDispatched) planned by its PrefillPlan",
       .takes = "bf16 / fp16, the head dims of fi_instances.def, paged or ragged KV, causal / window / chunked local (as "
                "vLLM's virtual batches), a mask_mod or a speculative tree (tree_parents) as its custom mask, soft-cap / "
                "ALiBi score_mods; attention sinks (bf16, head dims 64 / 128) through attnscope's sink variant of its "
                "kernel; an FP8 KV cache (bf16 queries) with tensor scales, FlashInfer's k_scale / v_scale convention; "
                "FlashInfer's own plan",
       .mask_mod = E::kFull,
       .score_mod = E::kLowered,
       .gpu = true,
       .bench_default = true,
       .library_plan = true,
       .fp8_kv_scales = fp8_bit(ScaleGranularity::kTensor),
       .sinks = true,   // through attnscope's SinkAttention variant (fi_sinks.cuh)
       .trees = true},  // a tree's mask bits go in as its custom mask (choose_mask)
      {.id = "flashinfer.prefill_sm90",
       .summary = "FlashInfer Hopper paged prefill (prefill_sm90.cuh: wgmma, TMA, warp-specialised) planned by PrefillSM90Plan",
       .takes = "bf16 / fp16 on sm_90, the head dims of fi_sm90_instances.def, paged KV, causal / window, soft-cap; FP8 "
                "attention (Q, K, V in e4m3, bf16 output) with tensor or per-head scales through its FP8 kernel "
                "(BatchFP8PrefillWithPagedKVCacheDispatched); FlashInfer's own plan",
       .score_mod = E::kLowered,
       .gpu = true,
       .bench_default = true,
       .library_plan = true,
       .fp8_kv_scales = fp8_bit(ScaleGranularity::kTensor) | fp8_bit(ScaleGranularity::kHead),
       .fp8_attention = true},
      {.id = "flashinfer.decode",
       .summary = "FlashInfer CUDA-core batch decode (BatchDecodeWithPagedKVCacheDispatched) planned by its DecodePlan",
       .takes = "single-token queries, bf16 / fp16, the head dims of fi_instances.def, paged KV, window, soft-cap / ALiBi; "
                "an FP8 KV cache (bf16 queries) with tensor scales, FlashInfer's k_scale / v_scale convention; "
                "FlashInfer's own plan",
       .score_mod = E::kLowered,
       .gpu = true,
       .bench_default = true,
       .library_plan = true,
       .fp8_kv_scales = fp8_bit(ScaleGranularity::kTensor)},
      // the MLA kernels: the absorbed form only, not timed by default
      {.id = "flashinfer.mla",
       .summary = "FlashInfer MLA decode (mla.cuh BatchMLAPagedAttention, FA2 style) planned by its MLAPlan",
       .takes = "absorbed MLA (kv_lora_rank 512, rope_dim 64) in bf16 / fp16 on sm_80+, paged or ragged latent cache, "
                "causal or not; DeepSeek sparse attention (/sparse) through a page table of page size 1, as the engines "
                "feed it; no window, mask or score variant, sinks, trees or FP8; FlashInfer's own MLA plan",
       .gpu = true,
       .library_plan = true,
       .mla = kMlaAbsorbed,
       .sparse = SparseRun::kGathered},
      {.id = "flashinfer.mla_sm90",
       .summary = "FlashInfer Hopper MLA decode (mla_hopper.cuh BatchMLAPageAttentionHopper) planned by its MLAPlan",
       .takes = "absorbed MLA (kv_lora_rank 512, rope_dim 64) in bf16 / fp16 on sm_90, paged or ragged latent cache, "
                "causal or not; DeepSeek sparse attention (/sparse) through a page table of page size 1, as the engines "
                "feed it; no window, mask or score variant, sinks, trees or FP8; FlashInfer's own MLA plan",
       .gpu = true,
       .library_plan = true,
       .mla = kMlaAbsorbed,
       .sparse = SparseRun::kGathered},
  };
  for (auto& b : f.backends) b.lse_base = LseBase::k2;  // every FlashInfer kernel writes log2 (flashinfer #2113)
  f.library_plan = [](const CaseSpec& c, const std::vector<WorkUnit>& units, LibraryPlans* out) {
    out->flashinfer = flashinfer_library_plan(c, units);
    out->flashinfer_mla = flashinfer_mla_library_plan(c, units);
  };
  f.script_part = peers::flashinfer::script_part;     // host code: scripts export from any build
  f.gpu_top_k = peers::flashinfer::flashinfer_top_k;  // plan_stub.cpp's says why where not compiled
  f.gpu_top_k_name = "FlashInfer's top-k (topk.cuh, TopKTieBreak::Small)";
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
  f.mergers = peers::flashinfer::fi_mergers;  // cascade.cuh's MergeState / MergeStates / VariableLengthMergeStates
#else
  f.note = ATTNSCOPE_FAMILY_WHY;
#endif
  return f;
}

}  // namespace attnscope
