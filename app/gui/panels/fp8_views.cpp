#include "fp8_views.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/fp8.h"
#include "draw/axes.h"

namespace attnscope::gui {

float fp8_cell_value(const Fp8Data& d, bool v, Fp8Colour mode, int64_t slot, int head) {
  if (slot < 0 || slot >= d.slots() || !d.used[slot]) return NAN;
  const Fp8TensorData& t = d.of(v);
  const int64_t cell = slot * d.kv_heads + head;
  switch (mode) {
    case Fp8Colour::kScale:
      return d.scale_at(v, static_cast<int>(slot / d.page_size), static_cast<int>(slot % d.page_size), head);
    case Fp8Colour::kAmax:
      return t.amax[cell];
    case Fp8Colour::kSaturated:
      return static_cast<float>(t.sat[cell]);
  }
  return NAN;
}

namespace {

const ImU32 kText = IM_COL32(185, 185, 185, 255);
const ImU32 kTick = IM_COL32(185, 185, 185, 160);
constexpr Rgba kUnusedColour{45, 45, 52, 255};
constexpr Rgba kNullColour{110, 110, 110, 255};
constexpr Rgba kGapColour{20, 20, 24, 255};
constexpr int kTexels = 3;  // texels per slot side: the saturation mark is the centre one

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// "1e-3" for a decade, else the number
std::string tick_label(double v, bool log10_axis) {
  if (!log10_axis) return num(v);
  char b[16];
  std::snprintf(b, sizeof b, "1e%.0f", v);
  return b;
}

const char* recipe(const Fp8TensorData& t) { return t.given ? "given" : "amax / max finite"; }

// Ticks of a colour bar or axis over [lo, hi] (log10 units when log10_axis) as (position, label):
// decades over a wide log range, round values over a narrow one.
std::vector<std::pair<double, std::string>> value_ticks(double lo, double hi, bool log10_axis, int max_ticks,
                                                        bool integers = false) {
  std::vector<std::pair<double, std::string>> t;
  if (!log10_axis) {
    for (double v : nice_ticks_real(lo, hi, max_ticks))
      if (!integers || v == std::floor(v)) t.emplace_back(v, num(v));
  } else if (hi - lo >= 1.5) {
    const int step = std::max(1, static_cast<int>(std::ceil((hi - lo) / max_ticks)));
    for (int e = static_cast<int>(std::ceil(lo)); e <= hi; e += step) {
      char b[16];
      std::snprintf(b, sizeof b, "1e%d", e);
      t.emplace_back(e, b);
    }
  } else {
    for (double v : nice_ticks_real(std::pow(10.0, lo), std::pow(10.0, hi), max_ticks))
      if (v > 0) t.emplace_back(std::log10(v), num(v));
  }
  return t;
}

// A vertical colour bar from lo (bottom) to hi (top) with tick labels, at p.
void legend_bar(ImDrawList* dl, ImVec2 p, float h, float lo, float hi, bool log10_axis, const char* title,
                bool integers = false) {
  for (int i = 0; i < 64; ++i) {
    const float y0 = p.y + h * (63 - i) / 64.f;
    dl->AddRectFilled(ImVec2(p.x, y0), ImVec2(p.x + 14, y0 + h / 64.f + 1), pack_abgr(ramp(i / 63.f)));
  }
  auto ticks = value_ticks(lo, hi, log10_axis, std::max(2, static_cast<int>(h / 20)), integers);
  if (ticks.size() < 2) {  // a short bar: its two ends, labelled with their values
    const auto end = [&](double v) { return log10_axis ? num(std::pow(10.0, v)) : num(v); };
    ticks = {{lo, end(lo)}, {hi, end(hi)}};
  }
  for (const auto& [v, label] : ticks) {
    const float y = p.y + h * static_cast<float>((hi - v) / (hi - lo));
    dl->AddLine(ImVec2(p.x + 14, y), ImVec2(p.x + 18, y), kTick);
    dl->AddText(ImVec2(p.x + 22, y - 7), kText, label.c_str());
  }
  dl->AddText(ImVec2(p.x, p.y - 18), kText, title);
}

// A swatch and its meaning, on one line.
void swatch(Rgba c, const char* text) {
  const ImVec2 q = ImGui::GetCursorScreenPos();
  const float sz = ImGui::GetTextLineHeight();
  ImGui::GetWindowDrawList()->AddRectFilled(q, ImVec2(q.x + sz, q.y + sz), pack_abgr(c));
  ImGui::Dummy(ImVec2(sz, sz));
  ImGui::SameLine();
  ImGui::TextUnformatted(text);
}

float luminance(Rgba c) { return 0.299f * c.r + 0.587f * c.g + 0.114f * c.b; }

}  // namespace

void Fp8ScalesView::draw(const Session& s, const Fp8Data& d) {
  const CaseSpec& c = s.spec();
  ImGui::PushTextWrapPos(0.f);
  ImGui::Text("KV cache %s (largest finite %g), %s scales; an element's value is stored FP8 x its scale", fp8_name(d.format),
              d.max_finite, granularity_name(d.granularity));
  auto sat_line = [&](const char* name, const Fp8TensorData& t) {
    if (t.saturated > 0)
      ImGui::TextColored(ImVec4(1, 0.45f, 0.35f, 1),
                         "%s: %lld of %lld elements saturated (clamped to +-%g) in %lld (slot, head) cells", name,
                         static_cast<long long>(t.saturated), static_cast<long long>(t.elements), d.max_finite,
                         static_cast<long long>(t.saturated_slots));
    else
      ImGui::Text("%s: none of %lld elements saturated", name, static_cast<long long>(t.elements));
  };
  sat_line("K", d.k);
  sat_line("V", d.v);
  if (d.fp8_attention)
    ImGui::Text("FP8 attention: Q scale %s (%s)", num(d.q_scale).c_str(),
                c.fp8_attention->q_scale ? "given" : "amax(Q) / max finite");
  ImGui::PopTextWrapPos();
  if (d.granularity == ScaleGranularity::kTensor) {
    ImGui::Text("K scale %s (%s)    V scale %s (%s)", num(d.k.scale[0]).c_str(), recipe(d.k), num(d.v.scale[0]).c_str(),
                recipe(d.v));
  } else if (d.granularity == ScaleGranularity::kHead) {
    draw_heads(d);
  }
  ImGui::Separator();
  draw_pool(s, d);
}

// One strip of cells per tensor (K, V), a cell per KV head coloured by log10 of its scale, the value
// printed inside where it fits.
void Fp8ScalesView::draw_heads(const Fp8Data& d) {
  const int H = d.kv_heads;
  float lo = INFINITY, hi = -INFINITY;
  for (const auto* t : {&d.k, &d.v})
    for (float x : t->scale)
      if (x > 0) lo = std::min(lo, std::log10(x)), hi = std::max(hi, std::log10(x));
  if (!(hi > lo)) lo -= 0.5f, hi += 0.5f;
  ImGui::Text("scale per KV head (K: %s, V: %s); colour: log10 of the scale", recipe(d.k), recipe(d.v));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float label = 28, legend = 90;
  const float cw = std::clamp((ImGui::GetContentRegionAvail().x - label - legend) / std::max(1, H), 4.f, 96.f), ch = 24;
  ImGui::Dummy(ImVec2(0, 14));  // the head numbers' line
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 mp = ImGui::GetIO().MousePos;
  const int every = std::max(1, static_cast<int>(std::ceil(30 / cw)));
  for (int h = 0; h < H; h += every) {
    char b[16];
    std::snprintf(b, sizeof b, "%d", h);
    dl->AddText(ImVec2(p0.x + label + h * cw + 2, p0.y - 15), kText, b);
  }
  dl->AddText(ImVec2(p0.x + label + H * cw + 6, p0.y - 15), kText, "KV head");
  for (int row = 0; row < 2; ++row) {
    const Fp8TensorData& t = d.of(row == 1);
    const float y = p0.y + row * (ch + 3);
    dl->AddText(ImVec2(p0.x + 4, y + 5), kText, row ? "V" : "K");
    for (int h = 0; h < H; ++h) {
      const float x = p0.x + label + h * cw;
      const Rgba col = ramp((std::log10(t.scale[h]) - lo) / (hi - lo));
      dl->AddRectFilled(ImVec2(x, y), ImVec2(x + cw - 1, y + ch), pack_abgr(col));
      if (t.head_sat[h] > 0) dl->AddRect(ImVec2(x, y), ImVec2(x + cw - 1, y + ch), pack_abgr(kSaturatedColour), 0, 0, 2.5f);
      const std::string v = num(t.scale[h]);
      if (ImGui::CalcTextSize(v.c_str()).x + 6 < cw)
        dl->AddText(ImVec2(x + 4, y + 5), luminance(col) > 140 ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255),
                    v.c_str());
      if (mp.x >= x && mp.x < x + cw && mp.y >= y && mp.y < y + ch && ImGui::IsWindowHovered())
        ImGui::SetTooltip("%s scale of KV head %d: %s (%s)\nsaturated: %lld of %lld elements", row ? "V" : "K", h,
                          num(t.scale[h]).c_str(), recipe(t), static_cast<long long>(t.head_sat[h]),
                          static_cast<long long>(t.elements / std::max(1, H)));
    }
  }
  // the colour bar right of the axis title above the strips
  const float lx = p0.x + label + H * cw + 14 + ImGui::CalcTextSize("KV head").x;
  legend_bar(dl, ImVec2(lx, p0.y + 2), 2 * ch, lo, hi, true, "");
  ImGui::Dummy(ImVec2(lx - p0.x + legend, 2 * ch + 8));
  if (d.k.saturated + d.v.saturated > 0) swatch(kSaturatedColour, "outline: the head has saturated elements");
}

