// The Merge panel's drawing (merge_panel.h); its numbers are merge_data.cpp's.
#include "merge_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attnscope/partition.h"
#include "draw/colormap.h"
#include "draw/text_fit.h"

namespace attnscope::gui {

namespace {

// The app's own colours for the same states (gui_app.cpp's banners, the Diff tab's verdicts), so a
// stale or sampled result reads the same in every tab
const ImVec4 kStale(1, 0.75f, 0.3f, 1), kSampled(0.55f, 0.85f, 1, 1), kBad(1, 0.45f, 0.35f, 1), kGood(0.5f, 0.9f, 0.5f, 1);
const ImU32 kMergeCol = IM_COL32(125, 125, 125, 255), kCollectiveCol = IM_COL32(235, 235, 235, 255);
const ImU32 kMixBg = IM_COL32(140, 40, 30, 110);  // a row whose LSE was read in the wrong base

// Partition k's colour. Neighbouring ranks sit side by side on the key axis, so the default palette is
// a categorical one (Tableau's, its grey left out: grey is the merge's in the time bars) rather than
// the request owners' golden-angle hues, two of which are close greens at 8 ranks; past 9 ranks, and in
// the colour-blind palette (Okabe-Ito's), the owners' colours.
ImU32 part_colour(int k) {
  static const Rgba kCat[9] = {{31, 119, 180, 255},  {255, 127, 14, 255},  {44, 160, 44, 255},
                               {214, 39, 40, 255},   {148, 103, 189, 255}, {140, 86, 75, 255},
                               {227, 119, 194, 255}, {188, 189, 34, 255},  {23, 190, 207, 255}};
  return pack_abgr(palette() == Palette::kDefault && k >= 0 && k < 9 ? kCat[k] : owner_colour(k));
}
// As text on the dark background: the same hue, lifted toward white so that the darker ones (blue,
// brown) read as well as the light ones
ImVec4 part_text_colour(int k) {
  const ImVec4 c = ImGui::ColorConvertU32ToFloat4(part_colour(k));
  return ImVec4(c.x + (1 - c.x) * 0.3f, c.y + (1 - c.y) * 0.3f, c.z + (1 - c.z) * 0.3f, 1);
}

std::string sci(double v) {
  if (v < 0) return "-";
  if (v == 0) return "0";
  char b[32];
  std::snprintf(b, sizeof b, "%.2e", v);
  return b;
}
std::string fixed(double v, const char* fmt) {
  char b[48];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}
std::string lse_text(double v) { return std::isinf(v) ? (v < 0 ? "-inf" : "+inf") : std::isnan(v) ? "NaN" : fixed(v, "%.4f"); }

void swatch(int k) {
  const float sz = ImGui::GetTextLineHeight() * 0.8f;
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float dy = (ImGui::GetTextLineHeight() - sz) / 2;
  ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, p.y + dy), ImVec2(p.x + sz, p.y + dy + sz), part_colour(k));
  ImGui::Dummy(ImVec2(sz, ImGui::GetTextLineHeight()));
  ImGui::SameLine(0, 4);
}

void tags(bool stale, bool sampled) {
  if (stale) {
    ImGui::SameLine();
    ImGui::TextColored(kStale, "stale");
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("the previous edit's result: this edit's replaces it when it arrives");
  }
  if (sampled) {
    ImGui::SameLine();
    ImGui::TextColored(kSampled, "sampled");
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("computed on sampled rows only: the full run replaces it when it is done");
  }
}

// Fractions side by side in one bar, each partition in its colour; the room left by fractions that do
// not sum to 1 (an empty row) stays dark.
void stacked_bar(const std::vector<double>& f, float w, float h) {
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(p, ImVec2(p.x + w, p.y + h), IM_COL32(40, 40, 46, 255));
  float x = p.x;
  for (size_t k = 0; k < f.size(); ++k) {
    const float dx = static_cast<float>(std::clamp(f[k], 0.0, 1.0)) * w;
    if (dx > 0) dl->AddRectFilled(ImVec2(x, p.y), ImVec2(std::min(x + dx, p.x + w), p.y + h), part_colour(static_cast<int>(k)));
    x += dx;
  }
  ImGui::Dummy(ImVec2(w, h));
}

