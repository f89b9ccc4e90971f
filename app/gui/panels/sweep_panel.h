// Sweep panel: the case run once per value of one case path (core/sweep.h, as `attnscope-cli
// sweep`), on a worker thread with progress and cancel; a line chart per backend (time or TFLOP/s
// against the value, labelled axes, log scales where the values span a decade or more, legend,
// hover to read a point, click to open that value's case), the plan's figures per value, CSV out.
#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gui_state.h"
#include "session.h"
#include "sweep.h"

namespace attnscope::gui {

struct SweepSeries {
  std::string backend;
  std::vector<double> x, y;  // points drawn (x: the value); decimated when the backend ran on more
  std::vector<int> point;    // index into the report's points
  int ran = 0;               // points where the backend ran (drawn or not)
};

struct SweepPlot {
  bool numeric = true;  // every valid value is a number (else x is the value's index)
  std::string x_label, y_label;
  bool log_x = false, log_y = false;
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;  // ranges (in log10 when log)
  std::vector<double> x_ticks, y_ticks;           // tick positions in data units
  std::vector<std::string> x_tick_labels, y_tick_labels;
  std::vector<SweepSeries> series;
  std::vector<std::string> value_labels;  // per point: the value as text
  int invalid = 0;                        // points the case rejected
};

// metric 0: time in ms (device time where timed, else host), 1: TFLOP/s. A series of more than
// max_points is decimated for drawing: sorted by x, cut into max_points / 4 buckets, each keeping
// its first, lowest, highest and last point (every spike stays visible).
SweepPlot build_sweep_plot(const SweepReport& r, int metric, int max_points = 2000);

// Ticks over [lo, hi] (log10 units when log): at most about 12, finite for any range (a step below
// the values' rounding unit gives the two ends only).
void sweep_ticks(double lo, double hi, bool log, std::vector<double>* at, std::vector<std::string>* label);

// The series point under the mouse (series -1: none) and whether the chart was clicked this frame.
struct SweepHover {
  int series = -1, k = -1;
  bool clicked = false;
};
// Draws p's chart (axes, ticks, series, legend) in the space left, at least 200 px high.
SweepHover draw_sweep_chart(const SweepPlot& p);

class SweepPanel {
 public:
  void draw(const Session& s, UiState& ui);
  // Pre-fills path and values and starts the sweep at the next draw (attnscope --sweep PATH=VALUES).
  void start_with(const std::string& set_arg);
  bool busy() const { return job_.valid() || autostart_; }
  // Shows a report saved by `attnscope-cli sweep --json` (attnscope --sweep-report FILE).
  void show(SweepReport r);

 private:
  void start(const Session& s);
  void draw_table(const SweepReport& r, const SweepPlot& p);  // the plan figures per value, Save CSV
  std::string path_ = "/requests/*/kv_len", values_ = "64:8192:x2", csv_path_ = "sweep.csv";
  int reps_ = 0, metric_ = 0;
  bool autostart_ = false;
  std::string error_, saved_, note_;
  std::future<SweepReport> job_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::shared_ptr<std::atomic<int>> done_;
  int total_ = 0;
  std::optional<SweepReport> report_;
  nlohmann::json base_;  // the case the report was run on
  // the plot of report_ for metric_, built when either changes (a report can hold 200,000 points)
  std::optional<SweepPlot> plot_;
  int plot_metric_ = -1;
};

}  // namespace attnscope::gui
