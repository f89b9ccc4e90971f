#include "sweep_panel.h"

#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "attnscope/backend.h"
#include "case_json.h"
#include "draw/colormap.h"

namespace attnscope::gui {

namespace {

std::string short_num(double v) {
  char b[32];
  if (std::fabs(v) >= 1 && std::fabs(v) < 1e7 && v == std::round(v))
    std::snprintf(b, sizeof b, "%.0f", v);  // 1000, not 1e+03
  else
    std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

}  // namespace

// Powers of ten (and 2, 5 between them when few), or a linear 1-2-5 step.
void sweep_ticks(double lo, double hi, bool log, std::vector<double>* at, std::vector<std::string>* label) {
  at->clear();
  label->clear();
  if (!std::isfinite(lo) || !std::isfinite(hi) || hi < lo) return;
  if (log) {
    const int a = static_cast<int>(std::floor(lo)), b = static_cast<int>(std::ceil(hi));
    const bool dense = b - a <= 2;
    const int every = std::max(1, (b - a) / 12);  // at most about 12 decades labelled
    for (int e = a; e <= b; e += every)
      for (double m : dense ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
        const double v = m * std::pow(10.0, e), l = std::log10(v);
        if (l >= lo - 1e-9 && l <= hi + 1e-9) {
          at->push_back(v);
          label->push_back(short_num(v));
        }
      }
    return;
  }
  const double span = hi - lo;
  if (!(span > 0)) return;
  const double raw = span / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 2 ? mag : raw / mag < 5 ? 2 * mag : 5 * mag;
  // ticks by index, not by adding the step: a step below the values' rounding unit (1e17 + 16
  // steps of 1) leaves v unchanged; labels that print alike are merged
  const double first = std::ceil(lo / step);
  const double count = std::floor(hi / step + 1e-9) - first + 1;
  if (!(count >= 1 && count <= 50) || lo + step == lo || hi - step == hi) {
    for (double v : {lo, hi}) {  // full precision: the ends differ in their last digits
      char b[40];
      std::snprintf(b, sizeof b, "%.17g", v);
      if (!at->empty() && b == label->back()) continue;
      at->push_back(v);
      label->push_back(b);
    }
    return;
  }
  for (int i = 0; i < static_cast<int>(count); ++i) {
    const double v = (first + i) * step;
    const std::string l = short_num(std::fabs(v) < step * 1e-9 ? 0 : v);
    if (!label->empty() && l == label->back()) continue;
    at->push_back(v);
    label->push_back(l);
  }
}

namespace {

// Keeps a series' shape in at most about max_points: sorted by x, per x bucket the first, lowest,
// highest and last point.
void decimate(SweepSeries* s, double x_lo, double x_hi, bool log_x, int max_points) {
  const size_t n = s->x.size();
  if (n <= static_cast<size_t>(std::max(4, max_points))) return;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s->x[a] < s->x[b]; });
  const int buckets = std::max(1, max_points / 4);
  auto bucket_of = [&](double x) {
    const double t = log_x ? std::log10(x) : x;
    const double f = x_hi > x_lo ? (t - x_lo) / (x_hi - x_lo) : 0;
    return std::clamp(static_cast<int>(f * buckets), 0, buckets - 1);
  };
  SweepSeries out{s->backend, {}, {}, {}, s->ran};
  auto keep = [&](size_t i) {
    if (!out.point.empty() && out.point.back() == s->point[i]) return;
    out.x.push_back(s->x[i]);
    out.y.push_back(s->y[i]);
    out.point.push_back(s->point[i]);
  };
  for (size_t a = 0; a < n;) {
    const int b = bucket_of(s->x[order[a]]);
    size_t e = a, lo = a, hi = a;
    for (; e < n && bucket_of(s->x[order[e]]) == b; ++e) {
      if (s->y[order[e]] < s->y[order[lo]]) lo = e;
      if (s->y[order[e]] > s->y[order[hi]]) hi = e;
    }
    size_t pick[4] = {a, std::min(lo, hi), std::max(lo, hi), e - 1};  // in x order
    for (size_t k : pick) keep(order[k]);
    a = e;
  }
  *s = std::move(out);
}

}  // namespace