// One request's key axis, each key in its partition's colour: a rectangle per run of keys where keys
// are at least a pixel wide, else per pixel column its keys' partitions stacked by count (interleave 1
// over many keys reads as bands, not as noise).
void key_axis(const CaseSpec& c, int r, const std::vector<std::string>& labels, float w, float h) {
  const int64_t kv = c.requests[r].kv_len;
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(p, ImVec2(p.x + w, p.y + h), IM_COL32(40, 40, 46, 255));
  if (kv > 0 && kv <= static_cast<int64_t>(w)) {
    const float kw = w / static_cast<float>(kv);
    for (int64_t k0 = 0; k0 < kv;) {
      const int part = partition_of_key(c, r, k0);
      int64_t k1 = k0 + 1;
      while (k1 < kv && partition_of_key(c, r, k1) == part) ++k1;
      dl->AddRectFilled(ImVec2(p.x + k0 * kw, p.y), ImVec2(p.x + k1 * kw, p.y + h), part_colour(part));
      k0 = k1;
    }
  } else if (kv > 0) {
    for (int x = 0; x < static_cast<int>(w); ++x) {
      const int64_t k0 = kv * x / static_cast<int64_t>(w), k1 = kv * (x + 1) / static_cast<int64_t>(w);
      const std::vector<int64_t> n = keys_in(c, r, k0, k1);
      float y = p.y;
      for (size_t k = 0; k < n.size(); ++k) {
        const float dy = h * static_cast<float>(n[k]) / static_cast<float>(std::max<int64_t>(1, k1 - k0));
        if (dy > 0) dl->AddRectFilled(ImVec2(p.x + x, y), ImVec2(p.x + x + 1, y + dy), part_colour(static_cast<int>(k)));
        y += dy;
      }
    }
  }
  ImGui::Dummy(ImVec2(w, h));
  if (ImGui::IsItemHovered() && kv > 0) {
    const float fx = (ImGui::GetIO().MousePos.x - p.x) / w;
    const int64_t k = std::clamp<int64_t>(static_cast<int64_t>(fx * static_cast<float>(kv)), 0, kv - 1);
    const int part = partition_of_key(c, r, k);
    ImGui::SetTooltip("request %d, key %lld of %lld: %s", r, static_cast<long long>(k), static_cast<long long>(kv),
                      part < static_cast<int>(labels.size()) ? labels[part].c_str() : "?");
  }
}

// A backend's partials, a table row each; a run of empty partials (no key of the row's request:
// O = 0, LSE = -inf, and no error) shares one row, so 8 ranks of a short request do not bury the rest.
void partial_rows(const MergeRowBackend& b, const std::vector<std::string>& labels) {
  auto label = [&](size_t k) { return k < labels.size() ? labels[k] : "partition " + std::to_string(k); };
  auto empty = [&](size_t k) { return b.parts[k].keys == 0 && b.parts[k].lse == -INFINITY && b.parts[k].err <= 0; };
  for (size_t k = 0; k < b.parts.size(); ++k) {
    const MergePartial& q = b.parts[k];
    size_t last = k;
    if (empty(k))
      while (last + 1 < b.parts.size() && empty(last + 1)) ++last;
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Indent(ImGui::GetTextLineHeight());
    for (size_t j = k; j <= last; ++j) swatch(static_cast<int>(j));
    text_elided(last > k ? label(k) + " .. " + label(last) : label(k));
    ImGui::Unindent(ImGui::GetTextLineHeight());
    ImGui::TableNextColumn();
    ImGui::Text("%lld", static_cast<long long>(q.keys));
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(lse_text(q.lse).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(fixed(100 * q.share, "%.3f %%").c_str());
    ImGui::TableNextColumn();
    if (q.weight_differs)
      ImGui::TextColored(kBad, "%s", fixed(100 * q.weight, "%.3f %%").c_str());
    else
      ImGui::TextUnformatted(fixed(100 * q.weight, "%.3f %%").c_str());
    ImGui::TableNextColumn();
    if (q.keys == 0)
      ImGui::TextDisabled("%s", last > k ? "no key in any: O = 0, LSE = -inf, weight 0" : "no key: O = 0, LSE = -inf, weight 0");
    else if (!b.reference)
      ImGui::TextUnformatted(sci(q.err).c_str());
    k = last;
  }
}

void section(const char* title) {
  ImGui::Spacing();
  ImGui::TextColored(ImVec4(0.55f, 0.85f, 1, 1), "%s", title);
  ImGui::Separator();
}

}  // namespace

