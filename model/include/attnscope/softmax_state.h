// Online-softmax state of one query row and the merge of two partial states, in base 2 (logits
// pre-multiplied by log2(e), exp2 used), as FlashInfer keeps them. LSE is converted to natural log
// only when a backend writes its result.
#pragma once

#include <cmath>

#include "attnscope/types.h"

namespace attnscope {

// Weights to merge partial states a and b, each given by its LSE (base 2) and its normalised
// output: o = wa * o_a + wb * o_b, lse = *lse_out.
// Both empty (-inf, -inf): max is -inf and lse - max would be NaN, so that case is caught first and
// gives weights 0 and lse -inf: the merged row stays "fully masked" (O = 0, LSE = -inf).
AS_HD inline void merge_weights(float lse_a, float lse_b, float* wa, float* wb, float* lse_out) {
  const float m = lse_a > lse_b ? lse_a : lse_b;
  if (m == -INFINITY) {
    *wa = 0.f;
    *wb = 0.f;
    *lse_out = -INFINITY;
    return;
  }
  const float ea = exp2f(lse_a - m);  // exp2(-inf) = 0 for an empty side
  const float eb = exp2f(lse_b - m);
  const float s = ea + eb;  // >= 1: the larger side contributes exp2(0)
  *wa = ea / s;
  *wb = eb / s;
  *lse_out = m + log2f(s);
}

// Converts a base-2 LSE to the natural log (FlashAttention, vLLM, PyTorch convention).
AS_HD inline float lse2_to_e(float lse2) { return lse2 == -INFINITY ? -INFINITY : lse2 * static_cast<float>(kLn2); }

}  // namespace attnscope
