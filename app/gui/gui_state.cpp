#include "gui_state.h"

#include <algorithm>
#include <cctype>

#include "attnscope/engine_metadata.h"

namespace attnscope::gui {

const char* tab_title(Tab t) {
  switch (t) {
    case Tab::kMask:
      return "Mask";
    case Tab::kPages:
      return "Pages";
    case Tab::kLocal:
      return "Local batches";
    case Tab::kSplit:
      return "Split-KV";
    case Tab::kSoftmax:
      return "Softmax";
    case Tab::kDiff:
      return "Diff";
    case Tab::kTiming:
      return "Timing";
    case Tab::kSweep:
      return "Sweep";
    case Tab::kConsistency:
      return "Consistency";
    case Tab::kEngine:
      return "Engine";
    case Tab::kMerge:
      return "Merge";
  }
  return "?";
}

const char* tab_id(Tab t) {
  switch (t) {
    case Tab::kMask:
      return "mask";
    case Tab::kPages:
      return "pages";
    case Tab::kLocal:
      return "local";
    case Tab::kSplit:
      return "split";
    case Tab::kSoftmax:
      return "softmax";
    case Tab::kDiff:
      return "diff";
    case Tab::kTiming:
      return "timing";
    case Tab::kSweep:
      return "sweep";
    case Tab::kConsistency:
      return "consistency";
    case Tab::kEngine:
      return "engine";
    case Tab::kMerge:
      return "merge";
  }
  return "?";
}

std::optional<Tab> parse_tab(const std::string& s) {
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  for (Tab t : kTabs) {
    std::string title = tab_title(t);
    std::transform(title.begin(), title.end(), title.begin(), [](unsigned char c) { return std::tolower(c); });
    if (l == tab_id(t) || l == title) return t;
  }
  return std::nullopt;
}

bool apply_view(const std::string& name, UiState& ui) {
  static const std::pair<const char*, int> pages[] = {{"pool", 0}, {"scales", 1}, {"channels", 2}};
  static const std::pair<const char*, int> diff[] = {{"baseline", 0}, {"dequantised", 1}, {"original", 2}};
  for (const auto& [n, v] : pages)
    if (name == n) return ui.pages_view = v, true;
  for (const auto& [n, v] : diff)
    if (name == n) return ui.diff_reference = v, true;
  if (const std::optional<Engine> e = parse_engine(name)) return ui.engine = static_cast<int>(*e), true;
  return false;
}

}  // namespace attnscope::gui