void MergePanel::draw_keys(const Session& s) {
  const CaseSpec& c = s.spec();
  const MergeLayout& L = items_.layout;
  section("Keys by partition");
  for (size_t k = 0; k < L.labels.size(); ++k) {
    if (k) ImGui::SameLine(0, 18);
    swatch(static_cast<int>(k));
    ImGui::TextUnformatted(L.labels[k].c_str());
  }
  const int n = static_cast<int>(c.requests.size());
  // as tall as its rows (a header and up to 8 requests), scrolling beyond
  const float row_h = ImGui::GetTextLineHeight() + 2 * ImGui::GetStyle().CellPadding.y;
  const float height = row_h * (static_cast<float>(std::min(n, 8)) + 1) + 2;
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_ScrollY;
  if (!ImGui::BeginTable("keys", 3, flags, ImVec2(0, height))) return;
  const float ch = ImGui::CalcTextSize("0").x;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("request", ImGuiTableColumnFlags_WidthFixed, ch * 20);
  ImGui::TableSetupColumn("its keys, position 0 at the left", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableSetupColumn("keys per partition", ImGuiTableColumnFlags_WidthFixed,
                          ch * std::max<float>(20, 8.f * static_cast<float>(L.labels.size())));
  ImGui::TableHeadersRow();
  ImGuiListClipper clip;
  clip.Begin(n);
  while (clip.Step())
    for (int r = clip.DisplayStart; r < clip.DisplayEnd; ++r) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%d: %lld keys", r, static_cast<long long>(c.requests[r].kv_len));
      ImGui::TableNextColumn();
      key_axis(c, r, L.labels, ImGui::GetContentRegionAvail().x, ImGui::GetTextLineHeight());
      ImGui::TableNextColumn();
      for (size_t k = 0; k < L.keys[r].size(); ++k) {
        if (k) ImGui::SameLine(0, ch * 1.5f);
        ImGui::TextColored(part_text_colour(static_cast<int>(k)), "%lld", static_cast<long long>(L.keys[r][k]));
      }
    }
  ImGui::EndTable();
}

