#include "axes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace attnscope::gui {

std::vector<int> nice_ticks(int n, int max_ticks) {
  std::vector<int> t;
  if (n <= 0 || max_ticks <= 0) return t;
  long step = 1;
  for (long mag = 1;; mag *= 10) {
    for (long m : {1, 2, 5})
      if ((n + m * mag - 1) / (m * mag) <= max_ticks) {
        step = m * mag;
        goto found;
      }
  }
found:
  for (long v = 0; v < n; v += step) t.push_back(static_cast<int>(v));
  return t;
}

std::vector<double> nice_ticks_real(double lo, double hi, int max_ticks) {
  std::vector<double> t;
  if (!(hi > lo) || max_ticks <= 0 || !std::isfinite(lo) || !std::isfinite(hi)) return t;
  double step = std::pow(10.0, std::floor(std::log10((hi - lo) / max_ticks)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if ((hi - lo) / (m * step) <= max_ticks) {
      step *= m;
      break;
    }
  for (double v = std::ceil(lo / step) * step; v <= hi * (1 + 1e-12) + 1e-300; v += step)
    t.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  return t;
}

void draw_axes(ImDrawList* dl, ImVec2 p0, ImVec2 size, int nx, int ny, const char* x_title, const char* y_title) {
  const ImU32 text = IM_COL32(185, 185, 185, 255), tick = IM_COL32(185, 185, 185, 160);
  char b[24];
  const int xmax = std::max(1, static_cast<int>(size.x / 56));  // room for a 6-digit label each
  for (int v : nice_ticks(nx, xmax)) {
    const float x = p0.x + size.x * v / std::max(1, nx);
    dl->AddLine(ImVec2(x, p0.y - 4), ImVec2(x, p0.y), tick);
    std::snprintf(b, sizeof b, "%d", v);
    // a label running past the grid's right edge would overprint the axis title: tick only
    if (x + 2 + 7.f * static_cast<float>(std::strlen(b)) > p0.x + size.x + 2) continue;
    dl->AddText(ImVec2(x + 2, p0.y - 16), text, b);
  }
  const int ymax = std::max(1, static_cast<int>(size.y / 22));
  for (int v : nice_ticks(ny, ymax)) {
    const float y = p0.y + size.y * v / std::max(1, ny);
    dl->AddLine(ImVec2(p0.x - 4, y), ImVec2(p0.x, y), tick);
    std::snprintf(b, sizeof b, "%d", v);
    if (y + 12 > p0.y + size.y + 2) continue;  // would overprint the title below the grid
    dl->AddText(ImVec2(p0.x - 8 - 7.f * static_cast<float>(std::strlen(b)), y - 1), text, b);
  }
  dl->AddText(ImVec2(p0.x + size.x + 4, p0.y - 16), text, x_title);
  dl->AddText(ImVec2(p0.x - 42, p0.y + size.y + 2), text, y_title);  // below the y ticks; callers leave the line free
}

}  // namespace attnscope::gui
