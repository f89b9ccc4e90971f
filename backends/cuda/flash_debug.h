// DEVELOPER-ONLY: cuda.flash's A/B switches, for measuring one form of a kernel against another on one
// build (scripts/gpu-ab.sh's ENV_A / ENV_B, the GPU tests that compare the forms). Read from the
// environment once, when a cuda.flash backend is made (flash_debug_options), never in the launch path.
// None changes a result's bits; each only picks another kernel form or launch order for the same
// computation. Not a user option: unset, every field is the production default.
#pragma once

#include <cstdlib>
#include <string>

namespace attnscope::cuda {

struct FlashDebugOptions {
  // ATTNSCOPE_FLASH_RB=1 or 2: the 128-row tile's warp layout of the bit-less variants, 8 warps x 1
  // row block or 4 x 2 (flash_geometry's rb_override); 0 (unset or anything else): flash_geometry's rule
  int rb = 0;
  // ATTNSCOPE_FLASH_PATH=mma: the mma.sync kernel where the Hopper kernel would run (unset or wgmma: it runs)
  bool sm90 = true;
  // ATTNSCOPE_FLASH_PAIR=0: one 64-row item per Hopper CTA where two would be paired (head dim 256)
  bool pairs = true;
  // ATTNSCOPE_FLASH_ORDER=plan: the items in the plan's order rather than the plan's last items first
  bool heavy_first = true;
  // ATTNSCOPE_FLASH_ORDER=plan or heads-outer: the KV heads outermost in the grid also in the mma.sync
  // decode layout (where by default a request's KV heads run side by side)
  bool heads_inner = true;
};

inline FlashDebugOptions flash_debug_options() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  FlashDebugOptions o;
  const std::string rb = env("ATTNSCOPE_FLASH_RB"), order = env("ATTNSCOPE_FLASH_ORDER");
  o.rb = rb == "1" ? 1 : rb == "2" ? 2 : 0;
  o.sm90 = env("ATTNSCOPE_FLASH_PATH") != "mma";
  o.pairs = env("ATTNSCOPE_FLASH_PAIR") != "0";
  o.heavy_first = order != "plan";
  o.heads_inner = order != "plan" && order != "heads-outer";
  return o;
}

}  // namespace attnscope::cuda
