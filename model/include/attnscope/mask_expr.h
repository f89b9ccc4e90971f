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
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/expr_program.h"

namespace attnscope {

// A parse error: the 1-based column of the offending token and what was expected there.
struct ExprError : std::runtime_error {
  ExprError(int column_, const std::string& what)
      : std::runtime_error("column " + std::to_string(column_) + ": " + what), column(column_) {}
  int column;
};

// Limits of the parser (docs/case-format.md, "Expressions"): each refusal is an ExprError naming the
// column. The size bounds parsing and each evaluation; the nesting and the depth bound every
// recursive walk of the tree (a left-associative chain a + b + c is one level deeper per operator).
constexpr size_t kMaxExprBytes = 64 * 1024;
constexpr int kMaxExprNesting = 256;  // parentheses, function calls and unary - or ! open at once
constexpr int kMaxExprDepth = 1024;   // levels of the expression tree

// `s` safe inside a message: control bytes (NUL included) and bytes that are not part of valid UTF-8
// become \xNN, so what() is never cut short and never ends in half a character.
std::string printable(const std::string& s);

// What an expression may read. `score` only in a score_mod.
struct ExprVars {
  double b = 0, h = 0, q_idx = 0, kv_idx = 0, q_len = 0, kv_len = 0, prefix_len = 0, score = 0;
  const std::vector<int>* doc_starts = nullptr;  // doc(x): index of the document holding position x
  int num_heads = 1;                             // alibi(h): slope of head h of num_heads
};

class Expr {
 public:
  enum class Kind { kMask, kScore };
  // Throws ExprError. A mask may not read `score`.
  static Expr parse(const std::string& text, Kind kind);
  double eval(const ExprVars& v) const;
  double eval(const ExprEnv& e) const { return eval_expr(ops_.data(), static_cast<int>(ops_.size()), e); }
  bool allows(const ExprVars& v) const { return expr_true(eval(v)); }
  const std::string& text() const { return text_; }
  // The postfix program (expr_program.h) that host and device evaluate.
  const std::vector<ExprOp>& ops() const { return ops_; }
  bool reads_head() const { return reads_h_; }

  struct Node;
  const Node& root() const { return *root_; }

 private:
  std::string text_;
  std::shared_ptr<const Node> root_;
  std::vector<ExprOp> ops_;
  bool reads_h_ = false;
};

// A score_mod of the forms that attnscope's kernels and the libraries take as parameters rather
// than as code: `score`, `C * tanh(score / C)` (soft-cap C), and either plus
// `alibi(h) * (kv_idx - q_idx)` (ALiBi). Backends that cannot evaluate expressions run these as the
// built-in soft_cap / alibi (the same formula); anything else they refuse.
struct LoweredScoreMod {
  std::optional<double> soft_cap;
  bool alibi = false;
};
std::optional<LoweredScoreMod> lower_score_mod(const Expr& e);
const char* lowered_score_forms_text();

// The expression as PyTorch code for FlexAttention's mask_mod / score_mod bodies, fully
// parenthesised (Python's & binds tighter than ==). It reads b, h, q_idx, kv_idx (and score) as
// tensors, q_len, kv_len, prefix_len as names the caller defines, and helpers the caller defines:
// _b(x) (x as a bool tensor: x != 0), _doc(pos) (document index), _alibi(h) (ALiBi slope). C's
// fmod is torch.fmod (Python's % differs for negatives).
std::string expr_to_torch(const Expr& e);
// The same for numpy (np.asarray, np.fmod, np.minimum, ...): the repro scripts' fp64 reference.
std::string expr_to_numpy(const Expr& e);

// The case's built-in mask of request r as a mask_mod expression ("kv_idx <= q_idx && ...").
std::string builtin_mask_expr(const CaseSpec& c, int r);

// The names and functions an expression may use, for error messages and the docs.
const char* expr_names_text();

}  // namespace attnscope
