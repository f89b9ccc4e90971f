// Consistency panel: decode versus prefill (core/consistency.h, as `attnscope-cli consistency`), on a
// worker thread with progress and cancel; the verdict per backend and a chart of max |diff| per
// position (log y, bit-identical positions on a floor line, NaN/Inf mismatches on a ceiling line).
#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "consistency.h"
#include "gui_state.h"
#include "session.h"

namespace attnscope::gui {

struct ConsistencySeries {
  std::string backend;
  int index = 0;              // into the report's backends
  std::vector<double> y;      // [n] log10 max |diff|; NaN where bit-identical ...
  std::vector<uint8_t> kind;  // [n] 0 bit-identical, 1 a number in y, 2 bits differ at |diff| 0, 3 NaN/Inf mismatch
};

struct ConsistencyPlot {
  int n = 0;
  double y_lo = -8, y_hi = 0;             // decades drawn (log10), whole numbers
  std::vector<ConsistencySeries> series;  // the backends that ran, in the report's order
  bool any_difference = false;
};

// The chart's data: y range from the smallest to the largest nonzero max |diff| over every series,
// widened to whole decades (at least one); without a difference, -8 .. 0.
ConsistencyPlot build_consistency_plot(const ConsistencyReport& r);

class ConsistencyPanel {
 public:
  ~ConsistencyPanel();
  void draw(const Session& s, UiState& ui);
  // Pre-fills N and starts the check at the next draw (attnscope --consistency N).
  void start_with(int n);
  bool busy() const { return job_.valid() || autostart_; }

 private:
  struct Progress {
    std::mutex mu;
    std::string stage;
    std::atomic<double> fraction{0};
  };
  void start(const Session& s);
  void draw_chart(const ConsistencyReport& r, const ConsistencyPlot& p);
  void draw_verdicts(const ConsistencyReport& r);
  int n_ = 16;
  bool autostart_ = false;
  std::string error_;
  std::future<ConsistencyReport> job_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::shared_ptr<Progress> progress_;
  std::optional<ConsistencyReport> report_;
  std::optional<ConsistencyPlot> plot_;
  CaseSpec report_case_;  // what the report was run on (the case may change after)
  CaseSpec job_case_;
};

}  // namespace attnscope::gui