SweepPlot build_sweep_plot(const SweepReport& r, int metric, int max_points) {
  SweepPlot p;
  p.y_label = metric == 0 ? "time (ms)" : "TFLOP/s";
  p.x_label = r.path;
  for (const auto& pt : r.points) {
    p.value_labels.push_back(pt.value.is_string() ? pt.value.get<std::string>() : pt.value.dump());
    if (!pt.error.empty()) {
      ++p.invalid;
      continue;
    }
    p.numeric = p.numeric && pt.value.is_number();
  }
  for (size_t i = 0; i < r.points.size(); ++i) {
    const SweepPoint& pt = r.points[i];
    if (!pt.error.empty()) continue;
    const double x = p.numeric ? pt.value.get<double>() : static_cast<double>(i);
    for (const auto& b : pt.backends) {
      if (b.status != "ok") continue;
      const double y = metric == 0 ? (b.device_ms > 0 ? b.device_ms : b.host_ms) : b.tflops;
      if (!(y > 0)) continue;
      auto it = std::find_if(p.series.begin(), p.series.end(), [&](const SweepSeries& s) { return s.backend == b.backend; });
      if (it == p.series.end()) {
        p.series.push_back(SweepSeries{b.backend, {}, {}, {}, 0});
        it = p.series.end() - 1;
      }
      it->x.push_back(x);
      it->y.push_back(y);
      it->point.push_back(static_cast<int>(i));
      ++it->ran;
    }
  }
  double xl = INFINITY, xh = -INFINITY, yl = INFINITY, yh = -INFINITY;
  for (const auto& s : p.series)
    for (size_t k = 0; k < s.x.size(); ++k) {
      xl = std::min(xl, s.x[k]), xh = std::max(xh, s.x[k]);
      yl = std::min(yl, s.y[k]), yh = std::max(yh, s.y[k]);
    }
  if (xl > xh) return p;  // nothing ran
  // log scales where the values span a decade or more (and are positive)
  p.log_x = p.numeric && xl > 0 && xh / xl >= 10;
  p.log_y = yl > 0 && yh / yl >= 10;
  auto tr = [](double v, bool log) { return log ? std::log10(v) : v; };
  p.x_lo = tr(xl, p.log_x), p.x_hi = tr(xh, p.log_x);
  p.y_lo = p.log_y ? tr(yl, true) : 0, p.y_hi = tr(yh, p.log_y);
  if (p.x_hi == p.x_lo) p.x_lo -= 0.5, p.x_hi += 0.5;
  if (p.y_hi == p.y_lo) p.y_hi = p.y_lo + 1;
  const double pad = (p.y_hi - p.y_lo) * 0.05;
  p.y_hi += pad;
  if (p.log_y) p.y_lo -= pad;
  for (auto& s : p.series) decimate(&s, p.x_lo, p.x_hi, p.log_x, max_points);
  if (p.numeric) {
    sweep_ticks(p.x_lo, p.x_hi, p.log_x, &p.x_ticks, &p.x_tick_labels);
  } else {
    const size_t every = std::max<size_t>(1, r.points.size() / 24);  // labels of text values, at most about 24
    for (size_t i = 0; i < r.points.size(); i += every) {
      p.x_ticks.push_back(static_cast<double>(i));
      p.x_tick_labels.push_back(p.value_labels[i]);
    }
  }
  sweep_ticks(p.y_lo, p.y_hi, p.log_y, &p.y_ticks, &p.y_tick_labels);
  return p;
}

