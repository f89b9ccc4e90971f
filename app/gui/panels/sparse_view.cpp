#include "sparse_view.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "draw/colormap.h"

namespace attnscope::gui {

uint32_t sparse_masked_colour() { return pack_abgr({28, 30, 38, 255}); }
uint32_t sparse_dropped_colour() { return pack_abgr({92, 92, 100, 255}); }
uint32_t sparse_kept_colour() { return pack_abgr({33, 145, 140, 255}); }

uint32_t sparse_mass_colour(double mass, double max_mass) {
  // log scale: a kept key 10^-4 of the largest is as dark as the ramp goes here, never the masked colour
  double t = 1;
  if (max_mass > 0 && mass < max_mass)
    t = mass > 0 ? std::clamp(1 + std::log10(mass / max_mass) / kSparseDecades, 0.0, 1.0) : 0.0;
  return pack_abgr(ramp(static_cast<float>(0.2 + 0.8 * t)));
}

std::vector<uint32_t> sparse_mask_pixels(const SparseMaskItems& m) {
  float mx = 0;
  for (float v : m.mass)
    if (!std::isnan(v)) mx = std::max(mx, v);
  std::vector<uint32_t> px(m.cls.size());
  for (size_t i = 0; i < px.size(); ++i) {
    if (m.cls[i] == 0)
      px[i] = sparse_masked_colour();
    else if (m.cls[i] == 1)
      px[i] = sparse_dropped_colour();
    else
      px[i] = std::isnan(m.mass[i]) ? sparse_kept_colour() : sparse_mass_colour(m.mass[i], mx);
  }
  return px;
}

namespace {

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

}  // namespace

std::string sparse_row_line(const SparseRow& r, bool with_recall) {
  std::string s = "request " + std::to_string(r.request) + ", query " + std::to_string(r.query) + " (position " +
                  std::to_string(r.q_abs) + "): kept " + std::to_string(r.kept) + " of " + std::to_string(r.visible) +
                  " visible tokens (top_k " + std::to_string(r.top_k) + (r.given ? ", given indices" : "") + "), " +
                  std::to_string(r.padding) + " x -1 padding";
  if (r.nans > 0) s += ", " + std::to_string(r.nans) + " NaN scores (never kept)";
  if (with_recall && !r.mass.empty())
    s += "; recall of mass (head " + std::to_string(r.head) + ") " + fmt("%.4f", r.kept_mass) + ", dropped " +
         fmt("%.4f", 1 - r.kept_mass);
  return s;
}

std::string sparse_shade_line(const SparseMaskItems& m, int q_len) {
  std::string rows = m.rows_with_mass >= q_len ? "every row"
                                               : "query " + std::to_string(m.row.query) + " only (" + std::to_string(q_len) +
                                                     " rows are past the GUI's budget)";
  return "Sparse: grey = visible under the causal mask but dropped by the indexer, dark = masked; a kept cell's colour is the "
         "mass it carries in head " +
         std::to_string(m.head) + "'s dense fp64 softmax over all visible keys (the head slider), log scale over " +
         std::to_string(static_cast<int>(kSparseDecades)) + " decades (yellow: the largest), for " + rows +
         "; teal: kept, mass not computed.";
}

std::string sparse_slots_line(const SparseSlots& s) {
  std::string l = "Sparse selection of request " + std::to_string(s.request) + ", query " + std::to_string(s.query) +
                  " (the Softmax tab's row): " + std::to_string(s.kept) + " slots in " + std::to_string(s.pages_touched) +
                  " pages (outlined white in the pool, the bar: slots selected of " + std::to_string(s.page_size) +
                  "; each slot in the grid below), " + std::to_string(s.padding) + " x -1 padding (no slot)";
  if (s.outside > 0)
    l += "; " + std::to_string(s.outside) + " OUTSIDE the request's pages (crossed orange): an index bug";
  else
    l += "; none outside the request's pages";
  if (!s.first_idx.empty()) {
    l += ". First kept, logical -> slot:";
    for (size_t i = 0; i < s.first_idx.size(); ++i)
      l += (i ? ", " : " ") + std::to_string(s.first_idx[i]) + " -> " +
           (s.first_slot[i] < 0 ? std::string("outside") : std::to_string(s.first_slot[i]));
  }
  return l;
}

std::vector<std::string> sparse_mass_lines(const SparseRow& r) {
  std::vector<std::string> out;
  out.push_back("DeepSeek sparse attention: " + sparse_row_line(r, false) + ".");
  if (!r.mass.empty())
    out.push_back("Dense fp64 softmax of head " + std::to_string(r.head) + " over all " + std::to_string(r.visible) +
                  " visible keys: kept " + fmt("%.4f", r.kept_mass) + ", dropped " + fmt("%.4f", 1 - r.kept_mass) +
                  ". The steps below run over the kept tokens only, renormalised among themselves (LSE_kept = LSE + ln " +
                  fmt("%.4f", r.kept_mass) + ").");
  if (!r.recall.empty()) {
    const auto lo = std::min_element(r.recall.begin(), r.recall.end());
    const auto hi = std::max_element(r.recall.begin(), r.recall.end());
    double mean = 0;
    for (double v : r.recall) mean += v;
    mean /= static_cast<double>(r.recall.size());
    std::string heads = static_cast<int>(r.recall.size()) == r.heads
                            ? "all " + std::to_string(r.heads) + " heads"
                            : "heads 0-" + std::to_string(r.recall.size() - 1) + " of " + std::to_string(r.heads) +
                                  " (the rest past the GUI's budget)";
    out.push_back("Recall of mass over " + heads + ": min " + fmt("%.4f", *lo) + " (head " +
                  std::to_string(lo - r.recall.begin()) + "), mean " + fmt("%.4f", mean) + ", max " + fmt("%.4f", *hi) +
                  " (head " + std::to_string(hi - r.recall.begin()) + ")" +
                  (r.visible <= r.top_k ? "; every visible token is kept, so 1 exactly." : "."));
  }
  return out;
}

namespace {

// Columns of keys [0, visible) into `cols`: key k in column k * cols / visible.
int column_of(int k, int cols, int visible) { return static_cast<int>(static_cast<int64_t>(k) * cols / visible); }

void axis_text(ImDrawList* dl, ImVec2 at, const char* t) { dl->AddText(at, IM_COL32(180, 180, 180, 255), t); }

}  // namespace

SparseImage sparse_strip_image(const SparseRow& r, int cols, int bar_h, int rug_h, double* max_mass) {
  SparseImage img;
  cols = std::min(cols, r.visible);
  if (cols <= 0 || r.mass.empty()) return img;
  img.w = cols;
  img.h = bar_h + 2 + rug_h;
  img.px.assign(static_cast<size_t>(img.w) * img.h, 0);
  std::vector<double> kept(cols, 0), dropped(cols, 0);
  std::vector<uint8_t> any(cols, 0);
  for (int k = 0; k < r.visible; ++k) {
    const int col = column_of(k, cols, r.visible);
    (r.is_kept[k] ? kept : dropped)[col] += r.mass[k];
    any[col] |= r.is_kept[k];
  }
  double mx = 0, kmax = 0;
  for (int i = 0; i < cols; ++i) mx = std::max(mx, kept[i] + dropped[i]), kmax = std::max(kmax, kept[i]);
  if (max_mass) *max_mass = mx;
  auto put = [&](int x, int y, uint32_t c) { img.px[static_cast<size_t>(y) * img.w + x] = c; };
  for (int i = 0; i < cols; ++i) {
    // rows from the bottom of the bars: the kept part first, the dropped part on top of it
    const int hk = mx > 0 ? static_cast<int>(std::lround(bar_h * kept[i] / mx)) : 0;
    const int hd = mx > 0 ? static_cast<int>(std::lround(bar_h * (kept[i] + dropped[i]) / mx)) - hk : 0;
    const uint32_t kc = sparse_mass_colour(kept[i], kmax);
    for (int y = 0; y < std::min(bar_h, hk + hd); ++y) put(i, bar_h - 1 - y, y < hk ? kc : sparse_dropped_colour());
    if (any[i])
      for (int y = 0; y < rug_h; ++y) put(i, bar_h + 2 + y, sparse_kept_colour());
  }
  return img;
}

SparseImage sparse_slot_image(const SparseSlots& s) {
  SparseImage img;
  img.w = static_cast<int>(s.table.size());
  img.h = s.page_size;
  img.px.assign(static_cast<size_t>(img.w) * img.h, 0);
  for (int i = 0; i < img.w; ++i)
    for (int o = 0; o < img.h; ++o) {
      const int tok = i * s.page_size + o;
      if (tok >= s.kv_len) break;  // the last page's unused tail
      img.px[static_cast<size_t>(o) * img.w + i] = s.slot_selected[tok] ? kSlotSelected : IM_COL32(60, 60, 70, 255);
    }
  return img;
}

SparseImage sparse_head_image(const SparseRow& r, int h) {
  SparseImage img;
  img.w = static_cast<int>(r.recall.size());
  img.h = h;
  img.px.assign(static_cast<size_t>(img.w) * img.h, sparse_dropped_colour());
  for (int x = 0; x < img.w; ++x) {
    const int hk = static_cast<int>(std::lround(h * std::clamp(r.recall[x], 0.0, 1.0)));
    const uint32_t c = x == r.head ? IM_COL32(253, 231, 37, 255) : sparse_kept_colour();
    for (int y = 0; y < hk; ++y) img.px[static_cast<size_t>(h - 1 - y) * img.w + x] = c;
  }
  return img;
}

void SparseViews::strip(const SparseRow& r, float height) {
  const float left = 44, bottom = 16, rug = 5;
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const float w = std::max(50.f, ImGui::GetContentRegionAvail().x - left - 8);
  ImGui::Dummy(ImVec2(left + w, height));
  if (r.visible == 0 || r.mass.empty()) return;
  const int cols = std::min(r.visible, static_cast<int>(w)), bar_h = std::max(8, static_cast<int>(height - bottom - rug - 2));
  if (strip_.stale(&r, 0, cols, bar_h)) {
    const SparseImage img = sparse_strip_image(r, cols, bar_h, static_cast<int>(rug), &strip_.max);
    strip_.tex.upload(img.w, img.h, img.px);
    strip_.mark(&r, 0, cols, bar_h);
  }
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 a(p0.x + left, p0.y), b(p0.x + left + w, p0.y + bar_h);
  dl->AddImage(strip_.tex.id(), a, ImVec2(b.x, b.y + 2 + rug));
  dl->AddRect(a, b, IM_COL32(120, 120, 120, 255));
  char t[48];
  std::snprintf(t, sizeof t, "%.2g", strip_.max);
  axis_text(dl, ImVec2(p0.x, a.y), t);
  axis_text(dl, ImVec2(p0.x, b.y - 14), "0");
  dl->AddText(ImVec2(p0.x, b.y), IM_COL32(120, 200, 190, 255), "kept");
  axis_text(dl, ImVec2(a.x, b.y + rug + 3), "0");
  std::snprintf(t, sizeof t, "key %d", r.visible - 1);
  axis_text(dl, ImVec2(b.x - ImGui::CalcTextSize(t).x, b.y + rug + 3), t);
  if (ImGui::IsItemHovered()) {  // the hovered column's keys, summed here once (not every frame)
    const int col = std::clamp(static_cast<int>((ImGui::GetIO().MousePos.x - a.x) / w * cols), 0, cols - 1);
    double kept = 0, dropped = 0;
    int k0 = -1, k1 = -1;
    for (int k = 0; k < r.visible; ++k)
      if (column_of(k, cols, r.visible) == col) {
        (r.is_kept[k] ? kept : dropped) += r.mass[k];
        k1 = k;
        if (k0 < 0) k0 = k;
      }
    ImGui::SetTooltip("keys %d-%d: kept mass %.4g, dropped mass %.4g (head %d, dense fp64 softmax)", k0, k1, kept, dropped,
                      r.head);
  }
}

void SparseViews::slots(const SparseSlots& s, int version, float height) {
  const int cols = static_cast<int>(s.table.size()), P = s.page_size;
  if (cols == 0) return;
  const float left = 44, bottom = 16;
  const float cw = std::clamp((ImGui::GetContentRegionAvail().x - left - 8) / cols, 1.f, 16.f);
  const float ch = std::clamp((height - bottom) / P, 1.f, 6.f);
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 a(p0.x + left, p0.y);
  ImGui::Dummy(ImVec2(left + cw * cols, ch * P + bottom));
  if (slots_.stale(&s, version, cols, P)) {
    const SparseImage img = sparse_slot_image(s);
    slots_.tex.upload(img.w, img.h, img.px);
    slots_.mark(&s, version, cols, P);
  }
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddImage(slots_.tex.id(), a, ImVec2(a.x + cw * cols, a.y + ch * P));
  axis_text(dl, ImVec2(p0.x, a.y), "slot 0");
  char t[48];
  std::snprintf(t, sizeof t, "%d", P - 1);
  axis_text(dl, ImVec2(p0.x, a.y + ch * P - 14), t);
  // the physical page under its column, as many as fit
  const int every = std::max(1, static_cast<int>(std::ceil((ImGui::CalcTextSize("0000").x + 6) / cw)));
  for (int i = 0; i < cols; i += every) {
    std::snprintf(t, sizeof t, "%d", s.table[i]);
    axis_text(dl, ImVec2(a.x + i * cw, a.y + ch * P + 1), t);
  }
  if (ImGui::IsItemHovered()) {
    const ImVec2 mp = ImGui::GetIO().MousePos;
    const int i = static_cast<int>((mp.x - a.x) / cw), o = static_cast<int>((mp.y - a.y) / ch);
    if (i >= 0 && i < cols && o >= 0 && o < P && i * P + o < s.kv_len)
      ImGui::SetTooltip("logical token %d: page %d (the table's entry %d), slot %lld%s", i * P + o, s.table[i], i,
                        static_cast<long long>(s.table[i]) * P + o, s.slot_selected[i * P + o] ? ", selected" : "");
  }
}

void SparseViews::heads(const SparseRow& r, float height) {
  const float left = 44, bottom = 16;
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const float w = std::max(50.f, ImGui::GetContentRegionAvail().x - left - 8);
  ImGui::Dummy(ImVec2(left + w, height));
  const int n = static_cast<int>(r.recall.size()), h = std::max(8, static_cast<int>(height - bottom));
  if (n == 0) return;
  if (heads_.stale(&r, 0, n, h)) {
    const SparseImage img = sparse_head_image(r, h);
    heads_.tex.upload(img.w, img.h, img.px);
    heads_.mark(&r, 0, n, h);
  }
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 a(p0.x + left, p0.y), b(p0.x + left + w, p0.y + h);
  dl->AddImage(heads_.tex.id(), a, b);
  dl->AddRect(a, b, IM_COL32(120, 120, 120, 255));
  axis_text(dl, ImVec2(p0.x, a.y), "1");
  axis_text(dl, ImVec2(p0.x, b.y - 14), "0");
  axis_text(dl, ImVec2(a.x, b.y + 1), "head 0");
  char t[32];
  std::snprintf(t, sizeof t, "head %d", n - 1);
  axis_text(dl, ImVec2(b.x - ImGui::CalcTextSize(t).x, b.y + 1), t);
  if (ImGui::IsItemHovered()) {
    const int hh = std::clamp(static_cast<int>((ImGui::GetIO().MousePos.x - a.x) / w * n), 0, n - 1);
    ImGui::SetTooltip("head %d: kept mass %.4f, dropped %.4f", hh, r.recall[hh], 1 - r.recall[hh]);
  }
}

}  // namespace attnscope::gui
