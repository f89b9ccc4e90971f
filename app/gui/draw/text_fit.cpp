#include "text_fit.h"

namespace attnscope::gui {

std::string elide(const std::string& s, float max_w, const std::function<float(const std::string&)>& width) {
  if (width(s) <= max_w) return s;
  // binary search on the byte length, then back to a character boundary
  size_t lo = 0, hi = s.size();
  while (lo < hi) {
    const size_t mid = (lo + hi + 1) / 2;
    if (width(s.substr(0, mid) + "...") <= max_w)
      lo = mid;
    else
      hi = mid - 1;
  }
  size_t n = lo;
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  while (n > 0 && s[n - 1] == ' ') --n;
  return s.substr(0, n) + "...";
}

bool text_elided(const std::string& s, float max_w, const ImVec4* colour) {
  if (max_w < 0) max_w = ImGui::GetContentRegionAvail().x;
  const std::string shown = elide(s, max_w, [](const std::string& t) { return ImGui::CalcTextSize(t.c_str()).x; });
  if (colour)
    ImGui::TextColored(*colour, "%s", shown.c_str());
  else
    ImGui::TextUnformatted(shown.c_str());
  const bool cut = shown.size() != s.size() || shown != s;
  if (cut && ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 50);
    ImGui::TextUnformatted(s.c_str());
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
  return cut;
}

}  // namespace attnscope::gui
