// Tick values and axis titles around a drawn grid (mask, diff heatmap, page pool): "nice" steps
// (1, 2, 5 x 10^k) so that labels do not overlap, drawn with ImGui's draw list.
#pragma once

#include <imgui.h>

#include <vector>

namespace attnscope::gui {

// Tick values in [0, n): multiples of a 1-2-5 step giving at most about `max_ticks`, 0 first.
std::vector<int> nice_ticks(int n, int max_ticks);

// Tick values in [lo, hi] for a continuous axis: multiples of a 1-2-5 step, at most about max_ticks.
std::vector<double> nice_ticks_real(double lo, double hi, int max_ticks);

// Labels for a grid drawn at p0 with `size` pixels covering nx columns and ny rows: x ticks above
// the grid (margin: 16 px), y ticks to its left (margin: 44 px), the titles at the axes' ends. The
// caller leaves the margins free (axes_margin()) and the line below the grid (the y title).
void draw_axes(ImDrawList* dl, ImVec2 p0, ImVec2 size, int nx, int ny, const char* x_title, const char* y_title);
inline ImVec2 axes_margin() { return ImVec2(44, 16); }

}  // namespace attnscope::gui
