#include "expr_editor.h"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <cstdlib>

#include "attnscope/mask_expr.h"
#include "attnscope/sparse.h"
#include "draw/text_fit.h"

namespace attnscope::gui {

const std::vector<ExprExample>& expr_examples() {
  static const std::vector<ExprExample> v = {
      {"causal", false, "kv_idx <= q_idx", "causal.json", "Built-in twin: causal on."},
      {"sliding window (128)", false, "kv_idx <= q_idx && q_idx - kv_idx < 128", "sliding-window.json",
       "Built-in twin: causal + window 128."},
      {"dilated window (every 2nd of 256)", false, "kv_idx <= q_idx && q_idx - kv_idx < 256 && (q_idx - kv_idx) % 2 == 0",
       "dilated-window.json", "A comb, not an interval: no built-in mask says it."},
      {"prefix-LM", false, "kv_idx <= q_idx || kv_idx < prefix_len", "prefix-lm.json",
       "Reads each request's prefix_len (Requests > Selected request); turn causal off, or the OR is cut back to causal."},
      {"documents, causal within each", false, "doc(kv_idx) == doc(q_idx) && kv_idx <= q_idx", "documents.json",
       "doc() reads each request's doc_starts (Requests > Selected request)."},
      {"NATTEN 2-D (32 x 32 image)", false,
       "abs(min(max(floor(q_idx / 32), 3), 28) - floor(kv_idx / 32)) <= 3 && abs(min(max(q_idx % 32, 3), 28) - kv_idx % 32) <= 3",
       "natten-2d.json", "7 x 7 neighbourhood of each pixel of a 32 x 32 image: a 1024-token request, causal off."},
      {"block-sparse (128 x 128 blocks)", false,
       "floor(q_idx / 128) == floor(kv_idx / 128) || (kv_idx <= q_idx && (floor(q_idx / 128) * 7 + floor(kv_idx / 128) * 13) % 5 "
       "< 2)",
       "block-sparse.json", "The diagonal block plus a pseudo-random 2 in 5 of the earlier blocks; causal off."},
      {"tree speculation (15 drafts, binary tree)", false,
       "kv_idx < (kv_len - q_len) || (kv_idx >= (kv_len - q_len) && (floor(((q_idx - (kv_len - q_len)) + 1) / 1) == (kv_idx - "
       "(kv_len - q_len)) + 1 || floor(((q_idx - (kv_len - q_len)) + 1) / 2) == (kv_idx - (kv_len - q_len)) + 1 || "
       "floor(((q_idx - (kv_len - q_len)) + 1) / 4) == (kv_idx - (kv_len - q_len)) + 1 || floor(((q_idx - (kv_len - q_len)) + "
       "1) / 8) == (kv_idx - (kv_len - q_len)) + 1))",
       "tree-speculative.json", "Each of 15 draft queries sees the cached context and its ancestors; causal off."},
      {"soft-cap 30", true, "30 * tanh(score / 30)", "softcap.json", "Built-in twin: soft-cap 30 (turn that off)."},
      {"ALiBi", true, "score + alibi(h) * (kv_idx - q_idx)", "alibi.json", "Built-in twin: ALiBi (turn that off)."},
      {"soft-cap 30 + ALiBi", true, "30 * tanh(score / 30) + alibi(h) * (kv_idx - q_idx)", "",
       "Both built-in forms at once: soft-cap, then the ALiBi bias."},
  };
  return v;
}

ExprFieldStatus expr_error_view(const std::string& text, const std::string& rule, int column, int width) {
  ExprFieldStatus st;
  st.error = true;
  st.message = rule;
  if (column <= 0) return st;
  width = std::max(width, 16);
  // the line holding byte column - 1; a column past the text's end ("expected an expression")
  // points just after its last visible character, not at a trailing blank line
  size_t at = std::min(static_cast<size_t>(column - 1), text.size());
  if (at == text.size()) {
    const size_t last = text.find_last_not_of(" \t\r\n");
    at = last == std::string::npos ? 0 : last + 1;
  }
  size_t line_start = 0;
  if (at > 0)
    if (const size_t nl = text.rfind('\n', at - 1); nl != std::string::npos) line_start = nl + 1;
  size_t line_end = text.find('\n', at);
  if (line_end == std::string::npos) line_end = text.size();
  if (line_start > 0 || line_end < text.size()) {
    // several lines: "line L, column C: ..." in place of the parser's column in the whole text
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(line_start), '\n'));
    const size_t colon = st.message.rfind("column ", 0) == 0 ? st.message.find(": ") : std::string::npos;
    st.message = "line " + std::to_string(line) + ", column " + std::to_string(at - line_start + 1) +
                 (colon == std::string::npos ? ": " + st.message : st.message.substr(colon));
  }
  std::string line = text.substr(line_start, line_end - line_start);
  for (char& ch : line)
    if (ch == '\t' || ch == '\r' || static_cast<unsigned char>(ch) >= 0x80) ch = ch == '\t' || ch == '\r' ? ' ' : '?';
  int pos = static_cast<int>(at - line_start);  // the caret's position in `line`
  const int n = static_cast<int>(line.size());
  if (n + 1 > width) {
    // a window of `keep` characters with the caret a third in (what follows the bad token shows
    // too), "..." where it cuts
    const int keep = width - 6;
    const int from = std::clamp(pos - keep / 3, 0, n + 1 - keep);
    const int to = std::min(n, from + keep);
    const bool cut_left = from > 0, cut_right = to < n;
    line = (cut_left ? "..." : "") + line.substr(from, to - from) + (cut_right ? "..." : "");
    pos = pos - from + (cut_left ? 3 : 0);
  }
  st.excerpt = line;
  st.caret = std::string(static_cast<size_t>(pos), ' ') + "^";
  return st;
}

