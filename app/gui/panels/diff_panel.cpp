#include "diff_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>

#include "attnscope/registry.h"
#include "draw/axes.h"
#include "draw/colormap.h"
#include "draw/text_fit.h"

namespace attnscope::gui {

Rgba diff_cell_colour(float log_err, float lo, float hi) {
  return std::isnan(log_err) ? kNotComparedColour : ramp((log_err - lo) / (hi - lo));
}

DiffItems build_diff_items(const Session& s, int index, int max_rows) {
  if (s.diffs.empty()) {
    DiffItems it;
    it.why =
        s.results.size() < s.spec().backends.size() ? "backends still running" : "this case has no comparisons (/comparisons)";
    return it;
  }
  index = std::clamp(index, 0, static_cast<int>(s.diffs.size()) - 1);
  return build_diff_items(s, s.diffs[index], max_rows);
}

DiffItems build_diff_items(const Session& s, const DiffReport& d, int max_rows) {
  DiffItems it;
  it.backend = d.backend;
  it.baseline = d.baseline;
  if (!d.available) {
    it.why = d.verdict.detail;
    return it;
  }
  it.available = true;
  const int H = s.spec().num_qo_heads;
  const int64_t T = s.spec().total_q();
  it.tokens_per_row = static_cast<int>(std::max<int64_t>(1, (T + max_rows - 1) / max_rows));
  it.rows = static_cast<int>((T + it.tokens_per_row - 1) / it.tokens_per_row);
  it.cols = H;
  it.log_err.assign(static_cast<size_t>(it.rows) * it.cols, NAN);
  const int bins = 44;
  it.histogram.assign(bins, 0.f);
  float mx = -INFINITY;
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const float e = d.error_map[t * H + h];
      if (std::isnan(e)) {
        ++it.not_compared;
        continue;
      }
      if (e == 0) ++it.zero_errors;
      const float l = e > 0 ? std::log10(e) : -12.f;
      float& cell = it.log_err[static_cast<size_t>(t / it.tokens_per_row) * it.cols + h];
      cell = std::isnan(cell) ? l : std::max(cell, l);  // max pooling: the worst error shows
      mx = std::max(mx, l);
      const int b = std::clamp(static_cast<int>((l - it.hist_lo) / (it.hist_hi - it.hist_lo) * bins), 0, bins - 1);
      it.histogram[b] += 1;
    }
  if (std::isfinite(mx)) {
    it.hi = std::ceil(mx);
    it.lo = it.hi - 6;
  }
  return it;
}

namespace {

// The comparison's statistics for O and LSE.
void stats_table(const DiffReport& d) {
  if (ImGui::BeginTable("stats", 3, ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg)) {
    ImGui::TableSetupColumn("statistic");
    ImGui::TableSetupColumn("O");
    ImGui::TableSetupColumn("LSE");
    ImGui::TableHeadersRow();
    auto row = [](const char* name, const std::string& a, const std::string& b) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(name);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(a.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(b.c_str());
    };
    auto f = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%.3g", v);
      return std::string(b);
    };
    row("max abs", f(d.o.max_abs), f(d.lse.max_abs));
    row("mean abs", f(d.o.mean_abs), f(d.lse.mean_abs));
    row("relative L2", f(d.o.rel_l2), f(d.lse.rel_l2));
    row("NMSE", f(d.o.nmse), f(d.lse.nmse));
    row("max ULP", std::to_string(d.o.max_ulp), std::to_string(d.lse.max_ulp));
    row("bit-identical", std::to_string(d.o.bit_identical) + " / " + std::to_string(d.o.count),
        std::to_string(d.lse.bit_identical) + " / " + std::to_string(d.lse.count));
    row("allclose 1e-2, 1e-3", d.o.allclose_loose ? "yes" : "no", d.lse.allclose_loose ? "yes" : "no");
    row("allclose 1e-3, 1e-4", d.o.allclose_tight ? "yes" : "no", d.lse.allclose_tight ? "yes" : "no");
    row("NaN / Inf (backend)", std::to_string(d.o.nan_a) + " / " + std::to_string(d.o.inf_a),
        std::to_string(d.lse.nan_a) + " / " + std::to_string(d.lse.inf_a));
    if (d.lowp_max_abs) row("lowp max abs (2x rule)", f(*d.lowp_max_abs), "");
    ImGui::EndTable();
  }
}

