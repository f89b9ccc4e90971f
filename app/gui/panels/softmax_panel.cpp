#include "softmax_panel.h"

#include <imgui.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "attnscope/registry.h"
#include "case_json.h"
#include "draw/text_fit.h"
#include "explain.h"
#include "sparse_view.h"

namespace attnscope::gui {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string num(double v) {
  char b[40];
  if (std::isinf(v))
    std::snprintf(b, sizeof b, "%s", v > 0 ? "inf" : "-inf");
  else
    std::snprintf(b, sizeof b, "%.5g", v);
  return b;
}

template <class T>
std::string vec(const std::vector<T>& v, size_t n = 4) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < n; ++i) s += (i ? ", " : "") + num(v[i]);
  return s + (v.size() > n ? ", ...]" : "]");
}

std::string keys(int a, int b) {
  char r[48];
  std::snprintf(r, sizeof r, "[%d, %d)", a, b);
  return r;
}

// Whether tile step `st`'s d holds the sink's term: way 0 of the row's output or first chunk, whose
// state the sink started (d = 1 at m = s_h x log2(e)).
bool holds_sink(const SoftmaxTrace& t, const TileStep& st) { return st.way == 0 && (!t.split || st.chunk == 0); }

// A tile step's line on the sink: its term inside d, or where the sink is instead.
std::string sink_term_line(const SoftmaxTrace& t, float sink2, const TileStep& st) {
  if (!holds_sink(t, st))
    return st.chunk == 0 || !t.split
               ? "\nthis way started at m = s_h x log2(e) too (as the kernel's key-split warps), d = 0: way 0's d holds the "
                 "sink's term"
               : "\nno sink in this chunk: chunk 0's partial holds it and the merge carries it";
  const double term = std::exp2(static_cast<double>(sink2) - st.m_new);
  return "\nd holds the sink's term exp2(s_h x log2(e) - m) = " + num(term) +
         " (it started d at 1, rescaled like any key's): the keys' part is " + num(st.den - term) + ", the sink's share of d " +
         num(100.0 * term / st.den) + "%";
}

}  // namespace