void MergePanel::draw_row(const Session& s, UiState& ui) {
  const CaseSpec& c = s.spec();
  const int R = static_cast<int>(c.requests.size());
  if (!ui.merge_picked) ui.merge_request = worst_.request, ui.merge_query = worst_.query, ui.merge_head = worst_.head;
  section("One row: each partial's share of the attention mass, the merge's weight, the errors");
  // the names before their fields: "request [3]" reads as the row's address, left to right
  bool picked = false;
  auto field = [&](const char* name, const char* id, int* v) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted(name);
    ImGui::SameLine();
    ImGui::SetNextItemWidth(110);
    picked |= ImGui::InputInt(id, v);
    ImGui::SameLine(0, 16);
  };
  field("request", "##mreq", &ui.merge_request);
  field("query", "##mq", &ui.merge_query);
  field("head", "##mh", &ui.merge_head);
  ui.merge_picked |= picked;
  ui.merge_request = std::clamp(ui.merge_request, 0, std::max(0, R - 1));
  ui.merge_query = std::clamp(ui.merge_query, 0, std::max(0, c.requests[ui.merge_request].q_len - 1));
  ui.merge_head = std::clamp(ui.merge_head, 0, std::max(0, c.num_qo_heads - 1));
  if (ImGui::Button("largest merged error")) ui.merge_picked = false;
  ImGui::SameLine();
  if (!ui.merge_picked && worst_.err > 0)
    ImGui::TextDisabled("this row has the largest merged error: %s, %s", worst_.backend.c_str(), sci(worst_.err).c_str());
  else if (!ui.merge_picked)
    ImGui::TextDisabled("no merged error here: every merged row equals the reference's");

  const MergeRowItems row = build_merge_row(s, ui.merge_request, ui.merge_query, ui.merge_head);
  if (row.reference.empty())
    ImGui::TextColored(kStale, "no reference result: the errors need the reference's run");
  else if (!row.reference_computed)
    ImGui::TextColored(kSampled, "%s computed sampled rows only, not this one: no errors for it yet", row.reference.c_str());
  if (row.backends.empty()) {
    ImGui::TextDisabled("no backend has run over the partitions yet");
    return;
  }
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp;
  if (!ImGui::BeginTable("row", 6, flags)) return;
  const float ch = ImGui::CalcTextSize("0").x, bar_w = ch * 16;
  ImGui::TableSetupColumn("backend / partial", ImGuiTableColumnFlags_WidthStretch, 1.f);
  ImGui::TableSetupColumn("keys", ImGuiTableColumnFlags_WidthFixed, ch * 7);
  ImGui::TableSetupColumn("LSE (ln)", ImGuiTableColumnFlags_WidthFixed, ch * 10);
  ImGui::TableSetupColumn("share of mass", ImGuiTableColumnFlags_WidthFixed, bar_w + ch * 9);
  ImGui::TableSetupColumn("merge's weight", ImGuiTableColumnFlags_WidthFixed, bar_w + ch * 9);
  ImGui::TableSetupColumn("max |O - O_ref| over head_dim", ImGuiTableColumnFlags_WidthStretch, 1.3f);
  ImGui::TableHeadersRow();
  for (const MergeRowBackend& b : row.backends) {
    std::vector<double> share, weight;
    int64_t keys = 0;
    bool differs = false;
    for (const auto& q : b.parts)
      share.push_back(q.share), weight.push_back(q.weight), keys += q.keys, differs |= q.weight_differs;
    ImGui::TableNextRow();
    ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg0, IM_COL32(55, 60, 75, 255));
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(b.backend.c_str());
    if (b.reference) {
      ImGui::SameLine();
      ImGui::TextDisabled("(reference)");
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip(
            "its answer is the unpartitioned run; its partials, run as every backend's, are what the others' are checked "
            "against");
    }
    tags(b.stale, b.sampled);
    ImGui::TableNextColumn();
    ImGui::Text("%lld", static_cast<long long>(keys));
    ImGui::TableNextColumn();
    if (b.lse_differs)
      ImGui::TextColored(kBad, "%s", lse_text(b.lse_result).c_str());
    else
      ImGui::TextUnformatted(lse_text(b.lse_result).c_str());
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("the result's LSE; the partials' summed mass gives %s%s", lse_text(b.lse_mass).c_str(),
                        b.lse_differs ? ": the merge read the partials' LSE in the wrong base" : "");
    ImGui::TableNextColumn();
    stacked_bar(share, bar_w, ImGui::GetTextLineHeight());
    ImGui::TableNextColumn();
    stacked_bar(weight, bar_w, ImGui::GetTextLineHeight());
    if (differs) ImGui::SameLine(), ImGui::TextColored(kBad, "wrong");
    ImGui::TableNextColumn();
    if (!b.computed)
      ImGui::TextDisabled("row not computed");
    else if (!b.reference)
      ImGui::Text("merged: %s", sci(b.merged_err).c_str());
    partial_rows(b, items_.layout.labels);
  }
  ImGui::EndTable();
  ImGui::PushTextWrapPos(0.f);
  ImGui::TextDisabled(
      "share of mass: exp(LSE_k - LSE), LSE the log of the partials' summed mass (natural log). merge's weight: what the "
      "merge gave the partial, reading its LSE in the base the case says (/parallel/merge_base); red where the two differ. "
      "Errors: a partial against the reference's partial over the same keys; a backend's row, its merged O against the "
      "reference's answer.");
  ImGui::PopTextWrapPos();
}

