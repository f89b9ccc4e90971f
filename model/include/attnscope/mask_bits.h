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
// A tree (tree_parents) also makes every request's mask bits: the same byte limit, named at the
// first request with a tree. No-op without trees.
void check_tree_budget(const CaseSpec& c);

// The bits of request r: built-in mask `builtin` AND the expression (null: none) AND the request's
// tree (tree_parents, docs/conventions.md section 12: a new token sees the prefix, itself and its
// ancestors), for every (query, key) pair. Only pairs inside the built-in visible range are evaluated.
MaskBits make_mask_bits(const CaseSpec& c, int r, const RowMask& builtin, const Expr* mask_mod);
inline MaskBits make_mask_bits(const CaseSpec& c, int r, const RowMask& builtin, const Expr& mask_mod) {
  return make_mask_bits(c, r, builtin, &mask_mod);
}

// The new-token ancestor sets of a tree: bit j of row i ([q_len * words], words = ceil(q_len / 64))
// = new token j is token i or one of its ancestors. Empty for no tree.
std::vector<uint64_t> tree_ancestors(const std::vector<int>& parents, int* words);

// The expression environment of request r's (query at qa, key k) pair, head h, logit `score`.
ExprEnv expr_env(const CaseSpec& c, int r, int h, int qa, int k, double score = 0.0);

}  // namespace attnscope