ExprFieldStatus expr_field_status(const CaseSpec& c, bool score, int width) {
  const std::optional<std::string>& field = score ? c.attention.score_mod : c.attention.mask_mod;
  if (!field) return {};
  CaseSpec one = c;
  (score ? one.attention.mask_mod : one.attention.score_mod).reset();
  try {
    validate_expressions(one);
    return {};
  } catch (const CaseError& e) {
    // parse errors read "column N: ..." (mask_expr.h's ExprError); other rules name no column
    int column = 0;
    if (e.rule().rfind("column ", 0) == 0) column = std::atoi(e.rule().c_str() + 7);
    return expr_error_view(*field, e.rule(), column, width);
  }
}

std::optional<std::string> builtin_as_mask_mod(const CaseSpec& c) {
  if (c.requests.empty()) return std::nullopt;
  const std::string first = builtin_mask_expr(c, 0);
  for (int r = 1; r < static_cast<int>(c.requests.size()); ++r)
    if (builtin_mask_expr(c, r) != first) return std::nullopt;
  if (first == "1") return std::nullopt;
  return first;
}

std::string mask_mod_and_note(const CaseSpec& c, int r) {
  if (!c.attention.mask_mod || c.requests.empty()) return "";
  r = std::clamp(r, 0, static_cast<int>(c.requests.size()) - 1);
  const std::string b = builtin_mask_expr(c, r);
  if (b == "1") return "";
  return "ANDed with the built-in mask (" + b + "): turn causal, window, chunk off for the expression alone.";
}

int64_t mask_mod_pairs(const CaseSpec& c) {
  if (!c.attention.mask_mod) return 0;
  int64_t n = 0;
  for (const auto& r : c.requests) n += static_cast<int64_t>(r.q_len) * r.kv_len;
  return n;
}

bool plan_on_runner(const CaseSpec& c) {
  return mask_mod_pairs(c) > kPlanInlinePairs || indexer_macs(c) > kPlanInlineIndexerMacs;
}

namespace {

const ImVec4 kErrorColour(1, 0.45f, 0.4f, 1);

// One expression field: multi-line text (empty: the field is absent), then its error if any.
bool expr_field(const char* label, std::optional<std::string>& field, const ExprFieldStatus& st) {
  std::string text = field.value_or("");
  bool changed = false;
  // as tall as the text's lines (2 to 8), so that a formatted expression shows whole
  const int lines = std::clamp(1 + static_cast<int>(std::count(text.begin(), text.end(), '\n')), 2, 8);
  const float h = ImGui::GetTextLineHeight() * static_cast<float>(lines) + ImGui::GetStyle().FramePadding.y * 2;
  if (ImGui::InputTextMultiline(label, &text, ImVec2(-110, h))) {
    // blank text: no expression, as the case file leaves the field out
    const bool blank = text.find_first_not_of(" \t\r\n") == std::string::npos;
    field = blank ? std::nullopt : std::optional<std::string>(text);
    changed = true;
  }
  // ImGui's multi-line field does not wrap: a line wider than the field is shown whole below it
  const float char_w = ImGui::CalcTextSize("0").x;
  const float field_w = ImGui::GetItemRectSize().x - ImGui::GetStyle().FramePadding.x * 2;
  size_t longest = 0;
  for (size_t at = 0; at <= text.size();) {
    const size_t nl = std::min(text.find('\n', at), text.size());
    longest = std::max(longest, nl - at);
    at = nl + 1;
  }
  if (!st.error && static_cast<float>(longest) * char_w > field_w) {
    ImGui::PushTextWrapPos(ImGui::GetContentRegionMax().x);
    ImGui::TextDisabled("%s", text.c_str());
    ImGui::PopTextWrapPos();
  }
  if (st.error) {
    ImGui::PushStyleColor(ImGuiCol_Text, kErrorColour);
    if (!st.excerpt.empty()) {
      // the default font is monospace: the caret line's spaces line up with the excerpt
      ImGui::TextUnformatted(st.excerpt.c_str());
      ImGui::TextUnformatted(st.caret.c_str());
    }
    ImGui::PushTextWrapPos(ImGui::GetContentRegionMax().x);
    ImGui::TextUnformatted(st.message.c_str());
    ImGui::PopTextWrapPos();
    ImGui::PopStyleColor();
  }
  return changed;
}

}  // namespace

