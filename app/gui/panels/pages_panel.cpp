#include "pages_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "draw/axes.h"
#include "draw/colormap.h"
#include "draw/text_fit.h"
#include "mla_view.h"
#include "sparse_view.h"

namespace attnscope::gui {

PagesItems build_pages_items(const Session& s) {
  PagesItems it;
  const PageTable& pt = s.plan.pages;
  const bool poison = s.spec().kv_cache.poison_unused;
  it.page_size = pt.page_size;
  it.num_pages = pt.num_pages;
  it.pool.resize(pt.num_pages);
  for (int p = 0; p < pt.num_pages; ++p) {
    it.pool[p].owner = pt.owner[p];
    if (pt.owner[p] == kPageNull) it.has_null = true;
    if (pt.owner[p] == kPageUnused) {
      ++it.unused;
      it.pool[p].poisoned = poison;
    }
  }
  const int R = static_cast<int>(pt.indptr.size()) - 1;
  for (int r = 0; r < R; ++r) {
    const int n = pt.pages_of(r);
    it.table_len.push_back(n);
    it.last_fill.push_back(pt.last_page_len[r]);
    std::vector<int> t(pt.indices.begin() + pt.indptr[r], pt.indices.begin() + pt.indptr[r] + std::min(n, 256));
    it.tables.push_back(std::move(t));
    for (int i = pt.indptr[r]; i < pt.indptr[r + 1]; ++i) {
      const bool last = i + 1 == pt.indptr[r + 1];
      it.pool[pt.indices[i]].fill = last ? static_cast<float>(pt.last_page_len[r]) / pt.page_size : 1.f;
      if (last && pt.last_page_len[r] < pt.page_size) it.pool[pt.indices[i]].poisoned = poison;
      ++it.used;
    }
  }
  return it;
}

bool PagesPanel::busy() const { return fp8_shown_ && fp8_cache().busy(); }

bool PagesPanel::fp8_view(const Session& s, UiState& ui) {
  fp8_shown_ = false;
  if (!s.spec().fp8_kv()) return false;
  ImGui::RadioButton("pool", &ui.pages_view, 0);
  ImGui::SameLine();
  ImGui::RadioButton("FP8 scales and saturation", &ui.pages_view, 1);
  ImGui::SameLine();
  ImGui::RadioButton("FP8 error per channel", &ui.pages_view, 2);
  if (ui.pages_view != 1 && ui.pages_view != 2) return false;
  fp8_shown_ = true;
  const auto d = fp8_cache().get(s);
  if (!d) {
    ImGui::TextDisabled("regenerating the FP8 cache for this view ...");
  } else if (!d->available) {
    ImGui::TextWrapped("%s", d->why.c_str());
  } else if (ui.pages_view == 1) {
    scales_.draw(s, *d);
  } else {
    channels_.draw(s, *d);
  }
  return true;
}

const SparseSlots* PagesPanel::sparse_slots(const Session& s, const UiState& ui) {
  if (!s.plan.sparse) return nullptr;
  const int R = static_cast<int>(s.plan.sparse->size());
  const int r = std::clamp(ui.sm_request, 0, R - 1);
  const SparseSelection& sel = (*s.plan.sparse)[r];
  const int q = std::clamp(ui.sm_query, 0, std::max(0, sel.q_len - 1));
  if (slots_for_ != &s || slots_r_ != r || slots_q_ != q) {
    slots_.reset();
    if (sel.q_len > 0) slots_ = sparse_slots_of_row(s.plan.pages, r, q, sel.row(q), sel.top_k);
    ++slots_version_;
    slots_for_ = &s;
    slots_r_ = r;
    slots_q_ = q;
  }
  return slots_ ? &*slots_ : nullptr;
}

void PagesPanel::draw(const Session& s, UiState& ui) {
  if (fp8_view(s, ui)) return;
  if (built_for_ != &s) {
    items_ = build_pages_items(s);
    built_for_ = &s;
  }
  const PagesItems& it = items_;
  if (s.spec().mla) draw_mla_layout(build_mla_layout(s));
  const SparseSlots* sel = sparse_slots(s, ui);
  if (sel) {
    ImGui::PushTextWrapPos(0.f);
    const std::string line = sparse_slots_line(*sel);
    if (sel->outside > 0)
      ImGui::TextColored(ImVec4(1.f, 0.45f, 0.4f, 1.f), "%s", line.c_str());
    else
      ImGui::TextColored(ImVec4(0.55f, 0.85f, 1.f, 1.f), "%s", line.c_str());
    ImGui::PopTextWrapPos();
  }
  ImGui::Text("%d physical pages of %d tokens: %d used, %d unused%s%s", it.num_pages, it.page_size, it.used, it.unused,
              it.has_null ? ", page 0 is the null page" : "",
              s.spec().kv_cache.poison_unused ? "; unused pages and slots hold NaN (hatched)" : "");
  const float avail = ImGui::GetContentRegionAvail().x - 48;  // the left margin holds the row's first page index
  const int max_cells = 4096;
  const int shown = std::min(it.num_pages, max_cells);
  const float cell = std::clamp(std::sqrt(avail * 220.f / std::max(1, shown)), 3.f, 22.f);
  const int per_row = std::max(1, static_cast<int>(avail / cell));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGui::SetCursorPos(ImVec2(ImGui::GetCursorPosX() + 48, ImGui::GetCursorPosY() + 16));
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  {  // axes: page index of each row's first cell on the left, the column offset on top
    char b[24];
    const int rows = (shown + per_row - 1) / per_row;
    const int every = std::max(1, static_cast<int>(16 / cell));
    for (int r = 0; r < rows; r += every) {
      std::snprintf(b, sizeof b, "%d", r * per_row);
      dl->AddText(ImVec2(p0.x - 44, p0.y + r * cell - 2), IM_COL32(185, 185, 185, 255), b);
    }
    for (int c : nice_ticks(per_row, std::max(1, static_cast<int>(per_row * cell / 40)))) {
      std::snprintf(b, sizeof b, "+%d", c);
      dl->AddText(ImVec2(p0.x + c * cell, p0.y - 16), IM_COL32(185, 185, 185, 255), b);
    }
    dl->AddText(ImVec2(p0.x - 44, p0.y - 16), IM_COL32(150, 150, 150, 255), "page");
  }
  int hovered = -1;
  const ImVec2 mp = ImGui::GetIO().MousePos;
  for (int p = 0; p < shown; ++p) {
    const float x = p0.x + (p % per_row) * cell, y = p0.y + (p / per_row) * cell;
    const PageCell& pc = it.pool[p];
    ImU32 col = IM_COL32(45, 45, 52, 255);
    if (pc.owner >= 0) col = pack_abgr(owner_colour(pc.owner));
    if (pc.owner == kPageNull) col = IM_COL32(120, 120, 120, 255);
    dl->AddRectFilled(ImVec2(x, y), ImVec2(x + cell - 1, y + cell - 1), pc.owner >= 0 ? IM_COL32(60, 60, 70, 255) : col);
    if (pc.owner >= 0) dl->AddRectFilled(ImVec2(x, y), ImVec2(x + (cell - 1) * pc.fill, y + cell - 1), col);
    if (pc.poisoned) dl->AddLine(ImVec2(x, y + cell - 1), ImVec2(x + cell - 1, y), IM_COL32(230, 60, 60, 255));
    if (sel && sel->page_count[p] > 0) {  // the explained row's slots here: outline, and a bar of their share of the page
      // a page the request does not own is crossed in orange: request 0's owner colour is already red
      const bool bad = sel->page_outside[p];
      const ImU32 edge = bad ? IM_COL32(255, 170, 0, 255) : IM_COL32(255, 255, 255, 255);
      dl->AddRect(ImVec2(x, y), ImVec2(x + cell - 1, y + cell - 1), edge, 0.f, 0, bad ? 2.f : 1.f);
      if (bad) dl->AddLine(ImVec2(x, y), ImVec2(x + cell - 1, y + cell - 1), edge, 2.f);
      const float share = std::min(1.f, static_cast<float>(sel->page_count[p]) / sel->page_size);
      dl->AddRectFilled(ImVec2(x + 1, y + cell - 1 - std::max(2.f, cell / 4)), ImVec2(x + 1 + (cell - 3) * share, y + cell - 2),
                        bad ? edge : IM_COL32(120, 230, 255, 255));
    }
    if (mp.x >= x && mp.x < x + cell && mp.y >= y && mp.y < y + cell) hovered = p;
  }
  ImGui::Dummy(ImVec2(per_row * cell, ((shown + per_row - 1) / per_row) * cell));
  if (shown < it.num_pages) ImGui::Text("(first %d of %d pages shown)", shown, it.num_pages);
  if (sel && !sel->table.empty()) {
    ImGui::TextDisabled(
        "Request %d's pages in key order (columns, the physical page under each; %s), their %d slots down: cyan = selected",
        sel->request, static_cast<int>(sel->table.size()) < s.plan.pages.pages_of(sel->request) ? "the first 512" : "all",
        sel->page_size);
    sparse_views_.slots(*sel, slots_version_, 200);
  }
  if (hovered >= 0 && ImGui::IsWindowHovered()) {
    const PageCell& pc = it.pool[hovered];
    ImGui::BeginTooltip();
    if (pc.owner >= 0)
      ImGui::Text("page %d: request %d, %.0f%% full%s", hovered, pc.owner, 100 * pc.fill, pc.poisoned ? ", tail slots NaN" : "");
    else
      ImGui::Text("page %d: %s%s", hovered, pc.owner == kPageNull ? "null page (never referenced)" : "unused",
                  pc.poisoned ? ", NaN" : "");
    if (sel && sel->page_count[hovered] > 0)
      ImGui::Text("%d slot(s) selected by request %d's query %d%s", sel->page_count[hovered], sel->request, sel->query,
                  sel->page_outside[hovered] ? ": NOT the request's page (an index bug)" : "");
    ImGui::EndTooltip();
  }
  ImGui::Separator();
  if (ImGui::BeginTable("tables", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_Borders, ImVec2(0, 0))) {
    ImGui::TableSetupColumn("request", ImGuiTableColumnFlags_WidthFixed, 60);
    ImGui::TableSetupColumn("pages", ImGuiTableColumnFlags_WidthFixed, 60);
    ImGui::TableSetupColumn("last page", ImGuiTableColumnFlags_WidthFixed, 80);
    ImGui::TableSetupColumn("block table");
    ImGui::TableHeadersRow();
    for (size_t r = 0; r < it.tables.size(); ++r) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      const Rgba oc = owner_colour(static_cast<int>(r));
      ImGui::TextColored(ImVec4(oc.r / 255.f, oc.g / 255.f, oc.b / 255.f, 1), "%zu", r);
      ImGui::TableNextColumn();
      ImGui::Text("%d", it.table_len[r]);
      ImGui::TableNextColumn();
      ImGui::Text("%d / %d", it.last_fill[r], it.page_size);
      ImGui::TableNextColumn();
      std::string t;
      for (size_t i = 0; i < it.tables[r].size() && t.size() < 4000; ++i) {
        if (i) t += ' ';
        t += std::to_string(it.tables[r][i]);
      }
      if (static_cast<int>(it.tables[r].size()) < it.table_len[r] || t.size() >= 4000) t += " ...";
      text_elided(t);  // cut to the column with "...", whole in the tooltip
    }
    ImGui::EndTable();
  }
  (void)ui;
}

}  // namespace attnscope::gui
