// Diff panel: a comparison's error per (token, head) as a heatmap on a log colour scale with its
// legend, the histogram of errors, the statistics with verdicts, and for a clicked cell both
// backends' values over head_dim.
#pragma once

#include <string>
#include <vector>

#include "draw/colormap.h"
#include "draw/texture.h"
#include "gui_state.h"
#include "session.h"

namespace attnscope::gui {

struct DiffItems {
  bool available = false;
  std::string why;  // when not available
  std::string backend, baseline;
  int rows = 0, cols = 0;  // heatmap: token groups x heads
  int tokens_per_row = 1;
  std::vector<float> log_err;    // [rows * cols] log10 of the max error in the cell; NaN = not compared
  float lo = -8, hi = 0;         // colour scale (log10)
  std::vector<float> histogram;  // counts per bin of log10 error
  float hist_lo = -10, hist_hi = 1;
  int zero_errors = 0;   // (token, head) rows with error exactly 0
  int not_compared = 0;  // (token, head) rows left out: a sampled reference did not compute them
};

// A heatmap cell's colour: the viridis ramp over [lo, hi] (log10), and for a cell with no compared
// row (NaN) a grey that the ramp never gives, named in the legend.
Rgba diff_cell_colour(float log_err, float lo, float hi);
constexpr Rgba kNotComparedColour{128, 128, 128, 255};

DiffItems build_diff_items(const Session& s, int diff_index, int max_rows = 512);
DiffItems build_diff_items(const Session& s, const DiffReport& d, int max_rows = 512);

class DiffPanel {
 public:
  void draw(const Session& s, UiState& ui);

 private:
  const Session* built_for_ = nullptr;
  int built_index_ = -1;
  bool any_pair_ = false;  // compare any two results, not only the case's comparisons
  std::string pick_a_, pick_b_;
  std::string built_pair_;
  DiffReport custom_;
  DiffItems items_;
  Texture tex_;
};

}  // namespace attnscope::gui