// The chart of a SweepPlot (axes, ticks, series, legend) in the space left below, at least 200 px high;
// returns the series point nearest the mouse (within 14 px) and whether the chart was clicked.
SweepHover draw_sweep_chart(const SweepPlot& p) {
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float h = std::max(200.f, avail.y * 0.55f);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("chart", ImVec2(avail.x, h));
  const bool hovered = ImGui::IsItemHovered();
  SweepHover hov;
  hov.clicked = ImGui::IsItemClicked();
  const float left = 70, right = 215, top = 8, bottom = 40;
  const ImVec2 a(p0.x + left, p0.y + top), b(p0.x + avail.x - right, p0.y + h - bottom);
  dl->AddRectFilled(a, b, IM_COL32(25, 25, 30, 255));
  dl->AddRect(a, b, IM_COL32(130, 130, 130, 255));
  auto tx = [&](double v) { return p.log_x ? std::log10(v) : v; };
  auto ty = [&](double v) { return p.log_y ? std::log10(v) : v; };
  auto X = [&](double v) { return a.x + static_cast<float>((tx(v) - p.x_lo) / (p.x_hi - p.x_lo)) * (b.x - a.x); };
  auto Y = [&](double v) { return b.y - static_cast<float>((ty(v) - p.y_lo) / (p.y_hi - p.y_lo)) * (b.y - a.y); };
  const ImU32 grid = IM_COL32(60, 60, 70, 255), text = IM_COL32(190, 190, 190, 255);
  float label_end = -1e9f;
  for (size_t i = 0; i < p.x_ticks.size(); ++i) {
    const float x =
        p.numeric ? X(p.x_ticks[i]) : a.x + static_cast<float>((p.x_ticks[i] - p.x_lo) / (p.x_hi - p.x_lo)) * (b.x - a.x);
    dl->AddLine(ImVec2(x, a.y), ImVec2(x, b.y), grid);
    // a label that would run into the one before it is left out (its grid line stays)
    const float lx = x - 3.5f * p.x_tick_labels[i].size();
    if (lx < label_end + 6) continue;
    dl->AddText(ImVec2(lx, b.y + 3), text, p.x_tick_labels[i].c_str());
    label_end = lx + ImGui::CalcTextSize(p.x_tick_labels[i].c_str()).x;
  }
  for (size_t i = 0; i < p.y_ticks.size(); ++i) {
    const float y = Y(p.y_ticks[i]);
    dl->AddLine(ImVec2(a.x, y), ImVec2(b.x, y), grid);
    dl->AddText(ImVec2(p0.x + 4, y - 7), text, p.y_tick_labels[i].c_str());
  }
  dl->AddText(ImVec2((a.x + b.x) / 2 - 3.5f * p.x_label.size(), b.y + 20), text, p.x_label.c_str());
  dl->AddText(ImVec2(p0.x + 4, p0.y - 2), text, p.y_label.c_str());
  // series, legend, nearest point under the mouse
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  float best = 14 * 14;
  for (size_t si = 0; si < p.series.size(); ++si) {
    const SweepSeries& sr = p.series[si];
    const ImU32 col = pack_abgr(owner_colour(static_cast<int>(si)));
    for (size_t k = 0; k < sr.x.size(); ++k) {
      const ImVec2 q(p.numeric ? X(sr.x[k]) : a.x + static_cast<float>((sr.x[k] - p.x_lo) / (p.x_hi - p.x_lo)) * (b.x - a.x),
                     Y(sr.y[k]));
      if (k > 0) {
        const ImVec2 q0(
            p.numeric ? X(sr.x[k - 1]) : a.x + static_cast<float>((sr.x[k - 1] - p.x_lo) / (p.x_hi - p.x_lo)) * (b.x - a.x),
            Y(sr.y[k - 1]));
        dl->AddLine(q0, q, col, 2.5f);
      }
      if (sr.x.size() <= 400) dl->AddCircleFilled(q, 3.5f, col);  // markers where they stay apart
      const float d2 = (q.x - mouse.x) * (q.x - mouse.x) + (q.y - mouse.y) * (q.y - mouse.y);
      if (hovered && d2 < best) best = d2, hov.series = static_cast<int>(si), hov.k = static_cast<int>(k);
    }
    const float ly = a.y + 6 + 18 * static_cast<float>(si);
    dl->AddLine(ImVec2(b.x + 12, ly + 7), ImVec2(b.x + 34, ly + 7), col, 3);
    dl->AddText(ImVec2(b.x + 40, ly), text, sr.backend.c_str());
  }
  return hov;
}

void SweepPanel::start_with(const std::string& set_arg) {
  const auto eq = set_arg.find('=');
  if (eq == std::string::npos) return;
  path_ = set_arg.substr(0, eq);
  values_ = set_arg.substr(eq + 1);
  autostart_ = true;
}

void SweepPanel::show(SweepReport r) {
  path_ = r.path;
  values_.clear();
  for (const auto& p : r.points) {
    if (!values_.empty()) values_ += ',';
    values_ += p.value.is_string() ? p.value.get<std::string>() : p.value.dump();
    if (values_.size() > 4096) {  // a field of 200,000 values helps nobody and costs every frame
      values_ = "";
      note_ = "the report's " + std::to_string(r.points.size()) + " values are not copied into the values field";
      break;
    }
  }
  base_ = r.base;
  report_ = std::move(r);
  plot_.reset();
}