SoftmaxView build_softmax_view(const SoftmaxTrace& t, int step) {
  SoftmaxView v;
  v.header = "request " + std::to_string(t.request) + ", query " + std::to_string(t.query) + " (position " +
             std::to_string(t.q_abs) + "), head " + std::to_string(t.head) + ": visible keys " +
             keys(t.visible_lo, t.visible_hi) + " (" + std::to_string(t.visible) + ")\nplan: tile " + std::to_string(t.tile_q) +
             ", chunk " + std::to_string(t.chunk_pages) + " pages, " +
             (t.split ? std::to_string(t.partials.size()) + " chunks (split-KV)" : std::string("no split")) +
             (t.kv_warp_split > 1 ? ", " + std::to_string(t.kv_warp_split) + " key-split ways per KV tile" : std::string()) +
             "\nlogits in base 2: " + logit_formula(t) + "; m running max, d running sum of exp2(logit - m)";
  // a /sparse row runs gathered: its tiles hold kept tokens by rank, not key positions
  const std::string span = t.gathered.empty() ? "  keys " : "  kept ";
  if (!t.gathered.empty())
    v.header += "\ngathered (as the engines run sparse MLA): " + std::to_string(t.gathered.size()) +
                " kept tokens in rank order through a page table of page size 1; \"kept [a, b)\" below are ranks";
  // the sink, as the kernel holds it: the base-2 logit the row's state starts from
  v.has_sink = !std::isinf(t.sink);
  if (v.has_sink) {
    v.sink_logit = t.sink;
    v.sink2 = t.sink2;
    v.sink_prob = t.sink_prob;
    v.sink_line = "sink s_h = " + num(t.sink) + " (head " + std::to_string(t.head) + "; " + num(v.sink2) +
                  " in base 2): it starts the row's state, m = s_h x log2(e), d = 1 (its term), O = 0 (no value vector)" +
                  (t.split ? ", in the first chunk, whose partial carries it through the merge" : "") +
                  "; share of the mass e^(s_h - LSE) = " + num(t.sink_prob) + ", the keys' " + num(1.0 - t.sink_prob);
    v.header += "\n" + v.sink_line;
  }
  // events in the order the plan computes them: the sink's start first, before any key
  if (v.has_sink) {
    SoftmaxEvent e;
    e.kind = SoftmaxEvent::kSink;
    e.text = "sink s_h = " + num(t.sink) + " (no value) starts the row: m = " + num(v.sink2) + ", d = 1";
    const std::string ways =
        t.kv_warp_split > 1
            ? "\nEvery key-split way starts at this m; way 0 alone holds d = 1, so the ways' merge counts it once."
            : "";
    const std::string chunks = t.split ? "\nThe first chunk's partial holds it and the merge carries it, counted once." : "";
    e.state = "The sink starts the row's state before any key" + std::string(t.split ? " (in the first chunk)" : "") +
              ": m = s_h x log2(e) = " + num(v.sink2) + ", d = 1 (its term exp2(s_h x log2(e) - m) at that m), O = 0 (no " +
              "value vector)." + ways + "\nA key above it rescales its term like any other's; the store adds nothing." + chunks +
              "\nA fully masked row ends with O = 0 and LSE = s_h, the sink's term alone.\nIts exact share of " +
              "the probability mass: " + num(t.sink_prob) + " (fp64)";
    v.events.push_back(e);
  }
  size_t s = 0;
  for (size_t pi = 0; pi < t.partials.size(); ++pi) {
    const ChunkPartial& p = t.partials[pi];
    for (; s < t.steps.size() && t.steps[s].chunk == p.chunk; ++s) {
      const TileStep& st = t.steps[s];
      SoftmaxEvent e;
      e.kind = SoftmaxEvent::kTile;
      e.index = static_cast<int>(s);
      e.text = "chunk " + std::to_string(st.chunk) + (t.kv_warp_split > 1 ? " way " + std::to_string(st.way) : "") + span +
               keys(st.kv_begin, st.kv_end) + "  " + std::to_string(st.visible) + " visible" +
               (st.skipped ? "  (nothing visible yet)" : "  tile max " + num(st.tile_max));
      e.state = st.skipped ? "No key of this tile or before it is visible: the state stays m = -inf, d = 0, O = 0\n"
                             "(exp2(-inf - -inf) would be NaN, so the tile is skipped, as the kernel skips it)."
                           : "tile max " + num(st.tile_max) + "; m: " + num(st.m_old) + " -> " + num(st.m_new) +
                                 "\nrescale exp2(m_old - m_new) = " + num(st.rescale) + " applied to d and O" +
                                 "\nd = " + num(st.den) + "   |O| = " + num(st.o_norm) + "   O = " + vec(st.o_head) +
                                 "\n(O is unnormalised until the chunk ends: O / d is the chunk's output)" +
                                 (v.has_sink ? sink_term_line(t, v.sink2, st) : std::string());
      v.events.push_back(e);
    }
    SoftmaxEvent e;
    e.kind = SoftmaxEvent::kPartial;
    e.index = static_cast<int>(pi);
    e.text = std::string(t.split ? "partial" : "output") + " of chunk " + std::to_string(p.chunk) + span +
             keys(p.kv_begin, p.kv_end) + "  LSE2 " + num(p.lse2);
    e.state = (p.way_m.size() > 1 ? "ways merged in order: M = max m_w = " + num(p.m) +
                                        ", scales exp2(m_w - M) = " + vec(p.way_scale, 8) + ", d = " + num(p.den) + "\n"
                                  : std::string()) +
              "LSE2 = m + log2(d) = " + num(p.lse2) + "   O / d = " + vec(p.o_head) +
              (p.den == 0.f ? "\nno visible key in this chunk: O = 0, LSE = -inf (it gets weight 0 in the merge)" : "");
    v.events.push_back(e);
  }
  for (size_t mi = 0; mi < t.merges.size(); ++mi) {
    const MergeStep& m = t.merges[mi];
    SoftmaxEvent e;
    e.index = static_cast<int>(mi);
    e.kind = SoftmaxEvent::kMerge;
    e.text = "merge chunk " + std::to_string(m.chunk) + "  weights " + num(m.w_acc) + " / " + num(m.w_chunk);
    e.state = "acc LSE2 " + num(m.lse_acc) + " and chunk LSE2 " + num(m.lse_chunk) +
              ": weights exp2(lse - max) / sum = " + num(m.w_acc) + " (acc), " + num(m.w_chunk) +
              " (chunk)\nLSE2 after = " + num(m.lse_after) + "   O = " + vec(m.o_head);
    v.events.push_back(e);
  }
  SoftmaxEvent fin;
  fin.kind = SoftmaxEvent::kFinal;
  fin.text = "result  LSE " + num(t.lse) + "  (exact " + num(t.ref_lse) + ")";
  fin.state =
      "O rounded to the dtype = " + vec(t.o, 6) + "   LSE (natural log) = " + num(t.lse) + "   (" +
      backend_for_role(Role::kPlanTwin) + "'s bits)\nexact softmax (" + backend_for_role(Role::kReference) +
      ", fp64): O = " + vec(t.ref_o, 6) + "   LSE = " + num(t.ref_lse) + "\ndifference: O max abs " + num(t.max_abs_diff) +
      ", LSE " + num(t.lse_diff) +
      (t.visible == 0 ? (v.has_sink ? "\nfully masked row: O = 0 and LSE = s_h, the sink's term alone"
                                    : "\nfully masked row: O = 0 and LSE = -inf, as FlashAttention and FlashInfer write it")
                      : "") +
      (v.has_sink ? "\n" + v.sink_line : std::string());
  v.events.push_back(fin);

  const int n = static_cast<int>(v.events.size());
  v.step = step < 0 || step >= n ? n - 1 : step;
  // m and d of the tiles up to the shown event
  int last_tile = -1;
  for (int i = 0; i <= v.step; ++i)
    if (v.events[i].kind == SoftmaxEvent::kTile) last_tile = v.events[i].index;
  if (v.step == n - 1 || v.events[v.step].kind != SoftmaxEvent::kTile)
    for (int i = 0; i <= v.step; ++i)
      if (v.events[i].kind == SoftmaxEvent::kTile) last_tile = std::max(last_tile, v.events[i].index);
  for (int i = 0; i <= last_tile; ++i) {
    v.m_series.push_back(std::isinf(t.steps[i].m_new) ? kNaN : t.steps[i].m_new);
    v.d_series.push_back(t.steps[i].den);
    if (v.has_sink) v.sink_series.push_back(holds_sink(t, t.steps[i]) ? std::exp2(v.sink2 - t.steps[i].m_new) : kNaN);
    if (i == 0) continue;
    if (t.steps[i].chunk != t.steps[i - 1].chunk)
      v.breaks.push_back({i, "chunk " + std::to_string(t.steps[i].chunk)});
    else if (t.steps[i].way != t.steps[i - 1].way)
      v.breaks.push_back({i, "way " + std::to_string(t.steps[i].way)});
  }
  for (size_t k = 0; k < t.keys.size(); ++k) {
    v.logits.push_back(std::isinf(t.logits[k]) ? kNaN : t.logits[k]);
    v.probs.push_back(static_cast<float>(t.probs[k]));
  }
  v.key0 = t.keys.empty() ? 0 : t.keys.front();
  v.visible_lo = t.visible_lo;
  v.visible_hi = t.visible_hi;
  return v;
}

