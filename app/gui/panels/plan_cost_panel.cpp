#include "plan_cost_panel.h"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "case_json.h"

namespace attnscope::gui {

SweepPlot build_plan_cost_plot(const PlanCostReport& r) {
  SweepPlot p;
  p.x_label = "batch size (requests)";
  p.y_label = "host us per call";
  p.log_x = true;
  double y_min = 1e300, y_max = 0, x_min = 1e300, x_max = 0;
  for (size_t k = 0; k < r.columns.size(); ++k) {
    SweepSeries sr;
    sr.backend = r.columns[k].name;
    for (size_t i = 0; i < r.points.size(); ++i) {
      const PlanCostPoint& pt = r.points[i];
      if (!pt.error.empty() || k >= pt.us.size() || !(pt.us[k] > 0)) continue;
      sr.x.push_back(pt.batch);
      sr.y.push_back(pt.us[k]);
      sr.point.push_back(static_cast<int>(i));
      y_min = std::min(y_min, pt.us[k]), y_max = std::max(y_max, pt.us[k]);
      x_min = std::min(x_min, static_cast<double>(pt.batch)), x_max = std::max(x_max, static_cast<double>(pt.batch));
    }
    sr.ran = static_cast<int>(sr.x.size());
    p.series.push_back(std::move(sr));
  }
  for (const auto& pt : r.points) {
    p.value_labels.push_back(std::to_string(pt.batch));
    p.invalid += !pt.error.empty();
  }
  if (y_max <= 0) return p;  // nothing timed: an empty chart
  p.log_y = y_max / y_min >= 10;
  p.x_lo = std::log10(x_min), p.x_hi = std::log10(x_max);
  if (p.x_hi - p.x_lo < 1e-9) p.x_lo -= 0.5, p.x_hi += 0.5;
  p.y_lo = p.log_y ? std::log10(y_min) - 0.05 : 0;
  p.y_hi = p.log_y ? std::log10(y_max) + 0.05 : y_max * 1.1;
  sweep_ticks(p.x_lo, p.x_hi, true, &p.x_ticks, &p.x_tick_labels);
  sweep_ticks(p.y_lo, p.y_hi, p.log_y, &p.y_ticks, &p.y_tick_labels);
  return p;
}

void PlanCostPanel::start(const Session& s) {
  error_.clear();
  PlanCostOptions opt;
  nlohmann::json base;
  try {
    opt.batches = parse_batches(batches_);
    base = nlohmann::json::parse(case_to_json(s.spec()).dump());
  } catch (const std::exception& e) {
    error_ = e.what();
    return;
  }
  opt.reps = reps_;
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  done_ = std::make_shared<std::atomic<int>>(0);
  total_ = static_cast<int>(opt.batches.size());
  opt.cancel = cancel_.get();
  auto done = done_;
  opt.progress = [done](int i, int) { done->store(i); };
  auto cancel = cancel_;  // kept alive by the job
  job_ = std::async(std::launch::async, [base, opt, cancel] { return run_plan_cost(base, opt); });
}

void PlanCostPanel::draw(const Session& s) {
  if (autostart_ && !job_.valid()) {
    autostart_ = false;
    start(s);
  }
  if (job_.valid() && job_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    try {
      report_ = job_.get();
      plot_ = build_plan_cost_plot(*report_);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  }
  ImGui::SetNextItemWidth(200);
  ImGui::InputText("batch sizes", &batches_);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(90);
  ImGui::InputInt("reps", &reps_);
  reps_ = std::clamp(reps_, 1, 1000);
  ImGui::SameLine();
  if (job_.valid()) {
    if (ImGui::Button("Cancel")) cancel_->store(true);
    ImGui::SameLine();
    char over[32];
    std::snprintf(over, sizeof over, "%d / %d", done_->load(), total_);
    ImGui::ProgressBar(total_ ? static_cast<float>(done_->load()) / total_ : 0.f, ImVec2(160, 0), over);
  } else if (ImGui::Button("Measure planning cost")) {
    start(s);
  }
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyle().Colors[ImGuiCol_TextDisabled]);
  ImGui::TextWrapped(
      "Each planner's host time per call (median of reps) with the case's requests cut or extended to each batch size "
      "(copies of the last request); sizes: 1,8,64 or START:STOP:xFACTOR. As attnscope-cli bench --plan-only.");
  ImGui::PopStyleColor();
  if (!error_.empty()) ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", error_.c_str());
  if (!report_ || !plot_) {
    if (!job_.valid()) ImGui::TextWrapped("Measure the current case's planning cost: the chart appears here.");
    return;
  }
  const PlanCostReport& r = *report_;
  if (r.split_us_at_256 >= 0)
    ImGui::Text("%s: the split plan alone at batch 256 takes %.1f us per call", r.case_name.c_str(), r.split_us_at_256);
  else
    ImGui::Text("%s: planning cost per call", r.case_name.c_str());
  const SweepHover hov = draw_sweep_chart(*plot_);
  if (hov.series >= 0) {
    const SweepSeries& sr = plot_->series[hov.series];
    const PlanCostPoint& pt = r.points[sr.point[hov.k]];
    ImGui::BeginTooltip();
    ImGui::Text("batch %d: %s %.1f us per call (median of %d)", pt.batch, sr.backend.c_str(), sr.y[hov.k], r.reps);
    ImGui::TextDisabled("%s", r.columns[hov.series].what.c_str());
    ImGui::EndTooltip();
  }
  for (const auto& pt : r.points) {
    if (!pt.error.empty()) ImGui::TextDisabled("batch %d: invalid: %s", pt.batch, pt.error.c_str());
    for (size_t k = 0; k < pt.notes.size(); ++k)
      if (!pt.notes[k].empty())
        ImGui::TextDisabled("batch %d, %s: not timed: %s", pt.batch, r.columns[k].name.c_str(), pt.notes[k].c_str());
  }
}

}  // namespace attnscope::gui
