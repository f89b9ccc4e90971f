#include "consistency_panel.h"

#include <imgui.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "draw/axes.h"
#include "draw/colormap.h"
#include "draw/text_fit.h"

namespace attnscope::gui {

ConsistencyPlot build_consistency_plot(const ConsistencyReport& r) {
  ConsistencyPlot p;
  p.n = r.n;
  double lo = INFINITY, hi = -INFINITY;
  for (size_t k = 0; k < r.backends.size(); ++k) {
    const BackendConsistency& b = r.backends[k];
    if (b.max_abs.empty()) continue;  // not run: no number
    ConsistencySeries s;
    s.backend = b.backend;
    s.index = static_cast<int>(k);
    s.y.assign(b.max_abs.size(), std::numeric_limits<double>::quiet_NaN());
    s.kind.assign(b.max_abs.size(), 0);
    for (size_t i = 0; i < b.max_abs.size(); ++i) {
      const bool differ = b.rows_identical[i] < b.rows_per_position;
      if (b.nonfinite[i] > 0) {
        s.kind[i] = 3;
      } else if (b.max_abs[i] > 0) {
        s.kind[i] = 1;
        s.y[i] = std::log10(b.max_abs[i]);
        lo = std::min(lo, s.y[i]);
        hi = std::max(hi, s.y[i]);
      } else if (differ) {
        s.kind[i] = 2;
      }
      p.any_difference |= s.kind[i] != 0;
    }
    p.series.push_back(std::move(s));
  }
  if (lo <= hi) {
    p.y_lo = std::floor(lo);
    p.y_hi = std::max(std::ceil(hi), p.y_lo + 1);
  }
  return p;
}

ConsistencyPanel::~ConsistencyPanel() {
  if (cancel_) cancel_->store(true);  // the future's destructor waits for the worker: make that short
}

void ConsistencyPanel::start_with(int n) {
  n_ = n;
  autostart_ = true;
}

void ConsistencyPanel::start(const Session& s) {
  error_.clear();
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  progress_ = std::make_shared<Progress>();
  job_case_ = s.spec();
  ConsistencyOptions opt;
  opt.cancel = cancel_.get();
  auto prog = progress_;
  opt.progress = [prog](const std::string& stage, double x) {  // from the worker and the backends' threads
    std::lock_guard<std::mutex> lock(prog->mu);
    prog->stage = stage;
    prog->fraction.store(x);
  };
  auto cancel = cancel_;  // kept alive by the job
  const CaseSpec c = s.spec();
  const int n = n_;
  job_ = std::async(std::launch::async, [c, n, opt, cancel] { return check_consistency(c, n, opt); });
}

void ConsistencyPanel::draw_verdicts(const ConsistencyReport& r) {
  if (!ImGui::BeginTable("verdicts", 5, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) return;
  ImGui::TableSetupColumn("backend");
  ImGui::TableSetupColumn("rows bit-identical");
  ImGui::TableSetupColumn("max |diff|");
  ImGui::TableSetupColumn("first differing key per request");
  ImGui::TableSetupColumn("verdict", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableHeadersRow();
  for (size_t k = 0; k < r.backends.size(); ++k) {
    const BackendConsistency& b = r.backends[k];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    const bool ran = b.verdict != ConsistencyVerdict::kNotRun;
    if (ran) {
      int si = 0;  // the series' colour: its index among the backends that ran
      for (size_t j = 0; j < k; ++j) si += r.backends[j].verdict != ConsistencyVerdict::kNotRun;
      const Rgba c = owner_colour(si);
      ImGui::TextColored(ImVec4(c.r / 255.f, c.g / 255.f, c.b / 255.f, 1), "%s", b.backend.c_str());
    } else {
      ImGui::TextDisabled("%s", b.backend.c_str());
    }
    ImGui::TableNextColumn();
    if (ran)
      ImGui::Text("%lld of %lld", static_cast<long long>(b.identical_rows()), static_cast<long long>(b.rows_per_position * r.n));
    ImGui::TableNextColumn();
    if (ran) ImGui::Text("%.3g", b.max_diff);
    ImGui::TableNextColumn();
    if (ran && b.first_diff >= 0) {
      std::string keys;
      for (size_t q = 0; q < b.first_key_by_request.size(); ++q)
        keys += (q ? ", " : "") + (b.first_key_by_request[q] < 0 ? std::string("-") : std::to_string(b.first_key_by_request[q]));
      text_elided(keys, 260);
    }
    ImGui::TableNextColumn();
    const ImVec4 col = b.verdict == ConsistencyVerdict::kBitIdentical ? ImVec4(0.45f, 0.85f, 0.45f, 1)
                       : b.verdict == ConsistencyVerdict::kDiffers    ? ImVec4(1, 0.8f, 0.3f, 1)
                       : b.verdict == ConsistencyVerdict::kFailed     ? ImVec4(1, 0.35f, 0.35f, 1)
                                                                      : ImVec4(0.6f, 0.6f, 0.6f, 1);
    std::string t = b.verdict_text();
    if (const auto cut = t.find("; first differing key per request"); cut != std::string::npos) t.resize(cut);  // its column
    if (b.verdict == ConsistencyVerdict::kBitIdentical && b.promises_bits) t += " (as promised: rows computed independently)";
    text_elided(t, -1, &col);
  }
  ImGui::EndTable();
}

void ConsistencyPanel::draw_chart(const ConsistencyReport& r, const ConsistencyPlot& p) {
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float h = std::max(220.f, avail.y - 8);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("chart", ImVec2(avail.x, h));
  const bool hovered = ImGui::IsItemHovered();
  const float left = 78, right = 190, top = 22, bottom = 40;
  const ImVec2 a(p0.x + left, p0.y + top), b(p0.x + avail.x - right, p0.y + h - bottom);
  dl->AddRectFilled(a, b, IM_COL32(25, 25, 30, 255));
  dl->AddRect(a, b, IM_COL32(130, 130, 130, 255));
  const ImU32 grid = IM_COL32(60, 60, 70, 255), text = IM_COL32(190, 190, 190, 255), dim = IM_COL32(130, 130, 140, 255);
  // bands: NaN/Inf mismatches on top, bit-identical positions on the floor, numbers between
  const float y_nan = a.y + 8, y_top = a.y + 22, y_bot = b.y - 24, y_floor = b.y - 9;
  const int n = std::max(p.n, 1);
  auto X = [&](double i) { return a.x + static_cast<float>((i + 0.5) / n) * (b.x - a.x); };
  auto Y = [&](double v) { return y_bot - static_cast<float>((v - p.y_lo) / (p.y_hi - p.y_lo)) * (y_bot - y_top); };
  for (int i : nice_ticks(p.n, 12)) {
    dl->AddLine(ImVec2(X(i), a.y), ImVec2(X(i), b.y), grid);
    char l[16];
    std::snprintf(l, sizeof l, "%d", i);
    dl->AddText(ImVec2(X(i) - 3.5f * static_cast<float>(std::strlen(l)), b.y + 3), text, l);
  }
  const int decades = static_cast<int>(p.y_hi - p.y_lo);
  const int every = std::max(1, decades / 8);
  for (int e = static_cast<int>(p.y_lo); e <= static_cast<int>(p.y_hi); e += every)
    for (int m : decades <= 2 ? std::vector<int>{1, 2, 5} : std::vector<int>{1}) {  // 2 and 5 between few decades
      const double v = e + std::log10(m);
      if (v > p.y_hi + 1e-9) break;
      dl->AddLine(ImVec2(a.x, Y(v)), ImVec2(b.x, Y(v)), grid);
      char l[16];
      std::snprintf(l, sizeof l, "%de%d", m, e);
      dl->AddText(ImVec2(a.x - 8 - ImGui::CalcTextSize(l).x, Y(v) - 7), text, l);
    }
  dl->AddLine(ImVec2(a.x, y_floor), ImVec2(b.x, y_floor), dim);
  dl->AddText(ImVec2(a.x - 8 - ImGui::CalcTextSize("equal").x, y_floor - 7), dim, "equal");
  bool any_nonfinite = false;
  for (const auto& s : p.series) any_nonfinite |= std::find(s.kind.begin(), s.kind.end(), 3) != s.kind.end();
  if (any_nonfinite) {
    dl->AddLine(ImVec2(a.x, y_nan), ImVec2(b.x, y_nan), dim);
    dl->AddText(ImVec2(a.x - 8 - ImGui::CalcTextSize("NaN/Inf").x, y_nan - 7), dim, "NaN/Inf");
  }
  const char* x_title = "position i among the last N tokens (decode step i)";
  dl->AddText(ImVec2((a.x + b.x) / 2 - ImGui::CalcTextSize(x_title).x / 2, b.y + 20), text, x_title);
  dl->AddText(ImVec2(p0.x + 4, p0.y), text, "max |prefill - decode| over requests, heads, dims (log)");
  auto Yk = [&](const ConsistencySeries& s, size_t i) { return s.kind[i] == 1 ? Y(s.y[i]) : s.kind[i] == 3 ? y_nan : y_floor; };
  for (size_t si = 0; si < p.series.size(); ++si) {
    const ConsistencySeries& s = p.series[si];
    const ImU32 col = pack_abgr(owner_colour(static_cast<int>(si)));
    const BackendConsistency& bc = r.backends[s.index];
    if (bc.first_diff >= 0) {  // where it starts to differ
      const ImU32 faint = (col & 0x00ffffffu) | 0x90000000u;
      dl->AddLine(ImVec2(X(bc.first_diff), a.y), ImVec2(X(bc.first_diff), b.y), faint, 1.5f);
    }
    for (size_t i = 0; i < s.kind.size(); ++i) {
      const ImVec2 q(X(static_cast<double>(i)), Yk(s, i));
      if (i > 0) dl->AddLine(ImVec2(X(static_cast<double>(i - 1)), Yk(s, i - 1)), q, col, 2.f);
      if (s.kind.size() <= 200) {
        if (s.kind[i] == 2)
          dl->AddCircle(q, 3.5f, col);  // bits differ at |diff| 0 (signed zeros)
        else
          dl->AddCircleFilled(q, s.kind[i] == 0 ? 2.f : 3.f, col);
      }
    }
    const float ly = a.y + 4 + 18 * static_cast<float>(si);
    dl->AddLine(ImVec2(b.x + 12, ly + 7), ImVec2(b.x + 34, ly + 7), col, 3);
    dl->AddText(ImVec2(b.x + 40, ly), text, s.backend.c_str());
  }
  if (!p.any_difference && !p.series.empty()) {
    const char* t = "every backend shown is bit-identical at every position";
    dl->AddText(ImVec2((a.x + b.x) / 2 - ImGui::CalcTextSize(t).x / 2, (y_top + y_bot) / 2), text, t);
  }
  if (hovered && !p.series.empty()) {
    const float mx = ImGui::GetIO().MousePos.x;
    const int i = std::clamp(static_cast<int>(std::floor((mx - a.x) / (b.x - a.x) * n)), 0, p.n - 1);
    dl->AddLine(ImVec2(X(i), a.y), ImVec2(X(i), b.y), IM_COL32(220, 220, 220, 120));
    ImGui::BeginTooltip();
    ImGui::Text("position %d: decode step %d against the prefill's query %d", i, i, i);
    std::string keys;
    for (size_t q = 0; q < r.kv_lens.size() && q < 8; ++q) keys += (q ? ", " : "") + std::to_string(r.kv_lens[q] - r.n + i);
    if (r.kv_lens.size() > 8) keys += ", ...";
    ImGui::TextDisabled("the query's key (absolute position) per request: %s", keys.c_str());
    for (const auto& s : p.series) {
      const BackendConsistency& bc = r.backends[s.index];
      const long long same = bc.rows_identical[i], rows = bc.rows_per_position;
      if (s.kind[i] == 0)
        ImGui::Text("%s: bit-identical (%lld rows)", s.backend.c_str(), rows);
      else if (s.kind[i] == 3)
        ImGui::Text("%s: %lld NaN/Inf mismatches, max |diff| %.3g elsewhere; %lld of %lld rows bit-identical", s.backend.c_str(),
                    static_cast<long long>(bc.nonfinite[i]), bc.max_abs[i], same, rows);
      else
        ImGui::Text("%s: max |diff| %.3g; %lld of %lld rows bit-identical", s.backend.c_str(), bc.max_abs[i], same, rows);
    }
    ImGui::EndTooltip();
  }
}

void ConsistencyPanel::draw(const Session& s, UiState&) {
  const CaseSpec& c = s.spec();
  int min_kv = INT_MAX;
  for (const auto& rq : c.requests) min_kv = std::min(min_kv, rq.kv_len);
  if (autostart_ && !job_.valid()) {
    autostart_ = false;
    start(s);
  }
  if (job_.valid() && job_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    try {
      report_ = job_.get();
      report_case_ = job_case_;
      plot_ = build_consistency_plot(*report_);
    } catch (const std::exception& e) {  // the case cannot be checked (CaseError names --last or the path)
      error_ = e.what();
    }
  }
  const bool running = job_.valid();
  ImGui::SetNextItemWidth(120);
  ImGui::InputInt("last N tokens", &n_);
  n_ = std::clamp(n_, 1, std::max(1, min_kv));
  ImGui::SameLine();
  if (running) {
    if (ImGui::Button("Cancel")) cancel_->store(true);
    ImGui::SameLine();
    std::string stage;
    {
      std::lock_guard<std::mutex> lock(progress_->mu);
      stage = progress_->stage;
    }
    ImGui::ProgressBar(static_cast<float>(progress_->fraction.load()), ImVec2(420, 0), stage.c_str());
  } else if (ImGui::Button("Run check")) {
    start(s);
  }
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped(
      "The last N tokens of every request as one prefill (q_len N) and as N decode steps (the cache one key longer each "
      "step), per backend of the case: O of the prefill's query i against decode step i. cpu.reference and cpu.lowp "
      "compute each row on its own and must be bit-identical; another backend's difference is its answer.");
  ImGui::PopStyleColor();
  if (!error_.empty()) ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", error_.c_str());
  if (!report_) {
    if (!running) ImGui::TextWrapped("Run the check on the current case: the verdicts and the chart appear here.");
    return;
  }
  const ConsistencyReport& r = *report_;
  if (report_case_ != c) ImGui::TextColored(ImVec4(1, 0.8f, 0.3f, 1), "The case has changed since this check ran: run it again.");
  std::string head = r.case_name + ": the last " + std::to_string(r.n) + " tokens of " + std::to_string(r.kv_lens.size()) +
                     " requests, O of " + std::to_string(r.num_qo_heads) + " heads x " + std::to_string(r.head_dim_vo) +
                     " dims in " + r.dtype + (r.kv_note.empty() ? "" : "; " + r.kv_note);
  text_elided(head);
  draw_verdicts(r);
  const int code = r.exit_code();
  ImGui::TextColored(code == 1   ? ImVec4(1, 0.35f, 0.35f, 1)
                     : code == 3 ? ImVec4(1, 0.8f, 0.3f, 1)
                                 : ImVec4(0.45f, 0.85f, 0.45f, 1),
                     "%s", r.summary_line().c_str());
  draw_chart(r, *plot_);
}

}  // namespace attnscope::gui