namespace {

// What a plot draws beside its series: chunk / way breaks, a second series (the sink's term inside
// the denominator), a bar of its own right of the keys (the sink's share of the mass).
struct PlotExtras {
  const std::vector<SeriesBreak>* breaks = nullptr;
  const std::vector<float>* second = nullptr;  // drawn under the series, in the sink's colour
  bool sink_bar = false;
  float sink_value = 0;
};

constexpr ImU32 kSeries = IM_COL32(250, 215, 60, 255), kSinkCol = IM_COL32(235, 110, 235, 255);

// A line plot with labelled axes: y range and x range as tick labels, NaN values not drawn, the last
// point marked. `bars`: vertical bars instead of a line; `shade_lo/hi`: x indices outside are
// masked (drawn grey).
void plot(const char* title, const char* x_label, const std::vector<float>& y, ImVec2 size, bool bars = false, int x0 = 0,
          int shade_lo = -1, int shade_hi = -1, const PlotExtras& ex = {}) {
  ImGui::PushTextWrapPos(0.f);
  ImGui::TextUnformatted(title);
  ImGui::PopTextWrapPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const float left = 56, bottom = 18;
  const float sink_w = ex.sink_bar ? std::max(70.f, ImGui::CalcTextSize("no value").x + 16) : 0.f;  // its own slot
  ImGui::Dummy(size);
  const ImVec2 a(p0.x + left, p0.y), b(p0.x + size.x - sink_w, p0.y + size.y - bottom);
  dl->AddRect(a, b, IM_COL32(120, 120, 120, 255));
  float lo = INFINITY, hi = -INFINITY;
  for (const std::vector<float>* s : {&y, ex.second})
    if (s)
      for (float v : *s)
        if (!std::isnan(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (ex.sink_bar) lo = std::min(lo, ex.sink_value), hi = std::max(hi, ex.sink_value);
  char t[32];
  const int n = static_cast<int>(y.size());
  std::snprintf(t, sizeof t, "%d", x0);
  dl->AddText(ImVec2(a.x, b.y + 2), IM_COL32(180, 180, 180, 255), t);
  std::snprintf(t, sizeof t, "%d", x0 + std::max(0, n - 1));
  dl->AddText(ImVec2(b.x - 8 * std::strlen(t), b.y + 2), IM_COL32(180, 180, 180, 255), t);
  dl->AddText(ImVec2((a.x + b.x) / 2 - 4 * std::strlen(x_label), b.y + 2), IM_COL32(150, 150, 150, 255), x_label);
  if (n == 0 || lo > hi) {
    dl->AddText(ImVec2(a.x + 8, a.y + 8), IM_COL32(150, 150, 150, 255), "nothing to draw yet");
    return;
  }
  if (bars) lo = std::min(lo, 0.f);
  if (hi == lo) hi = lo + 1;
  std::snprintf(t, sizeof t, "%.3g", hi);
  dl->AddText(ImVec2(p0.x, a.y), IM_COL32(180, 180, 180, 255), t);
  std::snprintf(t, sizeof t, "%.3g", lo);
  dl->AddText(ImVec2(p0.x, b.y - 14), IM_COL32(180, 180, 180, 255), t);
  auto X = [&](int i) { return a.x + (b.x - a.x) * (n == 1 ? 0.5f : static_cast<float>(i) / (n - 1)); };
  auto Y = [&](float v) { return b.y - (b.y - a.y) * (v - lo) / (hi - lo); };
  if (shade_lo >= 0) {
    const float s0 = X(std::clamp(shade_lo - x0, 0, n - 1)), s1 = X(std::clamp(shade_hi - x0, 0, n - 1));
    if (s0 > a.x) dl->AddRectFilled(a, ImVec2(s0, b.y), IM_COL32(70, 70, 70, 120));
    if (s1 < b.x) dl->AddRectFilled(ImVec2(s1, a.y), b, IM_COL32(70, 70, 70, 120));
  }
  if (ex.breaks)  // dashed lines between the last tile of a chunk (or way) and the first of the next
    for (const auto& br : *ex.breaks) {
      if (br.at >= n) continue;
      const float x = (X(br.at - 1) + X(br.at)) / 2;
      for (float yy = a.y; yy < b.y; yy += 8)
        dl->AddLine(ImVec2(x, yy), ImVec2(x, std::min(b.y, yy + 4)), IM_COL32(110, 190, 255, 220), 1.5f);
      dl->AddText(ImVec2(x + 3, a.y + 1), IM_COL32(110, 190, 255, 255), br.label.c_str());
    }
  auto is_break = [&](int i) {
    return ex.breaks && std::any_of(ex.breaks->begin(), ex.breaks->end(), [&](const SeriesBreak& br) { return br.at == i; });
  };
  auto line = [&](const std::vector<float>& s, ImU32 col) {
    for (int i = 1; i < static_cast<int>(s.size()); ++i)  // no line across a break: the new chunk's state starts over
      if (!std::isnan(s[i]) && !std::isnan(s[i - 1]) && !is_break(i))
        dl->AddLine(ImVec2(X(i - 1), Y(s[i - 1])), ImVec2(X(i), Y(s[i])), col, 2);
  };
  if (bars) {
    for (int i = 0; i < n; ++i)
      if (!std::isnan(y[i])) dl->AddLine(ImVec2(X(i), Y(0)), ImVec2(X(i), Y(y[i])), kSeries, std::max(1.f, (b.x - a.x) / n));
  } else {
    if (ex.second) line(*ex.second, kSinkCol);
    line(y, kSeries);
    if (!std::isnan(y.back())) dl->AddCircleFilled(ImVec2(X(n - 1), Y(y.back())), 4, IM_COL32(255, 90, 90, 255));
  }
  if (ex.sink_bar) {  // the sink's share in a slot of its own: it is no key and has no value vector
    const float x = b.x + sink_w / 2, w = std::max(6.f, sink_w / 4);
    dl->AddRectFilled(ImVec2(x - w / 2, Y(ex.sink_value)), ImVec2(x + w / 2, Y(0)), kSinkCol);
    dl->AddLine(ImVec2(b.x + 4, Y(0)), ImVec2(b.x + sink_w - 4, Y(0)), IM_COL32(120, 120, 120, 255));
    const ImVec2 s1 = ImGui::CalcTextSize("sink"), s2 = ImGui::CalcTextSize("no value");
    dl->AddText(ImVec2(x - s1.x / 2, b.y + 2), kSinkCol, "sink");
    dl->AddText(ImVec2(x - s2.x / 2, a.y), kSinkCol, "no value");
  }
}

}  // namespace

// The explained row's kept / dropped mass over the step-through: a sparse row's trace is over the kept
// tokens only, so what the selection dropped is said here.
void SoftmaxPanel::draw_sparse(const Session& s, const UiState& ui) {
  sparse_wanted_ = !sparse_key_.empty();
  if (!sparse_wanted_) return;
  const int r = ui.sm_request, q = ui.sm_query, h = ui.sm_head;
  const std::string key = sparse_key_ + "|" + std::to_string(r) + "|" + std::to_string(q) + "|" + std::to_string(h);
  if (sparse_.is_new(key)) {
    CaseSpec c = s.spec();
    if (c.sparse) c.sparse->indices.clear();  // the selection is the plan's; the copy needs only Q and K
    sparse_.want(key, [c = std::move(c), sel = s.plan.sparse, r, q, h] { return sparse_row(c, (*sel)[r], r, q, h, true, true); });
  }
  sparse_.poll();
  const SparseRow* row = sparse_.value();
  if (!row) {
    ImGui::TextDisabled("%s",
                        sparse_.error().empty() ? "computing the sparse row's kept / dropped mass ..." : sparse_.error().c_str());
    return;
  }
  ImGui::PushTextWrapPos(0.f);
  for (const std::string& line : sparse_mass_lines(*row)) ImGui::TextColored(ImVec4(0.55f, 0.85f, 1.f, 1.f), "%s", line.c_str());
  ImGui::PopTextWrapPos();
  ImGui::TextDisabled("per head: kept mass (teal; the head shown yellow) under the dropped mass (grey), dense fp64 softmax");
  sparse_views_.heads(*row, 64);
  ImGui::Separator();
}

void SoftmaxPanel::draw(const Session& s, UiState& ui) {
  const CaseSpec& c = s.spec();
  const int R = static_cast<int>(c.requests.size());
  ui.sm_request = std::clamp(ui.sm_request, 0, std::max(0, R - 1));
  const int Q = R ? c.requests[ui.sm_request].q_len : 0;
  ui.sm_query = std::clamp(ui.sm_query, 0, std::max(0, Q - 1));
  ui.sm_head = std::clamp(ui.sm_head, 0, std::max(0, c.num_qo_heads - 1));
  ImGui::PushItemWidth(110);
  ImGui::InputInt("request", &ui.sm_request);
  ImGui::SameLine();
  ImGui::InputInt("query", &ui.sm_query);
  ImGui::SameLine();
  ImGui::InputInt("head", &ui.sm_head);
  ImGui::PopItemWidth();

  // the trace of the selected row, computed off the GUI thread (it generates the case's inputs)
  if (seen_ != &s) {
    seen_ = &s;
    case_text_ = case_to_json(c).dump();
    sparse_key_ = c.is_sparse() && s.plan.sparse ? sparse_case_key(c, s.plan) : "";
  }
  draw_sparse(s, ui);
  want_ = Key{case_text_, ui.sm_request, ui.sm_query, ui.sm_head};
  if (job_.valid() && job_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    try {
      trace_ = job_.get();
      have_trace_ = true;
      view_valid_ = false;
      error_.clear();
    } catch (const std::exception& e) {
      have_trace_ = false;
      error_ = e.what();
    }
  }
  if (!job_.valid() && !(want_ == have_)) {
    have_ = want_;
    const CaseSpec spec = c;
    const int r = want_.request, q = want_.query, h = want_.head;
    job_ = std::async(std::launch::async, [spec, r, q, h] { return explain_case(spec, r, q, h); });
    ui.sm_step = -1;
  }
  if (job_.valid()) {
    ImGui::SameLine();
    ImGui::TextDisabled("computing ...");
  }
  if (!error_.empty()) {
    ImGui::TextWrapped("%s", error_.c_str());
    return;
  }
  if (!have_trace_) return;

  // the view of the wanted step (-1: the last), rebuilt only when it changes: a long row has
  // thousands of events and a logit per key
  if (!view_valid_ || (ui.sm_step >= 0 ? ui.sm_step : static_cast<int>(view_.events.size()) - 1) != view_.step) {
    view_ = build_softmax_view(trace_, ui.sm_step);
    view_valid_ = true;
  }
  const int n = static_cast<int>(view_.events.size());
  int step = view_.step;
  // stepping: buttons, slider, Left / Right (Home / End) while the panel has focus
  if (ImGui::IsWindowFocused(ImGuiFocusedFlags_RootAndChildWindows) && !ImGui::IsAnyItemActive()) {
    if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_LeftArrow))) step = std::max(0, step - 1);
    if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_RightArrow))) step = std::min(n - 1, step + 1);
    if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Home))) step = 0;
    if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_End))) step = n - 1;
  }
  if (ImGui::Button("|<")) step = 0;
  ImGui::SameLine();
  if (ImGui::Button("<")) step = std::max(0, step - 1);
  ImGui::SameLine();
  if (ImGui::Button(">")) step = std::min(n - 1, step + 1);
  ImGui::SameLine();
  if (ImGui::Button(">|")) step = n - 1;
  ImGui::SameLine();
  ImGui::SetNextItemWidth(260);
  ImGui::SliderInt("step (Left / Right)", &step, 0, n - 1);
  if (step != view_.step) view_ = build_softmax_view(trace_, step);
  ui.sm_step = view_.step;
  const SoftmaxView& v = view_;
  ImGui::TextWrapped("%s", v.header.c_str());
  ImGui::Separator();

  const ImVec2 avail = ImGui::GetContentRegionAvail();
  ImGui::BeginChild("events", ImVec2(avail.x * 0.45f, avail.y), true);
  for (int i = 0; i < n; ++i) {
    const SoftmaxEvent& e = v.events[i];
    const ImVec4 col = e.kind == SoftmaxEvent::kTile      ? ImVec4(0.85f, 0.85f, 0.85f, 1)
                       : e.kind == SoftmaxEvent::kPartial ? ImVec4(0.5f, 0.8f, 1, 1)
                       : e.kind == SoftmaxEvent::kMerge   ? ImVec4(1, 0.75f, 0.4f, 1)
                       : e.kind == SoftmaxEvent::kSink    ? ImVec4(0.92f, 0.43f, 0.92f, 1)
                                                          : ImVec4(0.5f, 1, 0.5f, 1);
    ImGui::PushStyleColor(ImGuiCol_Text, col);
    char label[24];
    std::snprintf(label, sizeof label, "%3d ", i);
    // a long event line ends in "..." inside the list and shows whole on hover
    const std::string full = label + e.text;
    const std::string shown =
        elide(full, ImGui::GetContentRegionAvail().x, [](const std::string& t) { return ImGui::CalcTextSize(t.c_str()).x; });
    if (ImGui::Selectable((shown + "##event" + std::to_string(i)).c_str(), i == v.step)) ui.sm_step = i;
    if (shown != full && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", full.c_str());
    ImGui::PopStyleColor();
    if (i == v.step && ImGui::IsWindowAppearing()) ImGui::SetScrollHereY();
  }
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("state", ImVec2(0, avail.y));
  ImGui::TextColored(ImVec4(1, 0.9f, 0.4f, 1), "step %d of %d: %s", v.step, n - 1, v.events[v.step].text.c_str());
  ImGui::TextWrapped("%s", v.events[v.step].state.c_str());
  ImGui::Separator();
  const float w = ImGui::GetContentRegionAvail().x;
  const std::string restart = v.breaks.empty()
                                  ? std::string()
                                  : std::string("; each KV chunk") + (trace_.kv_warp_split > 1 ? " and key-split way" : "") +
                                        " starts its own m and d (dashed lines), merged at the end, so a drop there is expected";
  PlotExtras breaks;
  breaks.breaks = &v.breaks;
  plot(("running max m (base 2) after each tile" + restart).c_str(), "tile step", v.m_series, ImVec2(w, 110), false, 0, -1, -1,
       breaks);
  PlotExtras den = breaks;
  if (v.has_sink) den.second = &v.sink_series;
  plot(v.has_sink ? "running denominator d after each tile (yellow); the sink's term e^(s_h - m) inside it (magenta: the sink "
                    "started d at 1)"
                  : "running denominator d after each tile",
       "tile step", v.d_series, ImVec2(w, 110), false, 0, -1, -1, den);
  plot("logit (base 2) per key; masked keys shaded", "key", v.logits, ImVec2(w, 110), false, v.key0, v.visible_lo, v.visible_hi);
  PlotExtras sink;
  sink.sink_bar = v.has_sink;
  sink.sink_value = static_cast<float>(v.sink_prob);
  char share[96];
  std::snprintf(share, sizeof share, "; the sink (no value vector), right: %.4g of the mass", v.sink_prob);
  plot(("exact probability per key" + std::string(v.has_sink ? share : "")).c_str(), "key", v.probs, ImVec2(w, 110), true, v.key0,
       v.visible_lo, v.visible_hi, sink);
  ImGui::EndChild();
}

}  // namespace attnscope::gui
