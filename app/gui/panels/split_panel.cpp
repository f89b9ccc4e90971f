#include "split_panel.h"

#include <imgui.h>

#include <algorithm>

#include "attnscope/plan.h"
#include "case_json.h"
#include "draw/colormap.h"

namespace attnscope::gui {

SplitItems build_split_items(const Session& s) {
  SplitItems it;
  const CaseSpec& base = s.spec();
  for (Planner pl : {Planner::kFlashInfer, Planner::kFlashAttn, Planner::kFixed, Planner::kOff}) {
    PlannerRow row;
    row.planner = planner_name(pl);
    const CaseSpec c = with_planner(base, pl);
    try {
      const SplitPlan sp = make_split_plan(c, s.plan.units, s.plan.masks);
      row.tile = sp.cta_tile_q;
      row.chunk_pages = sp.chunk_pages;
      row.items = sp.num_items;
      row.padded = sp.padded_items;
      row.split = sp.split_kv;
    } catch (const std::exception& e) {
      row.error = e.what();
    }
    it.models.push_back(row);
  }
  it.padded_extra = s.plan.split.padded_items - s.plan.split.num_items;
  int item = 0;
  for (size_t u = 0; u < s.plan.units.size(); ++u) {
    it.first_item.push_back(item);
    item += s.plan.split.unit_tiles[u] * s.plan.split.unit_chunks[u];
  }
  return it;
}

void SplitPanel::draw(const Session& s, UiState& ui) {
  const SplitPlan& sp = s.plan.split;
  if (built_for_ != &s) {  // plans of the four models and the case text: once per snapshot
    items_ = build_split_items(s);
    key_ = case_to_text(s.spec());
    built_for_ = &s;
  }
  const SplitItems& it = items_;
  ImGui::Text("planner %s: tile %d packed rows, chunk %d pages (%lld keys), %s, %d work items x %d kv heads%s",
              planner_name(sp.planner), sp.cta_tile_q, sp.chunk_pages, static_cast<long long>(sp.chunk_tokens),
              sp.split_kv ? "split-KV" : "no split", sp.num_items, s.spec().num_kv_heads,
              it.padded_extra > 0 ? (", +" + std::to_string(it.padded_extra) + " padding CTAs").c_str() : "");
  if (ImGui::CollapsingHeader("Planner reasoning", ImGuiTreeNodeFlags_DefaultOpen))
    for (const auto& line : sp.reasoning) ImGui::BulletText("%s", line.c_str());
  if (ImGui::CollapsingHeader("Planner models side by side", ImGuiTreeNodeFlags_DefaultOpen) &&
      ImGui::BeginTable("models", 6, ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg)) {
    for (const char* h : {"model", "tile", "chunk (pages)", "split", "items", "grid"}) ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const auto& m : it.models) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%s%s", m.planner.c_str(), m.planner == planner_name(sp.planner) ? " (this case)" : "");
      if (!m.error.empty()) {
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(m.error.c_str());
        continue;
      }
      ImGui::TableNextColumn();
      ImGui::Text("%d", m.tile);
      ImGui::TableNextColumn();
      ImGui::Text("%d", m.chunk_pages);
      ImGui::TableNextColumn();
      ImGui::Text("%s", m.split ? "yes" : "no");
      ImGui::TableNextColumn();
      ImGui::Text("%d", m.items);
      ImGui::TableNextColumn();
      ImGui::Text("%d", m.padded);
    }
    ImGui::EndTable();
  }
  // batch invariance, computed on demand on a worker
  const std::string& key = key_;
  if (pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    report_ = pending_.get();
  }
  if (report_for_ != key) report_.reset();
  ImGui::Separator();
  if (pending_.valid()) {
    ImGui::Text("batch invariance: running each request alone ...");
  } else if (ImGui::Button("Check batch invariance (cpu.tiled)")) {
    report_for_ = key;
    const CaseSpec c = s.spec();
    pending_ = std::async(std::launch::async, [c] { return check_invariance(c, InvarianceOptions{}); });
  }
  if (report_) {
    for (const auto& p : report_->planners) {
      const int same = p.identical_requests();
      const bool ok = p.error.empty() && same == report_->num_requests;
      ImGui::TextColored(ok ? ImVec4(0.4f, 0.9f, 0.4f, 1) : ImVec4(1, 0.6f, 0.3f, 1),
                         "%-10s %d/%d requests bit-identical alone vs batched %s", planner_name(p.planner), same,
                         report_->num_requests, p.error.empty() ? p.note.c_str() : p.error.c_str());
    }
  }
  ImGui::Separator();
  // the grid of every unit: rows = q-tiles, columns = kv-chunks, cell = work item id
  ImGui::BeginChild("grids", ImVec2(0, 0), false, ImGuiWindowFlags_HorizontalScrollbar);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float cw = 34, ch = 18;
  for (size_t u = 0; u < s.plan.units.size() && u < 64; ++u) {
    const auto& un = s.plan.units[u];
    const int tiles = sp.unit_tiles[u], chunks = sp.unit_chunks[u];
    ImGui::Text("unit %zu (request %d, q %d..%d, kv %d..%d): %d q-tiles x %d chunks, merge fan-in %d", u, un.request, un.q_begin,
                un.q_begin + un.q_len, un.kv_begin, un.kv_begin + un.kv_len, tiles, chunks, chunks);
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    const int shown_t = std::min(tiles, 16), shown_c = std::min(chunks, 32);
    for (int t = 0; t < shown_t; ++t)
      for (int k = 0; k < shown_c; ++k) {
        const int id = it.first_item[u] + t * chunks + k;
        const WorkItem& wi = sp.items[id];
        const bool empty = wi.kv_begin >= wi.kv_end;
        const ImVec2 a(p0.x + k * cw, p0.y + t * ch), b(a.x + cw - 2, a.y + ch - 2);
        dl->AddRectFilled(a, b, empty ? IM_COL32(50, 50, 58, 255) : pack_abgr(owner_colour(un.request)));
        const std::string label = std::to_string(id);
        dl->AddText(ImVec2(a.x + 3, a.y + 2), IM_COL32(10, 10, 10, 255), label.c_str());
      }
    ImGui::Dummy(ImVec2(shown_c * cw, shown_t * ch));
    if (shown_t < tiles || shown_c < chunks) ImGui::TextDisabled("(%d x %d shown)", shown_t, shown_c);
  }
  if (s.plan.units.size() > 64) ImGui::TextDisabled("... %zu more units", s.plan.units.size() - 64);
  ImGui::EndChild();
  (void)ui;
}

}  // namespace attnscope::gui
