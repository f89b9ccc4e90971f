// The cuda family: attnscope's own CUDA kernels (a reference, a naive baseline, the plan-executing
// flash kernel). Compiled in every build; its backends exist only where CMake found a CUDA compiler.
#include "attnscope/backend.h"
#if ATTNSCOPE_FAMILY_COMPILED
#include <cuda_runtime.h>

#include "cuda_backends.h"
#endif

namespace attnscope {

BackendFamily cuda_family() {
  using E = Expressions;
  BackendFamily f;
  f.name = "cuda";
  f.backends = {
      {"cuda.reference", "fp64 naive attention on the GPU (ground truth at any size)",
       "every dtype, head dim, mask, mask_mod, score_mod and storage of the case format", E::kFull, E::kFull, true, false, false,
       Role::kReference, kFp8AnyScales, true},
      {"cuda.naive", "fp32 naive attention with materialised scores",
       "every dtype, head dim, mask, mask_mod, score_mod and storage of the case format", E::kFull, E::kFull, true, false, false,
       Role::kNone, kFp8AnyScales, true},
      {"cuda.flash",
       "tensor-core FlashAttention-2 style kernel executing the split plan, then the merge (wgmma on sm_90, mma.sync elsewhere)",
       "bf16 / fp16, the head dims of instances/flash_instances.def, every mask and storage, any mask_mod and score_mod "
       "(soft-cap / ALiBi as parameters, others interpreted), any planner; FP8 KV caches (e4m3, e5m2) with per-tensor or "
       "per-head scales at head dims 64, 128, 256 with the plain logit (no soft-cap, ALiBi, mask_mod or score_mod), not "
       "per-token scales nor FP8 attention; MLA's absorbed form (kv_lora_rank 512, rope_dim 64; bf16 / fp16, the built-in "
       "masks, no sinks, trees, FP8, soft-cap, ALiBi, mask_mod or score_mod), not the non-absorbed form",
       E::kFull, E::kFull, true, true, false, Role::kNone, fp8_bit(ScaleGranularity::kTensor) | fp8_bit(ScaleGranularity::kHead),
       false},
      {"cuda.flash_padded", "cuda.flash on Q/K/V zero-padded to /kernels/pad_head_dim_to (FlashInfer's head_dim-32 workaround)",
       "as cuda.flash, at the padded head dim; no FP8 KV cache", E::kFull, E::kFull, true},
  };
  // attention sinks (folded into each row at its store or merge) and trees (the plan's mask bits)
  for (auto& b : f.backends) b.sinks = b.trees = true;
  f.backends[0].mla = f.backends[1].mla = kMlaBoth;  // the naive kernels: any head dims (tests/gpu/test_mla_gpu.cpp)
  f.backends[2].mla = kMlaAbsorbed;                  // its MLA kernel (flash_mla_kernel.cuh); cuDNN runs the non-absorbed prefill
#if ATTNSCOPE_FAMILY_COMPILED
  f.compiled = true;
  f.note = "attnscope's CUDA kernels, CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
           std::to_string(CUDART_VERSION % 1000 / 10);
  f.make = [](const std::string& id) -> std::unique_ptr<Backend> {
    if (id == "cuda.flash") return cuda::make_flash_backend(false);
    if (id == "cuda.flash_padded") return cuda::make_flash_backend(true);
    return cuda::make_naive_backend(id);
  };
#else
  f.note = ATTNSCOPE_FAMILY_WHY;
#endif
  return f;
}

}  // namespace attnscope