void SweepPanel::start(const Session& s) {
  error_.clear();
  saved_.clear();
  SweepSpec spec;
  try {
    base_ = nlohmann::json::parse(case_to_json(s.spec()).dump());
    spec = prepare_sweep(base_, path_ + "=" + values_);
  } catch (const std::exception& e) {
    error_ = e.what();
    return;
  }
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  done_ = std::make_shared<std::atomic<int>>(0);
  total_ = static_cast<int>(spec.values.size());
  SweepOptions opt;
  opt.session.bench_reps = reps_;
  opt.cancel = cancel_.get();
  auto done = done_;
  opt.progress = [done](int i, int) { done->store(i); };
  auto cancel = cancel_;  // kept alive by the job
  const nlohmann::json base = base_;
  job_ = std::async(std::launch::async, [base, spec, opt, cancel] { return run_sweep(base, spec, opt); });
}

void SweepPanel::draw(const Session& s, UiState& ui) {
  if (autostart_ && !job_.valid()) {
    autostart_ = false;
    start(s);
  }
  if (job_.valid() && job_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    try {
      report_ = job_.get();
      plot_.reset();
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  }
  const bool running = job_.valid();
  ImGui::SetNextItemWidth(260);
  ImGui::InputText("path", &path_);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(200);
  ImGui::InputText("values", &values_);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(90);
  ImGui::InputInt("GPU reps", &reps_);
  reps_ = std::clamp(reps_, 0, 1000);
  ImGui::SameLine();
  if (running) {
    if (ImGui::Button("Cancel")) cancel_->store(true);
    ImGui::SameLine();
    char over[32];
    std::snprintf(over, sizeof over, "%d / %d", done_->load(), total_);
    ImGui::ProgressBar(total_ ? static_cast<float>(done_->load()) / total_ : 0.f, ImVec2(160, 0), over);
  } else if (ImGui::Button("Run sweep")) {
    start(s);
  }
  ImGui::TextDisabled(
      "values: V1,V2,... or START:STOP:xFACTOR or START:STOP:+STEP; * = every array element (/requests/*/kv_len, "
      "/split/fixed_split_size, /kv_cache/page_size, /heads/qo). GPU reps > 0 times GPU backends with CUDA events.");
  if (!error_.empty()) ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", error_.c_str());
  if (!note_.empty()) ImGui::TextDisabled("%s", note_.c_str());
  if (!report_) {
    if (!running) ImGui::TextWrapped("Run a sweep of the current case: the plot and the table appear here.");
    return;
  }
  const SweepReport& r = *report_;
  ImGui::RadioButton("time", &metric_, 0);
  ImGui::SameLine();
  ImGui::RadioButton("TFLOP/s", &metric_, 1);
  ImGui::SameLine();
  if (!plot_ || plot_metric_ != metric_) {
    plot_ = build_sweep_plot(r, metric_);
    plot_metric_ = metric_;
  }
  const SweepPlot& p = *plot_;
  int drawn = 0, ran = 0;
  for (const auto& sr : p.series) drawn += static_cast<int>(sr.x.size()), ran += sr.ran;
  ImGui::Text("%s over %zu values%s%s%s", r.path.c_str(), r.points.size(),
              p.invalid ? (", " + std::to_string(p.invalid) + " invalid (see the table)").c_str() : "", p.log_x ? ", log x" : "",
              p.log_y ? ", log y" : "");
  if (drawn < ran) {
    ImGui::SameLine();
    ImGui::TextDisabled("(%d of %d points drawn: each x bucket's first, lowest, highest, last)", drawn, ran);
  }

  // the chart
  const SweepHover hov = draw_sweep_chart(p);
  const int best_s = hov.series, best_k = hov.k;
  const bool clicked = hov.clicked;
  if (best_s >= 0) {
    const SweepSeries& sr = p.series[best_s];
    const SweepPoint& pt = r.points[sr.point[best_k]];
    const SweepBackend* be = nullptr;
    for (const auto& x : pt.backends)
      if (x.backend == sr.backend) be = &x;
    ImGui::BeginTooltip();
    ImGui::Text("%s = %s", r.path.c_str(), p.value_labels[sr.point[best_k]].c_str());
    if (be)
      ImGui::Text("%s: %.4g ms (%s), %.3g TFLOP/s, %.3g GB/s", be->backend.c_str(),
                  be->device_ms > 0 ? be->device_ms : be->host_ms, be->device_ms > 0 ? "CUDA events" : "host, one run",
                  be->tflops, be->gbps);
    ImGui::Text("plan: tile %d, chunk %d pages, %d work items, split %s", pt.tile, pt.chunk_pages, pt.items,
                pt.split_kv ? "yes" : "no");
    for (const auto& k : pt.comparisons) ImGui::Text("%s: %s, max abs %.3g", k.name.c_str(), k.verdict.c_str(), k.max_abs);
    ImGui::TextDisabled("click: open this value's case");
    ImGui::EndTooltip();
    if (clicked && base_.is_object()) {
      nlohmann::json j = base_;
      set_case_path(j, r.path, pt.value);
      ui.open_case_text = j.dump(2);
    }
  }

  draw_table(r, p);
}

void SweepPanel::draw_table(const SweepReport& r, const SweepPlot& p) {
  // the table, and CSV out
  ImGui::SetNextItemWidth(260);
  ImGui::InputText("##csv", &csv_path_);
  ImGui::SameLine();
  if (ImGui::Button("Save CSV")) {
    try {
      write_text_file(csv_path_, sweep_to_csv(r));
      saved_ = "written to " + csv_path_;
    } catch (const std::exception& e) {
      saved_ = e.what();
    }
  }
  if (!saved_.empty()) {
    ImGui::SameLine();
    ImGui::TextUnformatted(saved_.c_str());
  }
  const int cols = 6 + (r.points.empty() ? 0 : static_cast<int>(r.points.front().backends.size()));
  if (ImGui::BeginTable("points", std::max(cols, 6), ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* c : {"value", "tile", "chunk", "items", "split", "comparisons"}) ImGui::TableSetupColumn(c);
    if (!r.points.empty())
      for (const auto& be : r.points.front().backends) ImGui::TableSetupColumn((be.backend + " ms").c_str());
    ImGui::TableHeadersRow();
    ImGuiListClipper clip;  // only the rows on screen: a report can hold 200,000
    clip.Begin(static_cast<int>(r.points.size()));
    while (clip.Step())
      for (size_t i = static_cast<size_t>(clip.DisplayStart); i < static_cast<size_t>(clip.DisplayEnd); ++i) {
        const SweepPoint& pt = r.points[i];
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(p.value_labels[i].c_str());
        if (!pt.error.empty()) {
          ImGui::TableNextColumn();
          ImGui::TextColored(ImVec4(1, 0.5f, 0.4f, 1), "invalid");
          if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", pt.error.c_str());
          continue;
        }
        ImGui::TableNextColumn();
        ImGui::Text("%d", pt.tile);
        ImGui::TableNextColumn();
        ImGui::Text("%d", pt.chunk_pages);
        ImGui::TableNextColumn();
        ImGui::Text("%d", pt.items);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(pt.split_kv ? "yes" : "no");
        ImGui::TableNextColumn();
        int pass = 0, skip = 0, fail = 0;
        for (const auto& k : pt.comparisons) (k.verdict == "PASS" ? pass : k.verdict == "SKIP" ? skip : fail) += 1;
        if (pt.comparisons.empty())
          ImGui::TextDisabled("none in the case");
        else if (fail)
          ImGui::TextColored(ImVec4(1, 0.35f, 0.35f, 1), "%d FAIL, %d pass", fail, pass);
        else
          ImGui::Text("%d pass%s", pass, skip ? (", " + std::to_string(skip) + " not checked").c_str() : "");
        for (const auto& be : pt.backends) {
          ImGui::TableNextColumn();
          if (be.status != "ok")
            ImGui::TextDisabled("%s", be.status.substr(0, be.status.find(':')).c_str());
          else
            ImGui::Text("%.4g%s", be.device_ms > 0 ? be.device_ms : be.host_ms, be.device_ms > 0 ? "" : " host");
        }
      }
    ImGui::EndTable();
  }
}

}  // namespace attnscope::gui
