// Diff panel: a comparison's error per (token, head) as a heatmap on a log colour scale with its
// legend, the histogram of errors, the statistics with verdicts, and for a clicked cell both
// backends' values over head_dim. For an FP8 case: a switch between the dequantised and the original
// ideal as the reference, and the error split.
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

// An FP8 case's three errors of one backend (docs/conventions.md section 10): quantisation (the
// dequantised ideal against the original ideal: FP8's, the same for every kernel), kernel (the backend
// against the dequantised ideal: what a bug report quotes) and total (against the original ideal).
struct ErrorSplit {
  bool available = false;
  std::string why;  // when not available
  std::string backend;
  DiffStats quantisation, kernel, total;  // on O
};
ErrorSplit build_error_split(const Session& s, const std::string& backend);

class DiffPanel {
 public:
  void draw(const Session& s, UiState& ui);

 private:
  const Session* built_for_ = nullptr;
  int built_index_ = -1;
  bool any_pair_ = false;  // compare any two results, not only the case's comparisons
  std::string pick_a_, pick_b_;
  std::string built_pair_;
  int built_reference_ = -1;
  DiffReport custom_;
  // FP8: the backend against the ideal the reference switch picked, when that is not the comparison
  DiffReport against_ideal_;
  bool use_ideal_ = false;
  ErrorSplit split_;
  bool reference_switch(const Session& s, const DiffReport& d, UiState& ui);
  void ideal_items(const Session& s, const UiState& ui);
  DiffItems items_;
  Texture tex_;
};

}  // namespace attnscope::gui
