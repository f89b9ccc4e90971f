// The cuda family: attnscope's own CUDA kernels (a reference, a naive baseline, the plan-executing
// flash kernel). Compiled in every build; its backends exist only where CMake found a CUDA compiler.
#include "attnscope/backend.h"
#if ATTNSCOPE_FAMILY_COMPILED
#include <cuda_runtime.h>

#include "attnscope/merge.h"
#include "cuda_backends.h"
#include "cuda_merge.h"
#endif

namespace attnscope {

BackendFamily cuda_family() {
  using E = Expressions;
  BackendFamily f;
  f.name = "cuda";
  const std::string every = "every dtype, head dim, mask, mask_mod, score_mod and storage of the case format";
  // Every backend takes attention sinks (a term of each row's denominator: the naive kernels add it, the
  // flash kernels start the row's state with it) and trees (the plan's mask bits). The naive kernels
  // take both MLA forms at any head dims (tests/gpu/test_mla_gpu.cpp).
  f.backends = {
      {.id = "cuda.reference",
       .summary = "fp64 naive attention on the GPU (ground truth at any size)",
       .takes = every,
       .mask_mod = E::kFull,
       .score_mod = E::kFull,
       .gpu = true,
       .role = Role::kReference,
       .fp8_kv_scales = kFp8AnyScales,
       .fp8_attention = true,
       .sinks = true,
       .trees = true,
       .mla = kMlaBoth,
       .sparse = SparseRun::kPlan},
      {.id = "cuda.naive",
       .summary = "fp32 naive attention with materialised scores",
       .takes = every,
       .mask_mod = E::kFull,
       .score_mod = E::kFull,
       .gpu = true,
       .fp8_kv_scales = kFp8AnyScales,
       .fp8_attention = true,
       .sinks = true,
       .trees = true,
       .mla = kMlaBoth,
       .sparse = SparseRun::kPlan},
      {.id = "cuda.flash",
       .summary = "tensor-core FlashAttention-2 style kernel executing the split plan, then the merge (wgmma on sm_90, mma.sync "
                  "elsewhere)",
       .takes = "bf16 / fp16, the head dims of instances/flash_instances.def, every mask and storage, any mask_mod and "
                "score_mod (soft-cap / ALiBi as parameters, others interpreted), any planner; FP8 KV caches (e4m3, e5m2) "
                "with per-tensor or per-head scales at head dims 64, 128, 256 with the plain logit (no soft-cap, ALiBi, "
                "mask_mod or score_mod), not per-token scales nor FP8 attention; MLA's absorbed form (kv_lora_rank 512, "
                "rope_dim 64; bf16 / fp16, the built-in masks, no sinks, trees, FP8, soft-cap, ALiBi, mask_mod or "
                "score_mod), not the non-absorbed form; DeepSeek sparse attention (/sparse) in its gathered form (one "
                "request per query row over a page table of page size 1)",
       .mask_mod = E::kFull,
       .score_mod = E::kFull,
       .gpu = true,
       .bench_default = true,
       .fp8_kv_scales = fp8_bit(ScaleGranularity::kTensor) | fp8_bit(ScaleGranularity::kHead),
       .sinks = true,
       .trees = true,
       .mla = kMlaAbsorbed,
       .sparse = SparseRun::kGathered},  // its MLA kernel (flash_mla_kernel.cuh); cuDNN runs the non-absorbed prefill
      {.id = "cuda.flash_padded",
       .summary = "cuda.flash on Q/K/V zero-padded to /kernels/pad_head_dim_to (FlashInfer's head_dim-32 workaround)",
       .takes = "as cuda.flash, at the padded head dim; no FP8 KV cache",
       .mask_mod = E::kFull,
       .score_mod = E::kFull,
       .gpu = true,
       .sinks = true,
       .trees = true},
  };
#if ATTNSCOPE_FAMILY_COMPILED
  f.compiled = true;
  f.note = "attnscope's CUDA kernels, CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
           std::to_string(CUDART_VERSION % 1000 / 10);
  f.make = [](const std::string& id) -> std::unique_ptr<Backend> {
    if (id == "cuda.flash") return cuda::make_flash_backend(false);
    if (id == "cuda.flash_padded") return cuda::make_flash_backend(true);
    return cuda::make_naive_backend(id);
  };
  f.mergers = cuda::cuda_mergers;  // cuda.merge: attnscope's merge on the GPU, the host's bits
#else
  f.note = ATTNSCOPE_FAMILY_WHY;
#endif
  return f;
}

}  // namespace attnscope
