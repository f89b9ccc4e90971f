// A mask_mod evaluated into the bits that RowMask carries (mask.h): once per plan on the host, so
// every consumer (CPU backends, kernels, block map, GUI) reads the same verdict for each pair and
// no kernel evaluates an expression in its inner loop.
#pragma once

#include <cstdint>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/mask.h"
#include "attnscope/mask_expr.h"

namespace attnscope {

struct MaskBits {
  int words = 0;               // per query row: ceil(kv_len / 64)
  std::vector<uint64_t> bits;  // [q_len * words]: bit k % 64 of word k / 64 = key k allowed
  std::vector<int> bounds;     // [2 * q_len]: first allowed key, one past the last (equal: none)
};

// What a mask_mod may cost (docs/case-format.md): it is evaluated on every pair of every request when
// a plan is made, so a case is refused before anything is allocated when its pairs (sum of q_len x
// kv_len), its pairs times the program's operations, or its bits exceed these.
constexpr int64_t kMaxMaskPairs = int64_t{1} << 28;
constexpr int64_t kMaxMaskOps = int64_t{1} << 32;
constexpr int64_t kMaxMaskBytes = int64_t{64} << 20;
// Throws CaseError("/attention/mask_mod", ...) with the figure and the limit it passes.
void check_mask_budget(const CaseSpec& c, const Expr& mask_mod);

// The bits of request r: built-in mask `builtin` AND the expression, for every (query, key) pair.
// Only pairs inside the built-in visible range are evaluated.
MaskBits make_mask_bits(const CaseSpec& c, int r, const RowMask& builtin, const Expr& mask_mod);

// The expression environment of request r's (query at qa, key k) pair, head h, logit `score`.
ExprEnv expr_env(const CaseSpec& c, int r, int h, int qa, int k, double score = 0.0);

}  // namespace attnscope
