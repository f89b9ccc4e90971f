// Mask and score expressions (issue 12, part 1: the language): FlexAttention's mask_mod and
// score_mod as text. A documented grammar (docs/case-format.md, "Expressions"), a parser of
// attnscope's own with errors that name the column of the bad token, an evaluator, and the
// built-in masks printed as the equivalent expression (checked to agree with mask.h's allowed() on
// every (query, key) pair).
//
// Values are doubles (integers are exact below 2^53); comparisons and && || ! give 0 or 1, and any
// non-zero value is true. Positions are absolute, as the built-in masks use them: q_idx is the
// query's position among the request's keys (kv_len - q_len + its index), kv_idx the key's.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"

namespace attnscope {

// A parse error: the 1-based column of the offending token and what was expected there.
struct ExprError : std::runtime_error {
  ExprError(int column_, const std::string& what)
      : std::runtime_error("column " + std::to_string(column_) + ": " + what), column(column_) {}
  int column;
};

// What an expression may read. `score` only in a score_mod.
struct ExprVars {
  double b = 0, h = 0, q_idx = 0, kv_idx = 0, q_len = 0, kv_len = 0, prefix_len = 0, score = 0;
  const std::vector<int>* doc_starts = nullptr;  // doc(x): index of the document holding position x
};

class Expr {
 public:
  enum class Kind { kMask, kScore };
  // Throws ExprError. A mask may not read `score`.
  static Expr parse(const std::string& text, Kind kind);
  double eval(const ExprVars& v) const;
  bool allows(const ExprVars& v) const { return eval(v) != 0.0; }
  const std::string& text() const { return text_; }

  struct Node;

 private:
  std::string text_;
  std::shared_ptr<const Node> root_;
};

// The case's built-in mask of request r as a mask_mod expression ("kv_idx <= q_idx && ...").
std::string builtin_mask_expr(const CaseSpec& c, int r);

// The names and functions an expression may use, for error messages and the docs.
const char* expr_names_text();

}  // namespace attnscope