// The grey swatch and what it means: rows a sampled reference skipped are not errors of any size.
void not_compared_legend(const DiffItems& it, const CaseSpec& c) {
  ImGui::PushTextWrapPos(0.f);
  if (it.not_compared > 0) {
    // the swatch, then what it means: rows a sampled reference skipped are not errors of any size
    const ImVec2 q = ImGui::GetCursorScreenPos();
    const float sz = ImGui::GetTextLineHeight();
    ImGui::GetWindowDrawList()->AddRectFilled(q, ImVec2(q.x + sz, q.y + sz), pack_abgr(kNotComparedColour));
    ImGui::Dummy(ImVec2(sz, sz));
    ImGui::SameLine();
    ImGui::Text("grey: not compared (%d of %lld (token, head) rows; the reference computed sampled rows only)", it.not_compared,
                static_cast<long long>(c.total_q()) * c.num_qo_heads);
  }
  ImGui::PopTextWrapPos();
}

// Both sides' values over head_dim for the clicked cell, and their difference.
void cell_plots(const Session& s, const DiffReport& d, const Result* a, const Result* b, const UiState& ui) {
  if (a && b && ui.diff_token >= 0 && ui.diff_token < s.spec().total_q() && ui.diff_head < s.spec().num_qo_heads) {
    const int D = s.spec().head_dim_vo;
    const int64_t base = (static_cast<int64_t>(ui.diff_token) * s.spec().num_qo_heads + ui.diff_head) * D;
    std::vector<float> va(a->o.begin() + base, a->o.begin() + base + D), vb(b->o.begin() + base, b->o.begin() + base + D), vd(D);
    for (int i = 0; i < D; ++i) vd[i] = va[i] - vb[i];
    ImGui::Text("token %d, head %d over head_dim:", ui.diff_token, ui.diff_head);
    ImGui::PlotLines(d.backend.c_str(), va.data(), D, 0, nullptr, FLT_MAX, FLT_MAX, ImVec2(-140, 60));
    ImGui::PlotLines(d.baseline.c_str(), vb.data(), D, 0, nullptr, FLT_MAX, FLT_MAX, ImVec2(-140, 60));
    ImGui::PlotLines("difference", vd.data(), D, 0, nullptr, FLT_MAX, FLT_MAX, ImVec2(-140, 60));
  } else {
    ImGui::TextDisabled("click a cell of the heatmap to plot both backends over head_dim");
  }
}

// The error split of an FP8 case: three rows, max abs and relative L2 each, and which one to quote.
void error_split_table(const ErrorSplit& e) {
  if (!e.available) {
    ImGui::TextDisabled("error split: %s", e.why.c_str());
    return;
  }
  auto f = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", v);
    return std::string(b);
  };
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit;
  if (ImGui::BeginTable("split", 4, flags)) {
    ImGui::TableSetupColumn("error");
    ImGui::TableSetupColumn("what it compares");
    ImGui::TableSetupColumn("max abs");
    ImGui::TableSetupColumn("rel L2");
    ImGui::TableHeadersRow();
    auto row = [&](const char* name, const std::string& what, const DiffStats& st, bool strong) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      if (strong)
        ImGui::TextColored(ImVec4(0.55f, 0.85f, 1, 1), "%s", name);
      else
        ImGui::TextUnformatted(name);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(what.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(f(st.max_abs).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(f(st.rel_l2).c_str());
    };
    row("quantisation", "dequantised ideal vs original ideal", e.quantisation, false);
    row("kernel", e.backend + " vs dequantised ideal", e.kernel, true);
    row("total", e.backend + " vs original ideal", e.total, false);
    ImGui::EndTable();
  }
  ImGui::PushTextWrapPos(0.f);
  ImGui::TextDisabled(
      "A bug report quotes the kernel error: the quantisation error is FP8's, the same for every kernel given these bytes.");
  ImGui::PopTextWrapPos();
}

}  // namespace

