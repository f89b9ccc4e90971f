// Timing panel: per backend host and device time as bars, TFLOP/s and GB/s from the allowed pairs
// and the least bytes moved, share of the measured device peak, and the host plan time.
#pragma once

#include <future>
#include <optional>
#include <string>
#include <vector>

#include "bench.h"
#include "gui_state.h"
#include "session.h"

namespace attnscope::gui {

struct TimingRow {
  std::string backend, status;
  double host_ms = 0, device_ms = 0;
  double overhead_ms = 0;       // the hand-off around the timed call (python: backends), 0 = none
  double flops = 0, bytes = 0;  // the work this run did: a sampled reference computes only its rows
  double tflops = 0, gbps = 0;  // from device time when measured, else host time
  bool device_timed = false;
  bool sampled = false;  // computed some query rows only
};

struct TimingItems {
  double plan_us = 0;
  double flops = 0, bytes = 0;
  std::vector<TimingRow> rows;
  double max_ms = 0;
};

TimingItems build_timing_items(const Session& s);

// The work a result did: work_counts() over the rows it computed (every row unless it is a
// sampled reference); K and V counted whole, Q and O per computed row.
WorkCounts work_done(const Session& s, const Result& r);

// Why the GPU benchmark cannot be offered ("no GPU here: ..." / "no GPU backend in this case ..."),
// "" when it can.
std::string bench_hint(const Session& s);

class TimingPanel {
 public:
  void draw(const Session& s, UiState& ui);

 private:
  const Session* built_for_ = nullptr;
  TimingItems items_;
  std::future<BenchReport> bench_;  // attnscope-cli bench's measurement, off the GUI thread
  std::optional<BenchReport> report_;
};

}  // namespace attnscope::gui
