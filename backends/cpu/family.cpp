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
  f.backends = {
      {"cpu.reference", "fp64 naive softmax on the CPU (ground truth)", any, E::kFull, E::kFull, false, false, false,
       Role::kReference, kFp8AnyScales, true},
      {"cpu.lowp", "naive attention rounded like an eager low-precision implementation", any, E::kFull, E::kFull, false, false,
       false, Role::kLowp, kFp8AnyScales, true},
      {"cpu.tiled", "fp32 online softmax following the split plan (tiles, chunks, merge): cuda.flash's CPU twin",
       "every dtype, head dim, mask, mask_mod, score_mod and storage of the case format; attention sinks and "
       "speculative-decoding "
       "trees; FP8 caches with per-tensor or per-head "
       "scales (the K scale folded into the logit scale, the V scale applied to O at the end, as cuda.flash), not per-token "
       "scales nor FP8 attention",
       E::kFull, E::kFull, false, false, false, Role::kPlanTwin,
       fp8_bit(ScaleGranularity::kTensor) | fp8_bit(ScaleGranularity::kHead), false},
  };
  for (auto& b : f.backends) {
    b.sinks = b.trees = true;  // tests/cpu/test_sinks_trees.cpp
    b.mla = kMlaBoth;          // both forms are ordinary attention over the derived tensors (tests/cpu/test_mla.cpp)
  }
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
