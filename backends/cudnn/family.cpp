// The cudnn family: cuDNN's fused attention through the frontend's graph API. The descriptor is
// compiled in every build; the backend only where cuDNN and the pinned frontend are found.
#include "attnscope/backend.h"
#if ATTNSCOPE_FAMILY_COMPILED
#include "cudnn_graph.h"
#include "cudnn_sdpa.h"
#endif

namespace attnscope {

BackendFamily cudnn_family() {
  BackendFamily f;
  f.name = "cudnn";
  f.backends = {
      // MLA's non-absorbed form is plain MHA with d_qk != d_v; the absorbed form (one 576 / 512 latent
      // head) is the registry's refusal. Sinks are SDPA's sink_token (refusal_reason: its cuDNN versions).
      // A repro script runs it as PyTorch's SDPA with the cuDNN backend.
      {.id = "cudnn.sdpa",
       .summary = "cuDNN's fused scaled-dot-product attention (frontend graph API): ragged Q/O/LSE, paged K/V through page "
                  "tables",
       .takes = "bf16 / fp16, head dims up to 256 (d_qk != d_v too: MLA's non-absorbed qk 192 / vo 128; over pages from "
                "cuDNN 9.10.2), paged or contiguous KV, causal / window / padding masks, soft-cap / ALiBi score_mods, "
                "attention sinks (cuDNN 9.13.1+)",
       .score_mod = Expressions::kLowered,
       .gpu = true,
       .bench_default = true,
       .script_sdpa_backend = "CUDNN_ATTENTION",
       .script_sdpa_note = "attnscope's cudnn.sdpa is cuDNN's SDPA: PyTorch is asked for its cuDNN backend (it raises when\n"
                           "cuDNN cannot take the case)",
       .sinks = true,
       .mla = kMlaNonAbsorbed},
      // cuDNN's descale factors are one value per tensor
      {.id = "cudnn.sdpa_fp8",
       .summary = "cuDNN's FP8 scaled-dot-product attention (frontend sdpa_fp8): Q, K, V as FP8 bytes with per-tensor "
                  "descale factors, P in FP8 inside the kernel",
       .takes = "FP8 attention only (/fp8_attention; e4m3 or e5m2) with tensor scales, bf16 / fp16 case dtype, head dims "
                "multiples of 16 up to 256, paged or contiguous KV read in place, padding; on Hopper O is written in FP8 "
                "and dequantised, and causal bands only where q_len == kv_len (top-left) or in decode batches",
       .gpu = true,
       .bench_default = true,
       .fp8_kv_scales = fp8_bit(ScaleGranularity::kTensor),
       .fp8_attention = true},
  };
#if ATTNSCOPE_FAMILY_COMPILED
  f.compiled = true;
  f.note = peers::cudnn::cudnn_version_note();
  f.pin = ATTNSCOPE_CUDNN_FRONTEND_PIN;
  if (!peers::cudnn::cudnn_runtime().matches) f.mismatch = peers::cudnn::cudnn_runtime().text;
  f.make = [](const std::string& id) -> std::unique_ptr<Backend> {
    return id == "cudnn.sdpa_fp8" ? peers::cudnn::make_sdpa_fp8_backend() : peers::cudnn::make_sdpa_backend();
  };
#else
  f.note = ATTNSCOPE_FAMILY_WHY;
#endif
  return f;
}

}  // namespace attnscope