ErrorSplit build_error_split(const Session& s, const std::string& backend) {
  ErrorSplit e;
  e.backend = backend;
  const CaseSpec& c = s.spec();
  if (!c.fp8_kv()) {
    e.why = "not an FP8 case";
    return e;
  }
  if (!s.quantisation || !s.original_ideal || !s.dequantised_ideal) {
    e.why = s.fp8_note.empty() ? "the two ideals run after the backends" : s.fp8_note;
    return e;
  }
  const Result* a = s.result(backend);
  if (!a || !a->ok()) {
    e.why = backend + " has no result" + (a && !a->message.empty() ? ": " + a->message : "");
    return e;
  }
  if (s.ideals_stale != s.is_stale(backend)) {  // one edit's result against another edit's ideals is no error of either
    e.why = s.ideals_stale ? "the ideals shown are the previous edit's (stale): this edit's follow its backends"
                           : backend + "'s result shown is the previous edit's (stale)";
    return e;
  }
  const DiffReport k = diff_only(c, *a, *s.dequantised_ideal), t = diff_only(c, *a, *s.original_ideal);
  if (!k.available || !t.available) {
    e.why = k.available ? t.unavailable_reason : k.unavailable_reason;
    return e;
  }
  e.quantisation = s.quantisation->o;
  e.kernel = k.o;
  e.total = t.o;
  e.available = true;
  return e;
}

// FP8: which reference the map, histogram and statistics read. Returns whether it changed.
bool DiffPanel::reference_switch(const Session& s, const DiffReport& d, UiState& ui) {
  if (!s.spec().fp8_kv()) return false;
  const int before = ui.diff_reference;
  const bool baseline_is_ideal = d.baseline == backend_for_role(Role::kReference);
  if (baseline_is_ideal && ui.diff_reference == 0) ui.diff_reference = 1;
  ImGui::AlignTextToFramePadding();
  ImGui::TextUnformatted("reference:");
  if (!baseline_is_ideal) {
    ImGui::SameLine();
    ImGui::RadioButton(("baseline " + d.baseline).c_str(), &ui.diff_reference, 0);
  }
  ImGui::SameLine();
  ImGui::RadioButton("dequantised ideal", &ui.diff_reference, 1);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s in fp64 over stored FP8 x scale: what a perfect kernel given these bytes returns",
                      backend_for_role(Role::kReference).c_str());
  ImGui::SameLine();
  ImGui::RadioButton("original ideal", &ui.diff_reference, 2);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s in fp64 over the values before quantisation", backend_for_role(Role::kReference).c_str());
  return before != ui.diff_reference;
}

// FP8: the error split of the comparison's backend, and the backend against the ideal the switch
// picked where that is not the comparison itself (its map, histogram and statistics replace it).
void DiffPanel::ideal_items(const Session& s, const UiState& ui) {
  use_ideal_ = false;
  split_ = ErrorSplit{};
  if (!s.spec().fp8_kv()) return;
  const DiffReport* cmp = any_pair_ ? &custom_ : s.diffs.empty() ? nullptr : &s.diffs[ui.diff_index];
  if (!cmp || cmp->backend.empty()) return;
  split_ = build_error_split(s, cmp->backend);
  const int ref = ui.diff_reference;
  if (ref == 0 || (ref == 1 && cmp->baseline == backend_for_role(Role::kReference))) return;
  const Result* ideal = (ref == 2 ? s.original_ideal : s.dequantised_ideal).get();
  const Result* a = s.result(cmp->backend);
  if (!ideal || !ideal->ok() || !a || !a->ok() || s.ideals_stale != s.is_stale(cmp->backend)) return;  // the split says why
  against_ideal_ = diff_only(s.spec(), *a, *ideal);
  if (!against_ideal_.available) return;
  items_ = build_diff_items(s, against_ideal_);
  use_ideal_ = true;
}