bool ExprEditor::draw(CaseSpec& c, int request) {
  auto& a = c.attention;
  bool ch = false;
  const float char_w = ImGui::CalcTextSize("0").x;
  const int width = std::max(16, static_cast<int>(ImGui::GetContentRegionAvail().x / std::max(1.f, char_w)) - 1);
  // validation is cheap but needs a copy of the case: only when what it reads changed
  const std::string key = a.mask_mod.value_or("\x01") + '\0' + a.score_mod.value_or("\x01") + '\0' +
                          std::to_string(a.soft_cap.has_value()) + std::to_string(a.alibi) + std::to_string(width);
  if (key != key_) {
    mask_status_ = expr_field_status(c, false, width);
    score_status_ = expr_field_status(c, true, width);
    key_ = key;
  }
  ImGui::Separator();
  ImGui::PushTextWrapPos(ImGui::GetContentRegionMax().x);
  ImGui::TextDisabled("Expressions, as FlexAttention's mask_mod / score_mod (empty: none)");
  ImGui::PopTextWrapPos();
  ch |= expr_field("mask_mod", a.mask_mod, mask_status_);
  const std::string note = mask_mod_and_note(c, request);
  ImGui::PushTextWrapPos(ImGui::GetContentRegionMax().x);
  if (!note.empty()) ImGui::TextDisabled("%s", note.c_str());
  ImGui::PopTextWrapPos();
  ch |= expr_field("score_mod", a.score_mod, score_status_);
  if (a.score_mod && !score_status_.error) ImGui::TextDisabled("score_mod replaces score = q.k * sm_scale");
  // the zoo's expressions: one replaces the field of its kind
  ImGui::SetNextItemWidth(-110);
  if (ImGui::BeginCombo("insert example", "mask / score expression ...")) {
    for (const auto& e : expr_examples()) {
      const std::string item = std::string(e.score ? "score: " : "mask: ") + e.name;
      if (ImGui::Selectable(item.c_str())) {
        (e.score ? a.score_mod : a.mask_mod) = std::string(e.text);
        ch = true;
      }
      if (ImGui::IsItemHovered()) {
        ImGui::BeginTooltip();
        ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40);
        ImGui::TextUnformatted(e.text);
        ImGui::TextDisabled("%s", e.note);
        ImGui::PopTextWrapPos();
        ImGui::EndTooltip();
      }
    }
    ImGui::EndCombo();
  }
  ImGui::PushTextWrapPos(ImGui::GetContentRegionMax().x);
  ImGui::TextDisabled("%s", expr_names_text());
  if (!c.requests.empty()) {
    const int r = std::clamp(request, 0, static_cast<int>(c.requests.size()) - 1);
    const std::string b = builtin_mask_expr(c, r);
    // one long token (a document list, say) cannot wrap: it ends in "..." and shows whole on hover
    const ImVec4 grey = ImGui::GetStyle().Colors[ImGuiCol_TextDisabled];
    text_elided("built-in mask of request " + std::to_string(r) + " as an expression: " + (b == "1" ? "1 (every pair)" : b), -1,
                &grey);
  }
  ImGui::PopTextWrapPos();
  // the built-in mask ANDed with itself is the same mask: a safe start for an expression
  if (!a.mask_mod) {
    if (const auto b = builtin_as_mask_mod(c); b && ImGui::SmallButton("start mask_mod from the built-in mask")) {
      a.mask_mod = *b;
      ch = true;
    }
  }
  return ch;
}

}  // namespace attnscope::gui
