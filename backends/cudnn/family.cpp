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
      {"cudnn.sdpa",
       "cuDNN's fused scaled-dot-product attention (frontend graph API): ragged Q/O/LSE, paged K/V through page tables",
       "bf16 / fp16, head dims up to 256, paged or contiguous KV, causal / window / padding masks, soft-cap / ALiBi score_mods",
       Expressions::kNone, Expressions::kLowered, true, true},
  };
  // a repro script runs it as PyTorch's SDPA with the cuDNN backend
  f.backends[0].script_sdpa_backend = "CUDNN_ATTENTION";
  f.backends[0].script_sdpa_note =
      "attnscope's cudnn.sdpa is cuDNN's SDPA: PyTorch is asked for its cuDNN backend (it raises when\n"
      "cuDNN cannot take the case)";
#if ATTNSCOPE_FAMILY_COMPILED
  f.compiled = true;
  f.note = peers::cudnn::cudnn_version_note();
  f.pin = ATTNSCOPE_CUDNN_FRONTEND_PIN;
  f.make = [](const std::string&) -> std::unique_ptr<Backend> { return peers::cudnn::make_sdpa_backend(); };
#else
  f.note = ATTNSCOPE_FAMILY_WHY;
#endif
  return f;
}

}  // namespace attnscope