void DiffPanel::draw(const Session& s, UiState& ui) {
  ImGui::Checkbox("any two backends", &any_pair_);
  ImGui::SameLine();
  std::string pair_key;
  if (any_pair_) {
    std::vector<std::string> ok;
    for (const auto& r : s.results)
      if (r.ok()) ok.push_back(r.backend);
    auto pick = [&](const char* label, std::string& v) {
      if (v.empty() || std::find(ok.begin(), ok.end(), v) == ok.end())
        v = ok.empty() ? "" : ok[&v == &pick_a_ ? 0 : ok.size() - 1];
      ImGui::SetNextItemWidth(180);
      if (ImGui::BeginCombo(label, v.c_str())) {
        for (const auto& o : ok)
          if (ImGui::Selectable(o.c_str(), o == v)) v = o;
        ImGui::EndCombo();
      }
    };
    pick("backend", pick_a_);
    ImGui::SameLine();
    pick("baseline", pick_b_);
    pair_key = pick_a_ + "|" + pick_b_;
  } else if (!s.diffs.empty()) {
    ui.diff_index = std::clamp(ui.diff_index, 0, static_cast<int>(s.diffs.size()) - 1);
    std::vector<std::string> names;
    for (const auto& d : s.diffs) names.push_back(d.backend + " vs " + d.baseline + " (" + d.verdict.rule + ")");
    // as wide as the longest name, within the room the label leaves; a name still cut shows whole on hover
    float widest = 0;
    for (const auto& n : names) widest = std::max(widest, ImGui::CalcTextSize(n.c_str()).x);
    const float room =
        ImGui::GetContentRegionAvail().x - ImGui::CalcTextSize("comparison").x - ImGui::GetStyle().ItemInnerSpacing.x;
    ImGui::SetNextItemWidth(std::min(room, widest + ImGui::GetFrameHeight() + 2 * ImGui::GetStyle().FramePadding.x));
    const std::string preview = elide(names[ui.diff_index], room - ImGui::GetFrameHeight() - 2 * ImGui::GetStyle().FramePadding.x,
                                      [](const std::string& t) { return ImGui::CalcTextSize(t.c_str()).x; });
    const bool open = ImGui::BeginCombo("comparison", preview.c_str());
    if (!open && preview != names[ui.diff_index] && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", names[ui.diff_index].c_str());
    if (open) {
      for (size_t i = 0; i < names.size(); ++i)
        if (ImGui::Selectable(names[i].c_str(), static_cast<int>(i) == ui.diff_index)) ui.diff_index = static_cast<int>(i);
      ImGui::EndCombo();
    }
  }
  if (!any_pair_ && !s.diffs.empty()) ui.diff_index = std::clamp(ui.diff_index, 0, static_cast<int>(s.diffs.size()) - 1);
  const DiffReport* chosen = any_pair_ ? &custom_ : s.diffs.empty() ? nullptr : &s.diffs[ui.diff_index];
  if (chosen && (!any_pair_ || !custom_.backend.empty())) reference_switch(s, *chosen, ui);
  if (built_for_ != &s || built_index_ != ui.diff_index || built_pair_ != pair_key || built_reference_ != ui.diff_reference) {
    if (any_pair_) {
      const Result* a = s.result(pick_a_);
      const Result* b = s.result(pick_b_);
      if (a && b && pick_a_ != pick_b_) {
        custom_ =
            compare_results(s.spec(), *a, *b, ComparisonSpec{pick_a_, pick_b_, CompareRule::kAllclose, 1e-2, 1e-3, ""}, nullptr);
        items_ = build_diff_items(s, custom_);
      } else {
        items_ = DiffItems{};
        items_.why = "pick two different backends that ran";
      }
    } else {
      items_ = build_diff_items(s, ui.diff_index);
    }
    ideal_items(s, ui);
    if (items_.available) {
      std::vector<uint32_t> px(items_.log_err.size());
      for (size_t i = 0; i < px.size(); ++i) {
        const float l = items_.log_err[i];
        px[i] = pack_abgr(diff_cell_colour(l, items_.lo, items_.hi));
      }
      tex_.upload(items_.cols, items_.rows, px);
    }
    built_for_ = &s;
    built_index_ = ui.diff_index;
    built_pair_ = pair_key;
    built_reference_ = ui.diff_reference;
  }
  const DiffItems& it = items_;
  if (!it.available) {
    ImGui::TextWrapped("%s", it.why.c_str());
    return;
  }
  const DiffReport& cmp = any_pair_ ? custom_ : s.diffs[ui.diff_index];
  const DiffReport& d = use_ideal_ ? against_ideal_ : cmp;                     // what the map and the statistics show
  const bool pass = cmp.verdict.pass, skipped = !pass && cmp.verdict.skipped;  // skipped: not checked (amber), never a pass
  ImGui::PushStyleColor(ImGuiCol_Text, pass      ? ImVec4(0.4f, 0.9f, 0.4f, 1)
                                       : skipped ? ImVec4(1, 0.75f, 0.25f, 1)
                                                 : ImVec4(1, 0.35f, 0.35f, 1));
  ImGui::TextWrapped("%s  %s: %s",
                     pass      ? "PASS"
                     : skipped ? "NOT CHECKED"
                               : "FAIL",
                     cmp.verdict.rule.c_str(), cmp.verdict.detail.c_str());
  ImGui::PopStyleColor();
  if (use_ideal_) {
    ImGui::PushTextWrapPos(0.f);
    ImGui::TextDisabled("The verdict is the comparison's; the map, histogram and statistics below are %s vs the %s.",
                        against_ideal_.backend.c_str(),
                        ui.diff_reference == 2 ? "original ideal (kernel and quantisation error together)"
                                               : "dequantised ideal (the kernel error)");
    ImGui::PopTextWrapPos();
  }
  if (s.spec().fp8_kv()) error_split_table(split_);
  not_compared_legend(it, s.spec());
  ImGui::Columns(2, "diffcols", false);
  ImGui::SetColumnWidth(0, std::max(260.f, ImGui::GetWindowWidth() * 0.42f));
  // heatmap: rows = tokens, columns = heads
  const ImVec2 margin = axes_margin();
  const ImVec2 avail(ImGui::GetContentRegionAvail().x - margin.x, ImGui::GetContentRegionAvail().y - margin.y);
  const float h = std::max(120.f, avail.y - 60);
  const float w = std::max(avail.x * 0.5f, std::min(avail.x - 70, h * it.cols / std::max(1, it.rows) * 4));
  ImGui::SetCursorPos(ImVec2(ImGui::GetCursorPosX() + margin.x, ImGui::GetCursorPosY() + margin.y));
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  ImGui::Image(tex_.id(), ImVec2(w, h));
  if (ImGui::IsItemHovered()) {
    const ImVec2 mp = ImGui::GetIO().MousePos;
    const int r = std::clamp(static_cast<int>((mp.y - p0.y) / h * it.rows), 0, it.rows - 1);
    const int c = std::clamp(static_cast<int>((mp.x - p0.x) / w * it.cols), 0, it.cols - 1);
    const float l = it.log_err[static_cast<size_t>(r) * it.cols + c];
    ImGui::SetTooltip("tokens %d..%d, head %d: max |err| %s", r * it.tokens_per_row, (r + 1) * it.tokens_per_row - 1, c,
                      std::isnan(l) ? "not compared" : (std::to_string(std::pow(10.f, l))).c_str());
    if (ImGui::IsMouseClicked(0)) {
      ui.diff_token = r * it.tokens_per_row;
      ui.diff_head = c;
    }
  }
  // axes: heads across, tokens down (each texture row holds tokens_per_row tokens), and the legend
  ImDrawList* dl = ImGui::GetWindowDrawList();
  draw_axes(dl, p0, ImVec2(w, h), it.cols, it.rows * it.tokens_per_row, "head", "token");
  const float lx = p0.x + w + 10;
  for (int i = 0; i < 64; ++i) {
    const float y0 = p0.y + h * (63 - i) / 64.f;
    dl->AddRectFilled(ImVec2(lx, y0), ImVec2(lx + 14, y0 + h / 64.f + 1), pack_abgr(ramp(i / 63.f)));
  }
  char top[32], bot[32];
  std::snprintf(top, sizeof top, "1e%.0f", it.hi);
  std::snprintf(bot, sizeof bot, "1e%.0f", it.lo);
  dl->AddText(ImVec2(lx + 18, p0.y), IM_COL32(220, 220, 220, 255), top);
  dl->AddText(ImVec2(lx + 18, p0.y + h - 14), IM_COL32(220, 220, 220, 255), bot);
  ImGui::Dummy(ImVec2(0, 14));  // the y axis title's line
  ImGui::PushTextWrapPos(0.f);
  ImGui::Text("rows: tokens (%d per row), columns: heads; colour: log10 of the largest |error| in the cell", it.tokens_per_row);
  ImGui::PopTextWrapPos();
  ImGui::NextColumn();
  ImGui::TextWrapped("histogram of log10 |error| per compared (token, head), -10 .. 1 (%d exact zeros)", it.zero_errors);
  ImGui::PlotHistogram("##hist", it.histogram.data(), static_cast<int>(it.histogram.size()), 0, nullptr, 0, FLT_MAX,
                       ImVec2(ImGui::GetContentRegionAvail().x, 110));
  stats_table(d);
  // both backends' values over head_dim for the clicked cell
  const Result* b = use_ideal_ ? (ui.diff_reference == 2 ? s.original_ideal : s.dequantised_ideal).get() : s.result(d.baseline);
  cell_plots(s, d, s.result(d.backend), b, ui);
  ImGui::Columns(1);
}

}  // namespace attnscope::gui
