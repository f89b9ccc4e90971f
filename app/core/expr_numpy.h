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

// x as a Python float expression that reads back the same double: shortest round-trip digits,
// float("inf"), -float("inf"), float("nan").
std::string py_float(double x);

// s as a double-quoted Python string literal of printable ASCII: \\ \" \n \t \r escaped, other
// control characters and non-ASCII code points as \x / \u / \U escapes; a byte that is not UTF-8
// as the four characters \xNN (escaped backslash), so the literal's text shows it.
std::string py_str(const std::string& s);

// s for a comment line: printable ASCII kept, every other character shown as an escape (\x00,
// \u00e9, invalid bytes \xff), so a name cannot end the comment, hold a NUL or make the script
// non-UTF-8.
std::string py_comment_text(const std::string& s);

}  // namespace attnscope
