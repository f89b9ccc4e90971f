// The Sweep tab's planning-cost view (core/plan_cost.h, as `attnscope-cli bench --plan-only`): every
// planner's host time per call against the batch size (the case's requests cut or extended), on a
// worker thread with progress and cancel, drawn with the sweep's chart (log axes), hover to read a point.
#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "plan_cost.h"
#include "session.h"
#include "sweep_panel.h"

namespace attnscope::gui {

// The chart of a report: one series per column (x: batch size, y: microseconds), log x, log y
// where the times span a decade or more.
SweepPlot build_plan_cost_plot(const PlanCostReport& r);

class PlanCostPanel {
 public:
  void draw(const Session& s);
  void start_next_draw() { autostart_ = true; }  // attnscope --plan-cost
  bool busy() const { return job_.valid() || autostart_; }

 private:
  void start(const Session& s);
  std::string batches_ = "1:1024:x2";
  int reps_ = 20;
  bool autostart_ = false;
  std::string error_;
  std::future<PlanCostReport> job_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::shared_ptr<std::atomic<int>> done_;
  int total_ = 0;
  std::optional<PlanCostReport> report_;
  std::optional<SweepPlot> plot_;
};

}  // namespace attnscope::gui
