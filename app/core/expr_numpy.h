// A mask_mod / score_mod in Python, for the repro scripts (export_script.h) and `plan --json`.
//
// The NumPy translation is exact: it is written from the expression's postfix program
// (expr_program.h), one statement per operation over float64 arrays, with eval_expr's rules made
// explicit where NumPy's differ (min / max of NaN, where / && / || of NaN, C's fmod, division by
// zero, libm's exp / tanh / pow, doc() and alibi() of any double). Being flat, it has no nesting
// for Python's parser to refuse, whatever the expression's size.
//
// Also here: the text helpers every generated script uses for literals and comments, which keep
// the script ASCII (control characters, non-ASCII and invalid UTF-8 become escapes).
#pragma once

#include <string>

#include "attnscope/mask_expr.h"
#include "attnscope/py_text.h"  // py_float, py_str, py_comment_text

namespace attnscope {

// A Python function `def NAME(b, h, q_idx, kv_idx, q_len, kv_len, prefix_len, doc_starts,
// num_heads, score=0.0)` that returns the expression's float64 value for arrays (or scalars) of the
// variables, broadcast together, bit for bit what attnscope's eval_expr gives for each element.
// doc_starts: the request's document starts (empty: one document); num_heads: alibi()'s head count.
// It calls the helpers of expr_numpy_helpers(e) and the module name `np`.
std::string expr_numpy_def(const Expr& e, const std::string& name);

// The module-level helpers expr_numpy_def's function calls (only those `e` needs; _f always).
std::string expr_numpy_helpers(const Expr& e);

// The expression as the body of FlexAttention's mask_mod / score_mod (expr_to_torch's helpers and
// names: _b, _doc, _alibi, torch.fmod, torch.minimum, ...), written from the postfix program with
// only the parentheses Python's precedence needs, so a long && / || / + chain does not nest (Python
// refuses 200 nested parentheses), and with literals Python reads (1e400: float("inf")). It keeps
// PyTorch's arithmetic; expr_numpy_def is the exact translation.
std::string expr_torch_text(const Expr& e);

}  // namespace attnscope
