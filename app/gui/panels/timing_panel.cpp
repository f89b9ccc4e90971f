#include "timing_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "attnscope/registry.h"
#include "attnscope/plan.h"

namespace attnscope::gui {

TimingItems build_timing_items(const Session& s) {
  TimingItems it;
  const CaseSpec& c = s.spec();
  it.plan_us = s.plan.plan_us;
  const WorkCounts w = work_counts(c, s.plan);
  it.flops = w.flops;
  it.bytes = w.bytes;
  for (const auto& r : s.results) {
    TimingRow row;
    row.backend = r.backend;
    row.status = r.ok() ? (r.message.empty() ? "ok" : "ok, " + r.message) : std::string(status_name(r.status)) + ": " + r.message;
    row.host_ms = r.timing.host_ms;
    row.device_ms = r.timing.device_ms;
    row.device_timed = r.timing.reps > 0;
    const double ms = row.device_timed ? row.device_ms : row.host_ms;
    if (r.ok() && ms > 0) {
      row.tflops = it.flops / (ms * 1e-3) / 1e12;
      row.gbps = it.bytes / (ms * 1e-3) / 1e9;
    }
    it.max_ms = std::max(it.max_ms, std::max(row.host_ms, row.device_ms));
    it.rows.push_back(row);
  }
  return it;
}

void TimingPanel::draw(const Session& s, UiState& ui) {
  if (built_for_ != &s) {
    items_ = build_timing_items(s);
    built_for_ = &s;
  }
  const TimingItems& it = items_;
  ImGui::Text("plan %.1f us on the host; %.3g GFLOP per run (allowed pairs), %.3g MB least traffic", it.plan_us, it.flops / 1e9,
              it.bytes / 1e6);
  ImGui::TextDisabled(
      "CPU backends: host wall time. GPU backends are timed with CUDA events by attnscope-cli bench (median of N); here they "
      "show host time of one run unless benchmarked.");
  const float bar_w = std::max(120.f, ImGui::GetContentRegionAvail().x - 560);
  if (ImGui::BeginTable("timing", 5, ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg)) {
    ImGui::TableSetupColumn("backend", ImGuiTableColumnFlags_WidthFixed, 130);
    ImGui::TableSetupColumn("time", ImGuiTableColumnFlags_WidthFixed, bar_w + 90);
    ImGui::TableSetupColumn("TFLOP/s", ImGuiTableColumnFlags_WidthFixed, 80);
    ImGui::TableSetupColumn("GB/s", ImGuiTableColumnFlags_WidthFixed, 80);
    ImGui::TableSetupColumn("status");
    ImGui::TableHeadersRow();
    for (const auto& r : it.rows) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(r.backend.c_str());
      ImGui::TableNextColumn();
      const double ms = r.device_timed ? r.device_ms : r.host_ms;
      const float frac = it.max_ms > 0 ? static_cast<float>(ms / it.max_ms) : 0.f;
      char label[48];
      std::snprintf(label, sizeof label, "%.3g ms %s", ms, r.device_timed ? "device" : "host");
      ImGui::ProgressBar(frac, ImVec2(bar_w, 0), "");
      ImGui::SameLine();
      ImGui::TextUnformatted(label);
      ImGui::TableNextColumn();
      ImGui::Text("%.3g", r.tflops);
      ImGui::TableNextColumn();
      ImGui::Text("%.3g", r.gbps);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(r.status.c_str());
    }
    ImGui::EndTable();
  }
  // GPU timing with CUDA events, the same measurement as attnscope-cli bench
  ImGui::Separator();
  std::vector<std::string> gpu;
  for (const auto& id : s.spec().backends)
    if (is_gpu_backend(id)) gpu.push_back(id);
  if (bench_.valid() && bench_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) report_ = bench_.get();
  if (gpu.empty()) {
    ImGui::TextDisabled("No GPU backend in this case: add cuda.flash under Backends to benchmark it.");
  } else if (bench_.valid()) {
    ImGui::Text("benchmarking %zu GPU backends (CUDA events, 20 runs) ...", gpu.size());
  } else if (ImGui::Button("Benchmark GPU backends (CUDA events)")) {
    const CaseSpec c = s.spec();
    bench_ = std::async(std::launch::async, [c, gpu] { return run_bench(c, gpu, 20); });
  }
  if (report_) {
    const BenchReport& r = *report_;
    ImGui::Text("%s: copy %.0f GB/s, plan %.1f us", r.device.c_str(), r.copy_gbps, r.plan_us);
    for (const auto& row : r.rows) {
      if (row.status != "ok") {
        ImGui::Text("%-18s %s", row.backend.c_str(), row.status.c_str());
        continue;
      }
      ImGui::Text("%-18s median %.4f ms (%.4f-%.4f), %.1f TFLOP/s, %.0f GB/s, %.0f%% of copy bandwidth%s%s", row.backend.c_str(),
                  row.median_ms, row.min_ms, row.max_ms, row.tflops, row.gbps, 100 * row.copy_share, row.note.empty() ? "" : "; ",
                  row.note.c_str());
    }
  }
  (void)ui;
}

}  // namespace attnscope::gui