void Fp8ScalesView::build_texture(const Session& s, const Fp8Data& d, int per_row, int shown) {
  const int ps = d.page_size, T = kTexels;
  const int rows = (shown + per_row - 1) / per_row;
  const int W = per_row * (ps * T + 1), Hh = rows * (T + 1);
  std::vector<uint32_t> px(static_cast<size_t>(W) * Hh, pack_abgr(kGapColour));
  const Fp8Colour mode = static_cast<Fp8Colour>(mode_);
  // the colour range over the used slots of this head
  float lo = INFINITY, hi = -INFINITY;
  for (int64_t sl = 0; sl < static_cast<int64_t>(shown) * ps; ++sl) {
    const float v = fp8_cell_value(d, v_, mode, sl, head_);
    if (std::isnan(v)) continue;
    const float x = log_scale_ ? (v > 0 ? std::log10(v) : NAN) : v;
    if (std::isnan(x)) continue;
    lo = std::min(lo, x), hi = std::max(hi, x);
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (!log_scale_) lo = 0;
  if (!(hi > lo)) lo -= log_scale_ ? 0.05f : 0.f, hi = lo + (log_scale_ ? 0.1f : 1.f);
  lo_ = lo, hi_ = hi;
  const Fp8TensorData& t = d.of(v_);
  for (int p = 0; p < shown; ++p) {
    const int x0 = (p % per_row) * (ps * T + 1), y0 = (p / per_row) * (T + 1);
    for (int sl = 0; sl < ps; ++sl) {
      const int64_t slot = static_cast<int64_t>(p) * ps + sl;
      const float v = fp8_cell_value(d, v_, mode, slot, head_);
      Rgba col = s.plan.pages.owner[p] == kPageNull ? kNullColour : kUnusedColour;
      if (!std::isnan(v)) {
        const float x = log_scale_ ? (v > 0 ? std::log10(v) : lo) : v;
        col = ramp((x - lo) / (hi - lo));
      }
      const bool sat = d.used[slot] && t.sat[slot * d.kv_heads + head_] > 0;
      for (int dy = 0; dy < T; ++dy)
        for (int dx = 0; dx < T; ++dx) {
          const bool centre = dx == T / 2 && dy == T / 2;
          px[static_cast<size_t>(y0 + dy) * W + x0 + sl * T + dx] = pack_abgr(sat && centre ? kSaturatedColour : col);
        }
    }
  }
  tex_.upload(W, Hh, px);
}

void Fp8ScalesView::draw_pool(const Session& s, const Fp8Data& d) {
  const bool token = d.granularity == ScaleGranularity::kToken;
  if (mode_ < 0 || (!token && mode_ == 0)) mode_ = token ? 0 : (d.k.saturated + d.v.saturated > 0 ? 2 : 1);
  head_ = std::clamp(head_, 0, d.kv_heads - 1);
  ImGui::SetNextItemWidth(110);
  ImGui::InputInt("KV head", &head_);
  head_ = std::clamp(head_, 0, d.kv_heads - 1);
  ImGui::SameLine();
  int tv = v_ ? 1 : 0;
  ImGui::RadioButton("K", &tv, 0);
  ImGui::SameLine();
  ImGui::RadioButton("V", &tv, 1);
  v_ = tv == 1;
  ImGui::SameLine();
  const char* modes[] = {"scale (per token)", "largest |value| before quantisation", "saturated elements"};
  ImGui::SetNextItemWidth(260);
  if (ImGui::BeginCombo("colour", modes[mode_])) {
    for (int i = token ? 0 : 1; i < 3; ++i)
      if (ImGui::Selectable(modes[i], i == mode_)) mode_ = i;
    ImGui::EndCombo();
  }
  log_scale_ = mode_ != static_cast<int>(Fp8Colour::kSaturated);
  const int ps = d.page_size, T = kTexels;
  const int shown = std::min(d.num_pages, 4096);
  const float legend_w = 110, left = 48;
  const float avail_w = std::max(100.f, ImGui::GetContentRegionAvail().x - left - legend_w);
  const float avail_h = std::max(120.f, ImGui::GetContentRegionAvail().y - 110);
  // texels per pixel: the whole pool fits the room, in whole pixels where it can
  const float page_tx = static_cast<float>(ps * T + 1);
  float f = std::floor(std::sqrt(avail_w * avail_h / (shown * page_tx * (T + 1))));
  f = std::clamp(f, 1.f, 6.f);
  if (page_tx * f > avail_w) f = avail_w / page_tx;  // a page wider than the room: squeezed
  const int per_row = std::max(1, static_cast<int>(avail_w / (page_tx * f)));
  const int rows = (shown + per_row - 1) / per_row;
  // rows as tall as the room allows, up to three times the slot's width: the map fills the tab
  const float fy = std::max(f, std::min(3 * f, std::floor(avail_h / (rows * (T + 1.f)))));
  if (built_for_ != &d || built_head_ != head_ || built_v_ != v_ || built_mode_ != mode_ || built_per_row_ != per_row) {
    build_texture(s, d, per_row, shown);
    built_for_ = &d, built_head_ = head_, built_v_ = v_, built_mode_ = mode_, built_per_row_ = per_row;
  }
  const char* what = mode_ == 0   ? "log10 of the scale"
                     : mode_ == 1 ? "log10 of the largest |value| before quantisation"
                                  : "saturated elements";
  ImGui::PushTextWrapPos(0.f);
  ImGui::Text("%s of KV head %d over the pool: each page a strip of its %d slots (left to right), %d pages a row; colour: %s",
              v_ ? "V" : "K", head_, ps, per_row, what);
  ImGui::PopTextWrapPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGui::SetCursorPos(ImVec2(ImGui::GetCursorPosX() + left, ImGui::GetCursorPosY() + 18));
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 size(per_row * page_tx * f, rows * (T + 1) * fy);
  ImGui::Image(tex_.id(), size);
  const bool hovered = ImGui::IsItemHovered();
  {  // the first page of each row on the left, page offsets on top
    char b[24];
    const float row_h = (T + 1) * fy;
    const int every = std::max(1, static_cast<int>(std::ceil(16 / row_h)));
    for (int r = 0; r < rows; r += every) {
      std::snprintf(b, sizeof b, "%d", r * per_row);
      dl->AddText(ImVec2(p0.x - 44, p0.y + r * row_h + row_h / 2 - 7), kText, b);
    }
    const float page_w = page_tx * f;
    for (int col : nice_ticks(per_row, std::max(1, static_cast<int>(size.x / 40)))) {
      std::snprintf(b, sizeof b, "+%d", col);
      dl->AddText(ImVec2(p0.x + col * page_w, p0.y - 16), kText, b);
    }
    dl->AddText(ImVec2(p0.x - 44, p0.y - 16), IM_COL32(150, 150, 150, 255), "page");
  }
  legend_bar(dl, ImVec2(p0.x + size.x + 12, p0.y + 18), std::min(size.y - 18, 220.f), lo_, hi_, log_scale_,
             mode_ == 2   ? "saturated"
             : mode_ == 0 ? "scale"
                          : "|value|",
             mode_ == 2);
  if (hovered) {
    const ImVec2 mp = ImGui::GetIO().MousePos;
    const int cx = static_cast<int>((mp.x - p0.x) / f), cy = static_cast<int>((mp.y - p0.y) / fy);
    const int page = (cy / (T + 1)) * per_row + cx / (ps * T + 1);
    const int sl = (cx % (ps * T + 1)) / T;
    if (page >= 0 && page < shown && sl < ps) {
      const PageTable& pt = s.plan.pages;
      const int64_t slot = static_cast<int64_t>(page) * ps + sl;
      ImGui::BeginTooltip();
      const int owner = pt.owner[page];
      if (owner >= 0 && d.used[slot]) {
        const auto first = pt.indices.begin() + pt.indptr[owner];
        const int64_t at = std::find(first, pt.indices.begin() + pt.indptr[owner + 1], page) - first;
        ImGui::Text("page %d, slot %d: request %d, key %lld", page, sl, owner, static_cast<long long>(at * ps + sl));
        for (int tv2 = 0; tv2 < 2; ++tv2) {
          const Fp8TensorData& t = d.of(tv2 == 1);
          const int64_t cell = slot * d.kv_heads + head_;
          const float sc = d.scale_at(tv2 == 1, page, sl, head_);
          ImGui::Text("%s, KV head %d: scale %s, largest |value| %s (%s x the largest finite)%s", tv2 ? "V" : "K", head_,
                      num(sc).c_str(), num(t.amax[cell]).c_str(), num(t.amax[cell] / sc / d.max_finite).c_str(),
                      t.sat[cell] ? "" : ", none saturated");
          if (t.sat[cell]) {
            int64_t all = 0;
            for (int h = 0; h < d.kv_heads; ++h) all += t.sat[slot * d.kv_heads + h];
            ImGui::TextColored(ImVec4(1, 0.45f, 0.35f, 1), "  %d of this head's %d elements saturated (%lld over all KV heads)",
                               t.sat[cell], tv2 ? s.spec().head_dim_vo : s.spec().head_dim_qk, static_cast<long long>(all));
          }
        }
      } else {
        ImGui::Text("page %d, slot %d: %s", page, sl,
                    owner == kPageNull ? "null page (never referenced)"
                    : owner >= 0       ? "past the request's last key"
                                       : "unused page");
      }
      ImGui::EndTooltip();
    }
  }
  ImGui::Dummy(ImVec2(0, 4));
  if (shown < d.num_pages) ImGui::Text("(first %d of %d pages shown)", shown, d.num_pages);
  const Fp8TensorData& t = d.of(v_);
  char b[160];
  std::snprintf(b, sizeof b, "centre dot: a slot of KV head %d with saturated %s elements (%lld in this head, %lld in all)",
                head_, v_ ? "V" : "K", static_cast<long long>(t.head_sat[head_]), static_cast<long long>(t.saturated));
  swatch(kSaturatedColour, b);
  swatch(kUnusedColour, "a slot no request uses (unused page or past a request's last key)");
  if (s.spec().kv_cache.null_page && s.spec().kv_cache.storage == KvStorage::kPaged) swatch(kNullColour, "the null page");
}

// --- the quantisation error per head-dim channel ---

namespace {

struct BarChart {
  const std::vector<double>* values = nullptr;
  const std::vector<int64_t>* saturated = nullptr;
  std::vector<int> outliers;  // channels the case scales
  const char* name = "K";
  const char* stat = "max";
  int64_t per_channel = 0;  // elements behind each bar
};

// Bars over head-dim channels, labelled axes; log10 values when `log`.
void bar_chart(const BarChart& b, ImVec2 size, bool log, double shared_hi) {
  const std::vector<double>& v = *b.values;
  const int D = static_cast<int>(v.size());
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float left = 64, bottom = 34, top = 20;
  const ImVec2 o = ImGui::GetCursorScreenPos();
  const ImVec2 p0(o.x + left, o.y + top);
  const ImVec2 sz(size.x - left - 80, size.y - top - bottom);
  double lo = 0, hi = shared_hi > 0 ? shared_hi : 1;
  if (log) {
    double mn = INFINITY;
    for (double x : v)
      if (x > 0) mn = std::min(mn, x);
    lo = std::isfinite(mn) ? std::floor(std::log10(mn)) : -8;
    hi = std::ceil(std::log10(hi));
    if (!(hi > lo)) hi = lo + 1;
  }
  auto y_of = [&](double x) {
    const double t = log ? (x > 0 ? (std::log10(x) - lo) / (hi - lo) : 0) : x / hi;
    return p0.y + sz.y * static_cast<float>(1 - std::clamp(t, 0.0, 1.0));
  };
  dl->AddRectFilled(p0, ImVec2(p0.x + sz.x, p0.y + sz.y), IM_COL32(30, 30, 36, 255));
  for (double t : nice_ticks_real(lo, hi, std::max(2, static_cast<int>(sz.y / 26)))) {
    const float y = p0.y + sz.y * static_cast<float>(1 - (t - lo) / (hi - lo));
    dl->AddLine(ImVec2(p0.x - 4, y), ImVec2(p0.x + sz.x, y), IM_COL32(80, 80, 90, 120));
    const std::string l = tick_label(t, log);
    dl->AddText(ImVec2(p0.x - 8 - ImGui::CalcTextSize(l.c_str()).x, y - 7), kText, l.c_str());
  }
  const float bw = sz.x / std::max(1, D);
  const ImVec2 mp = ImGui::GetIO().MousePos;
  int hovered = -1;
  for (int c = 0; c < D; ++c) {
    const float x = p0.x + c * bw;
    const bool sat = (*b.saturated)[c] > 0;
    const Rgba col = sat ? kSaturatedColour : Rgba{33, 165, 160, 255};
    if (v[c] > 0)
      dl->AddRectFilled(ImVec2(x, y_of(v[c])), ImVec2(x + std::max(1.f, bw - (bw > 3 ? 1 : 0)), p0.y + sz.y), pack_abgr(col));
    if (mp.x >= x && mp.x < x + bw && mp.y >= p0.y && mp.y < p0.y + sz.y) hovered = c;
  }
  for (int c : b.outliers)  // a marker above each outlier channel the case asked for
    if (c >= 0 && c < D) {
      const float x = p0.x + (c + 0.5f) * bw, y = std::max(p0.y + 8, y_of(v[c]) - 3);
      dl->AddTriangleFilled(ImVec2(x - 5, y - 9), ImVec2(x + 5, y - 9), ImVec2(x, y - 1), IM_COL32(255, 190, 60, 255));
    }
  for (int t : nice_ticks(D, std::max(1, static_cast<int>(sz.x / 44)))) {
    const float x = p0.x + (t + 0.5f) * bw;
    dl->AddLine(ImVec2(x, p0.y + sz.y), ImVec2(x, p0.y + sz.y + 4), kTick);
    char l[16];
    std::snprintf(l, sizeof l, "%d", t);
    dl->AddText(ImVec2(x - ImGui::CalcTextSize(l).x / 2, p0.y + sz.y + 5), kText, l);
  }
  char title[96];
  std::snprintf(title, sizeof title, "%s: %s |orig - stored x scale|%s", b.name, b.stat, log ? " (log10 axis)" : "");
  dl->AddText(ImVec2(o.x, o.y), IM_COL32(220, 220, 220, 255), title);
  const char* xt = "head-dim channel";
  dl->AddText(ImVec2(p0.x + sz.x / 2 - ImGui::CalcTextSize(xt).x / 2, p0.y + sz.y + 18), kText, xt);
  ImGui::Dummy(size);
  if (hovered >= 0 && ImGui::IsWindowHovered()) {
    const bool outlier = std::find(b.outliers.begin(), b.outliers.end(), hovered) != b.outliers.end();
    ImGui::SetTooltip("%s channel %d: %s |orig - stored x scale| %s over %lld elements\nsaturated: %lld%s", b.name, hovered,
                      b.stat, num(v[hovered]).c_str(), static_cast<long long>(b.per_channel),
                      static_cast<long long>((*b.saturated)[hovered]),
                      outlier ? "\nan outlier channel of the case (/data/outliers)" : "");
  }
}

// "17 (0.52), 93 (0.49), 3 (0.02)": the largest channels
std::string top_channels(const std::vector<double>& v, int n) {
  std::vector<int> idx(v.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int>(i);
  n = std::min<int>(n, static_cast<int>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int a, int b) { return v[a] > v[b]; });
  std::vector<double> sorted = v;
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  std::string out;
  for (int i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(idx[i]) + " (" + num(v[idx[i]]) + ")";
  return out + "; median " + (sorted.empty() ? "-" : num(sorted[sorted.size() / 2]));
}

}  // namespace

void Fp8ChannelView::draw(const Session& s, const Fp8Data& d) {
  ImGui::PushTextWrapPos(0.f);
  ImGui::TextUnformatted(
      "Quantisation error per head-dim channel: |value before quantisation - stored FP8 x its scale| over every real element "
      "(the keys of every request, all KV heads). Red bars: channels with saturated elements; triangles: the case's outlier "
      "channels (/data/outliers, K only).");
  ImGui::PopTextWrapPos();
  ImGui::RadioButton("max", &stat_, 0);
  ImGui::SameLine();
  ImGui::RadioButton("RMS", &stat_, 1);
  ImGui::SameLine();
  ImGui::Checkbox("log10 axis", &log_);
  const bool rms = stat_ == 1;
  const auto& kv = rms ? d.k.chan_rms : d.k.chan_max;
  const auto& vv = rms ? d.v.chan_rms : d.v.chan_max;
  ImGui::Text("K largest: %s", top_channels(kv, 3).c_str());
  ImGui::Text("V largest: %s", top_channels(vv, 3).c_str());
  // each chart its own y range: V's error stays readable beside saturated K channels
  auto top = [&](const std::vector<double>& x) {
    double hi = 0;
    for (double e : x) hi = std::max(hi, e);
    return log_ ? hi : hi > 0 ? hi * 1.08 : 1.0;
  };
  const float w = ImGui::GetContentRegionAvail().x;
  const float h = std::max(150.f, (ImGui::GetContentRegionAvail().y - 10) / 2);
  const char* stat = rms ? "RMS" : "max";
  const int64_t rows_k = d.k.elements / std::max(1, s.spec().head_dim_qk),
                rows_v = d.v.elements / std::max(1, s.spec().head_dim_vo);
  bar_chart({&kv, &d.k.chan_sat, s.spec().data.outlier_channels, "K", stat, rows_k}, ImVec2(w, h), log_, top(kv));
  bar_chart({&vv, &d.v.chan_sat, {}, "V", stat, rows_v}, ImVec2(w, h), log_, top(vv));
}

}  // namespace attnscope::gui
