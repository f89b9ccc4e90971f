// The case editor's expression fields: attention.mask_mod and attention.score_mod as multi-line
// text with live validation (the error under the field, a caret under the bad token), the zoo's
// expressions to insert, the names an expression may read, and the built-in mask written as an
// expression for reference. An invalid expression never reaches the plan: the app validates the
// whole case before it plans, so the views keep drawing the last valid one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"

namespace attnscope::gui {

// One expression of the mask zoo (examples/zoo/*.json), offered by "insert example".
struct ExprExample {
  const char* name;  // "NATTEN 2-D (32 x 32 image)"
  bool score;        // a score_mod (else a mask_mod)
  const char* text;  // the expression, as the zoo file writes it
  const char* zoo;   // the zoo file it comes from ("natten-2d.json"), "" for none
  const char* note;  // what it needs from the case, shown as the item's tooltip
};
const std::vector<ExprExample>& expr_examples();

// What the editor shows under one expression field.
struct ExprFieldStatus {
  bool error = false;
  std::string message;  // the rule, "column 11: unknown name ..." (with the line when the text has several)
  std::string excerpt;  // the text's line holding the bad token, cut to the width around it; "" without a column
  std::string caret;    // spaces, then '^' under the bad token's first character
};

// The message, excerpt and caret of an error at 1-based `column` of `text` (0: the rule names no
// column). At most `width` characters per line: a longer line is cut around the column, "..."
// marking each cut. Tabs and non-ASCII bytes become one character each so the caret stays aligned
// in the monospace font.
ExprFieldStatus expr_error_view(const std::string& text, const std::string& rule, int column, int width);

// validate_expressions for one field (`score` false: mask_mod) on a copy of `c` without the other
// field, so that each field shows its own error. No field: no error.
ExprFieldStatus expr_field_status(const CaseSpec& c, bool score, int width = 60);

// The built-in mask of every request as one mask_mod expression, when they all print the same and
// it is not the everything-allowed "1". ANDing the built-in mask with itself keeps the meaning, so
// the editor may fill an empty mask_mod with it; nullopt where the requests differ (prefix_len,
// doc_starts or pad_start of their own).
std::optional<std::string> builtin_as_mask_mod(const CaseSpec& c);

// A mask_mod is ANDed with the built-in mask: the line that says so (naming request r's built-in
// mask) when both are present, else "".
std::string mask_mod_and_note(const CaseSpec& c, int r);

// (query, key) pairs make_plan evaluates a mask_mod on: 0 without one, else at most sum q_len *
// kv_len. Above kPlanInlinePairs the app plans on the runner's thread instead of the GUI thread
// (about 100 ns a pair: a 4096-token prefill takes seconds).
int64_t mask_mod_pairs(const CaseSpec& c);
constexpr int64_t kPlanInlinePairs = int64_t{1} << 19;
// /sparse's indexer runs in make_plan too (about 0.6 ns a multiply-add on two cores): above this many
// (indexer_macs, about 40 ms) the runner plans it, as a large mask_mod.
constexpr int64_t kPlanInlineIndexerMacs = int64_t{1} << 26;
// Whether the plan is the runner's to make (a large mask_mod or indexer) rather than this frame's.
bool plan_on_runner(const CaseSpec& c);

class ExprEditor {
 public:
  // The two fields, the example menu and the reference lines; true when `c` changed. `request`:
  // whose built-in mask the reference line shows.
  bool draw(CaseSpec& c, int request);

 private:
  // statuses cached by what they depend on (the texts, the combinations that validation checks,
  // the width in characters)
  std::string key_;
  ExprFieldStatus mask_status_, score_status_;
};

}  // namespace attnscope::gui