void MergePanel::draw_bases() {
  section("LSE bases: what each backend returns, what the merge read it as, and which base merges it right");
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp;
  if (!ImGui::BeginTable("bases", 6, flags)) return;
  const float ch = ImGui::CalcTextSize("0").x;
  ImGui::TableSetupColumn("backend", ImGuiTableColumnFlags_WidthFixed, ch * 20);
  ImGui::TableSetupColumn("returns LSE in", ImGuiTableColumnFlags_WidthFixed, ch * 15);
  ImGui::TableSetupColumn("merge read it in", ImGuiTableColumnFlags_WidthFixed, ch * 22);
  ImGui::TableSetupColumn("merged as e", ImGuiTableColumnFlags_WidthFixed, ch * 22);
  ImGui::TableSetupColumn("merged as 2", ImGuiTableColumnFlags_WidthFixed, ch * 22);
  ImGui::TableSetupColumn("base check (max |O - O_ref| of each merge)", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableHeadersRow();
  for (const MergeBaseRow& b : items_.bases) {
    ImGui::TableNextRow();
    if (b.mismatch) ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg1, kMixBg);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(b.backend.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("base %s", b.native.c_str());
    ImGui::TableNextColumn();
    if (b.mismatch) {
      ImGui::TextColored(kBad, "base %s: WRONG BASE", b.read.c_str());
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip(
            "/parallel/merge_base reads this backend's base-%s LSE as base %s: the base-mix bug (docs/partitions.md 5.1)",
            b.native.c_str(), b.read.c_str());
    } else {
      ImGui::TextColored(kGood, "base %s (its own)", b.read.c_str());
    }
    // each merge's error; the one the result holds (the base it was read in) in red when that base is wrong
    for (const char* base : {"e", "2"}) {
      ImGui::TableNextColumn();
      if (!b.checked) continue;
      const std::string e = sci(base[0] == 'e' ? b.err_e : b.err_2);
      if (b.mismatch && b.read == base)
        ImGui::TextColored(kBad, "%s (the result)", e.c_str());
      else
        ImGui::TextUnformatted(e.c_str());
    }
    ImGui::TableNextColumn();
    if (!b.checked) {
      ImGui::TextDisabled("%s", b.backend == items_.reference ? "the reference: the others are checked against it"
                                                              : "not checked: no reference result");
    } else {
      // the check's verdict names the base that merges its partials into the reference's answer
      const bool names_base = b.verdict.rfind("base ", 0) == 0;
      ImGui::TextColored(b.check_disagrees ? kBad : kGood, "%s%s", names_base ? "merges right in " : "", b.verdict.c_str());
    }
    tags(b.stale, b.sampled);
  }
  ImGui::EndTable();
}

void MergePanel::draw_timings() {
  section("Merges and time: each partition's kernels, attnscope's merge, the collective");
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp;
  if (ImGui::BeginTable("time", 3, flags)) {
    const float ch = ImGui::CalcTextSize("0").x;
    ImGui::TableSetupColumn("backend", ImGuiTableColumnFlags_WidthFixed, ch * 20);
    ImGui::TableSetupColumn("time, to one scale", ImGuiTableColumnFlags_WidthStretch, 1.f);
    ImGui::TableSetupColumn("figures", ImGuiTableColumnFlags_WidthStretch, 1.6f);
    ImGui::TableHeadersRow();
    for (const MergeTimingRow& t : items_.timings) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(t.backend.c_str());
      tags(t.stale, t.sampled);
      ImGui::TableNextColumn();
      const float w = ImGui::GetContentRegionAvail().x, h = ImGui::GetTextLineHeight();
      const ImVec2 p = ImGui::GetCursorScreenPos();
      ImDrawList* dl = ImGui::GetWindowDrawList();
      const double scale = items_.max_ms > 0 ? w / items_.max_ms : 0;
      float x = p.x;
      auto seg = [&](double ms, ImU32 col) {
        const float dx = static_cast<float>(ms * scale);
        if (dx > 0) dl->AddRectFilled(ImVec2(x, p.y), ImVec2(x + std::max(dx, 1.f), p.y + h), col);
        x += dx;
      };
      for (size_t k = 0; k < t.part_ms.size(); ++k) seg(t.part_ms[k], part_colour(static_cast<int>(k)));
      seg(t.merge_ms, kMergeCol);
      seg(t.collective_ms, kCollectiveCol);
      ImGui::Dummy(ImVec2(w, h));
      ImGui::TableNextColumn();
      std::string txt;
      for (size_t k = 0; k < t.part_ms.size(); ++k) txt += (k ? ", " : "") + fixed(t.part_ms[k], "%.3g");
      txt += " ms " + std::string(t.device ? "(device)" : "(host)") + "; merge " + fixed(t.merge_ms, "%.3g") + " ms (host); ";
      txt += t.collective + (t.collective_ms > 0 ? ", collective " + fixed(t.collective_ms, "%.3g") + " ms" : std::string());
      text_elided(txt);
    }
    ImGui::EndTable();
  }
  ImGui::TextDisabled("bar: the partitions in their colours, then attnscope's merge (grey), then the collective (white)");
  if (ImGui::BeginTable("merges", 5, ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp)) {
    const float ch = ImGui::CalcTextSize("0").x;
    ImGui::TableSetupColumn("backend", ImGuiTableColumnFlags_WidthFixed, ch * 20);
    ImGui::TableSetupColumn("merge", ImGuiTableColumnFlags_WidthFixed, ch * 26);
    ImGui::TableSetupColumn("status", ImGuiTableColumnFlags_WidthFixed, ch * 14);
    ImGui::TableSetupColumn("against attnscope's merge", ImGuiTableColumnFlags_WidthStretch);
    ImGui::TableSetupColumn("device ms", ImGuiTableColumnFlags_WidthFixed, ch * 10);
    ImGui::TableHeadersRow();
    for (const MergeTimingRow& t : items_.timings)
      for (size_t k = 0; k < t.merges.size(); ++k) {
        const MergeRun& m = t.merges[k];
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(t.backend.c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(m.id.c_str());
        ImGui::TableNextColumn();
        ImGui::TextColored(m.status == Status::kOk ? kGood : kStale, "%s", status_name(m.status));
        ImGui::TableNextColumn();
        text_elided(k == 0 ? std::string("the result's own merge") : m.status == Status::kOk ? m.vs_attnscope : m.message);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(m.device_ms > 0 ? fixed(m.device_ms, "%.4f").c_str() : "-");
      }
    ImGui::EndTable();
  }
}

void MergePanel::draw(const Session& s, UiState& ui) {
  if (!is_partitioned(s.spec())) {
    ImGui::TextWrapped("%s", kNotPartitionedLine);
    return;
  }
  if (built_for_ != &s) {  // a session is immutable once shown: its numbers are built once
    items_ = build_merge_items(s);
    worst_ = worst_merged_row(s);
    built_for_ = &s;
  }
  ImGui::PushTextWrapPos(0.f);
  ImGui::TextUnformatted(items_.layout.title.c_str());
  ImGui::PopTextWrapPos();
  draw_keys(s);
  draw_row(s, ui);
  draw_bases();
  draw_timings();
  if (!items_.unpartitioned.empty()) {
    std::string txt = "not over the partitions: ";
    for (size_t i = 0; i < items_.unpartitioned.size(); ++i) txt += (i ? "; " : "") + items_.unpartitioned[i];
    ImGui::PushTextWrapPos(0.f);
    ImGui::TextDisabled("%s", txt.c_str());
    ImGui::PopTextWrapPos();
  }
}

}  // namespace attnscope::gui
