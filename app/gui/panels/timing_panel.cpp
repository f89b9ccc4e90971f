#include "timing_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "attnscope/mask.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "draw/text_fit.h"

namespace attnscope::gui {

WorkCounts work_done(const Session& s, const Result& r) {
  const CaseSpec& c = s.spec();
  WorkCounts w = work_counts(c, s.plan);
  if (r.row_valid.empty()) return w;
  int64_t pairs = 0, rows = 0, t = 0;
  for (size_t q = 0; q < c.requests.size(); ++q) {
    const RowMask& m = s.plan.masks[q];
    for (int i = 0; i < c.requests[q].q_len; ++i, ++t)
      if (r.row_ok(t)) pairs += allowed_in(m, q_abs_of(m, i), 0, c.requests[q].kv_len), ++rows;
  }
  const double per_pair = w.allowed_pairs ? w.flops / static_cast<double>(w.allowed_pairs) : 0;
  const double qo = c.total_q() ? (w.bytes - w.kv_bytes) / static_cast<double>(c.total_q()) : 0;
  w.allowed_pairs = pairs;
  w.flops = per_pair * static_cast<double>(pairs);
  w.bytes = w.kv_bytes + qo * static_cast<double>(rows);
  return w;
}

std::string bench_hint(const Session& s) {
  bool gpu = false;
  for (const auto& id : s.spec().backends) gpu = gpu || is_gpu_backend(id);
  if (s.env.devices.empty())
    return "No GPU here (" + (s.env.device_error.empty() ? std::string("no CUDA device") : s.env.device_error) +
           "): GPU backends cannot be benchmarked on this machine.";
  if (!gpu) return "No GPU backend in this case: add " + default_bench_backends().front() + " under Backends to benchmark it.";
  return "";
}

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
    row.overhead_ms = r.timing.overhead_ms;
    const double ms = row.device_timed ? row.device_ms : row.host_ms;
    const WorkCounts done = work_done(s, r);
    row.flops = done.flops;
    row.bytes = done.bytes;
    row.sampled = !r.row_valid.empty();
    if (r.ok() && ms > 0) {
      row.tflops = row.flops / (ms * 1e-3) / 1e12;
      row.gbps = row.bytes / (ms * 1e-3) / 1e9;
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
  // a library loaded other than the one built against times that library (issue 47): said over its figures
  for (const std::string& m : s.env.library_mismatches)
    ImGui::TextColored(ImVec4(1.0f, 0.75f, 0.3f, 1.0f), "%s: these timings are of the library running", m.c_str());
  ImGui::Text("plan %.1f us on the host; %.3g GFLOP per run (allowed pairs), %.3g MB least traffic", it.plan_us, it.flops / 1e9,
              it.bytes / 1e6);
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped(
      "CPU backends: host wall time. GPU backends are timed with CUDA events by attnscope-cli bench (median of N); here they "
      "show host time of one run unless benchmarked. TFLOP/s and GB/s count the work each run did: a sampled reference (*) "
      "computes only its sampled rows.");
  ImGui::PopStyleColor();
  // the widest time label decides the time column; the bar takes what is left of it
  float label_w = 0;
  for (const auto& r : it.rows) {
    char b[48];
    std::snprintf(b, sizeof b, "%.3g ms %s", r.device_timed ? r.device_ms : r.host_ms, r.device_timed ? "device" : "host");
    label_w = std::max(label_w, ImGui::CalcTextSize(b).x);
  }
  if (ImGui::BeginTable("timing", 6, ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp)) {
    const float ch = ImGui::CalcTextSize("0").x;
    ImGui::TableSetupColumn("backend", ImGuiTableColumnFlags_WidthFixed, ch * 20);
    ImGui::TableSetupColumn("time", ImGuiTableColumnFlags_WidthStretch, 1.4f);
    ImGui::TableSetupColumn("TFLOP/s", ImGuiTableColumnFlags_WidthFixed, ch * 10);
    ImGui::TableSetupColumn("GB/s", ImGuiTableColumnFlags_WidthFixed, ch * 9);
    ImGui::TableSetupColumn("hand-off", ImGuiTableColumnFlags_WidthFixed, ch * 10);
    ImGui::TableSetupColumn("status", ImGuiTableColumnFlags_WidthStretch, 1.f);
    ImGui::TableHeadersRow();
    for (const auto& r : it.rows) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      text_elided(r.backend);
      ImGui::TableNextColumn();
      const double ms = r.device_timed ? r.device_ms : r.host_ms;
      const float bar_w = std::max(20.f, ImGui::GetContentRegionAvail().x - label_w - ImGui::GetStyle().ItemSpacing.x);
      const float frac = it.max_ms > 0 ? static_cast<float>(ms / it.max_ms) : 0.f;
      char label[48];
      std::snprintf(label, sizeof label, "%.3g ms %s", ms, r.device_timed ? "device" : "host");
      ImGui::ProgressBar(frac, ImVec2(bar_w, 0), "");
      ImGui::SameLine();
      ImGui::TextUnformatted(label);
      ImGui::TableNextColumn();
      ImGui::Text("%.3g%s", r.tflops, r.sampled ? " *" : "");
      if (r.sampled && ImGui::IsItemHovered())
        ImGui::SetTooltip("%.3g GFLOP done: the sampled rows only (the case asks for %.3g GFLOP)", r.flops / 1e9, it.flops / 1e9);
      ImGui::TableNextColumn();
      ImGui::Text("%.3g%s", r.gbps, r.sampled ? " *" : "");
      ImGui::TableNextColumn();
      if (r.overhead_ms > 0) {  // a python: backend's worker: the call's fixed cost, apart from its time
        ImGui::Text("%.3g ms", r.overhead_ms);
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("handing the inputs to the Python worker and reading O back, per call");
      }
      ImGui::TableNextColumn();
      ImGui::TextWrapped("%s", r.status.c_str());
    }
    ImGui::EndTable();
  }
  // GPU timing with CUDA events, the same measurement as attnscope-cli bench
  ImGui::Separator();
  std::vector<std::string> gpu;
  for (const auto& id : s.spec().backends)
    if (is_gpu_backend(id)) gpu.push_back(id);
  if (bench_.valid() && bench_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) report_ = bench_.get();
  const std::string hint = bench_hint(s);
  if (!hint.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::TextWrapped("%s", hint.c_str());
    ImGui::PopStyleColor();
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
