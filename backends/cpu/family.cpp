// The cpu family: attnscope's own CPU backends, always compiled. It plays the case format's default
// roles: the fp64 reference, the same-precision baseline of twice_lowp, and the plan's CPU twin.
#include "attnscope/backend.h"
#include "cpu_family.h"

namespace attnscope {

BackendFamily cpu_family() {
  using E = Expressions;
  const std::string any =
      "every dtype, head dim, mask, mask_mod, score_mod and storage of the case format; attention sinks and "
      "speculative-decoding trees; FP8 caches at every scale granularity and FP8 attention";
  BackendFamily f;
  f.name = "cpu";
  // Every backend takes sinks and trees (tests/cpu/test_sinks_trees.cpp) and both MLA forms, ordinary
  // attention over the derived tensors (tests/cpu/test_mla.cpp), and /sparse: the references through the plan's
  // mask bits, cpu.tiled, cuda.flash's twin, in the gathered form as cuda.flash (tests/cpu/test_sparse.cpp).
  f.backends = {
      {.id = "cpu.reference",
       .summary = "fp64 naive softmax on the CPU (ground truth)",
       .takes = any,
       .mask_mod = E::kFull,
       .score_mod = E::kFull,
       .role = Role::kReference,
       .fp8_kv_scales = kFp8AnyScales,
       .fp8_attention = true,
       .sinks = true,
       .trees = true,
       .mla = kMlaBoth,
       .sparse = SparseRun::kPlan},
      {.id = "cpu.lowp",
       .summary = "naive attention rounded like an eager low-precision implementation",
       .takes = any,
       .mask_mod = E::kFull,
       .score_mod = E::kFull,
       .role = Role::kLowp,
       .fp8_kv_scales = kFp8AnyScales,
       .fp8_attention = true,
       .sinks = true,
       .trees = true,
       .mla = kMlaBoth,
       .sparse = SparseRun::kPlan},
      {.id = "cpu.tiled",
       .summary = "fp32 online softmax following the split plan (tiles, chunks, merge): cuda.flash's CPU twin",
       .takes = "every dtype, head dim, mask, mask_mod, score_mod and storage of the case format; attention sinks and "
                "speculative-decoding trees; FP8 caches with per-tensor or per-head scales (the K scale folded into the "
                "logit scale, the V scale applied to O at the end, as cuda.flash), not per-token scales nor FP8 attention",
       .mask_mod = E::kFull,
       .score_mod = E::kFull,
       .role = Role::kPlanTwin,
       .fp8_kv_scales = fp8_bit(ScaleGranularity::kTensor) | fp8_bit(ScaleGranularity::kHead),
       .sinks = true,
       .trees = true,
       .mla = kMlaBoth,
       .sparse = SparseRun::kGatheredElsePlan},
  };
  f.compiled = true;
  f.note = "attnscope's CPU backends";
  f.make = [](const std::string& id) -> std::unique_ptr<Backend> {
    if (id == "cpu.reference") return make_cpu_reference();
    if (id == "cpu.lowp") return make_cpu_lowp();
    return make_cpu_tiled();
  };
  return f;
}

}  // namespace attnscope
