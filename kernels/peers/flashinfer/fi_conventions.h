// attnscope's conventions translated to FlashInfer's, in one place: the window, the LSE base, the
// split arguments. Every flashinfer.* backend uses these and nothing else for the translation.
#pragma once

#include <cmath>
#include <string>

#include "attnscope/case_spec.h"

namespace attnscope::peers::flashinfer {

// attnscope's W counts the visible keys including the query; FlashInfer's window_left counts the
// keys to the left of it (semantics.md section 1). -1 = no window.
inline int window_left(const CaseSpec& c) { return c.attention.window ? *c.attention.window - 1 : -1; }

// FlashInfer's LSE is base 2 (it keeps m in log2 units); attnscope reports natural log. -inf (a
// fully masked row) stays -inf.
inline float lse2_to_natural(float lse2) { return std::isinf(lse2) && lse2 < 0 ? lse2 : lse2 * 0.6931471805599453f; }

// The case's split section as FlashInfer's plan arguments.
struct SplitArgs {
  int fixed_split_size = -1;  // pages (tokens when ragged); -1 = planner chooses
  bool disable_split_kv = false;
  bool enable_cuda_graph = false;
  std::string note;  // what attnscope's planner model has no FlashInfer equivalent for, if anything
};
inline SplitArgs split_args(const CaseSpec& c) {
  SplitArgs a;
  a.enable_cuda_graph = c.split.cuda_graph;
  switch (c.split.planner) {
    case Planner::kFixed:
      a.fixed_split_size = c.split.fixed_split_size.value_or(-1);
      break;
    case Planner::kOff:
      a.disable_split_kv = true;
      break;
    case Planner::kFlashAttn:
      a.note = "planner flash_attn has no FlashInfer equivalent: FlashInfer plans with its own defaults";
      break;
    case Planner::kFlashInfer:
      break;
  }
  if (c.split.fixed_tile_q)
    a.note += std::string(a.note.empty() ? "" : "; ") +
              "/split/fixed_tile_q is not a FlashInfer plan argument (an open PR adds one): FlashInfer chooses its own tile";
  return a;
}

}  // namespace attnscope::peers::flashinfer
