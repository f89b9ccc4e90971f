// The flash_attn family: FlashAttention-2's forward kernels from the pinned flash-attn sdist, run
// in-process with Flash_fwd_params filled by attnscope (fa_conventions.cpp). The descriptor, the
// conventions and the num_splits planner are compiled in every build; the backends only with the
// kernel units (CMakeLists.txt says when).
#include "attnscope/backend.h"
#include "fa_planner.h"
#if ATTNSCOPE_FAMILY_COMPILED
#include "fa_backends.h"
#endif

namespace attnscope {

BackendFamily flash_attn_family() {
  using E = Expressions;
  BackendFamily f;
  f.name = "flash_attn";
  f.backends = {
      {.id = "flash_attn.varlen",
       .summary = "FlashAttention-2 varlen forward (flash_attn_varlen_func: cu_seqlens_q / cu_seqlens_k)",
       .takes = "bf16 / fp16, the compiled head dims (ATTNSCOPE_FLASH_ATTN_HEAD_DIMS; Q, K, V alike, up to 256), ragged "
                "K/V (/kv_cache/storage ragged), causal / window / none, GQA, soft-cap, ALiBi with causal, padding "
                "(pad_start: segments with seqused_k, the padding queries a segment with no key); no documents, "
                "prefix-LM, chunked local, mask_mod, sinks, trees, FP8 or MLA; the non-split prefill kernel",
       .score_mod = E::kLowered,
       .gpu = true,
       .bench_default = true},
      {.id = "flash_attn.kvcache",
       .summary = "FlashAttention-2 with a KV cache (flash_attn_with_kvcache: cache_seqlens, block table, split-KV + combine)",
       .takes = "bf16 / fp16, the compiled head dims, one q_len for every request, a contiguous cache (/kv_cache/storage "
                "ragged, copied to [batch, seqlen_k, heads, dim]) or a paged one whose page size is a multiple of 256, "
                "causal / window / none, GQA (decode swapped as FA2 does), soft-cap, ALiBi with causal; num_splits by "
                "FA2's heuristic, 1 with /split/planner off, fixed chunks with /split/planner fixed",
       .score_mod = E::kLowered,
       .gpu = true,
       .bench_default = true},
  };
  f.library_plan = [](const CaseSpec& c, const std::vector<WorkUnit>& units, LibraryPlans* out) {
    out->flash_attn = peers::flash_attn::library_plan(c, units, peers::flash_attn::planner_device(c.split.num_sms));
  };
#if ATTNSCOPE_FAMILY_COMPILED
  f.compiled = true;
  f.note = ATTNSCOPE_FLASH_ATTN_PIN;  // the pinned sdist whose kernel units were compiled
  f.pin = ATTNSCOPE_FLASH_ATTN_PIN;
  f.make = [](const std::string& id) -> std::unique_ptr<Backend> {
    return peers::flash_attn::make_backend(id == "flash_attn.varlen" ? peers::flash_attn::Api::kVarlen
                                                                     : peers::flash_attn::Api::kKvcache);
  };
#else
  f.note = ATTNSCOPE_FAMILY_WHY;
#endif
  return f;
}

#if !ATTNSCOPE_FAMILY_COMPILED
namespace peers::flash_attn {
DeviceProfile planner_device(int num_sms) { return h100_profile(num_sms, "flash_attn kernels not compiled"); }
}  // namespace peers::flash_attn
#endif

}  // namespace attnscope
