#include "split_panel.h"

#include <imgui.h>

#include <algorithm>

#include "attnscope/library_plan.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "case_json.h"
#include "draw/colormap.h"

namespace attnscope::gui {

namespace {

const ImVec4 kAgrees(0.4f, 0.9f, 0.4f, 1), kDiffers(1, 0.45f, 0.3f, 1);

std::string num(int64_t v) { return std::to_string(v); }

// A vector in a table cell: its size and last entry (the first difference is in the diff's text).
std::string indptr_text(const std::vector<int>& v) {
  return v.empty() ? "[]" : num(static_cast<int64_t>(v.size())) + " entries, last " + num(v.back());
}

}  // namespace

LibraryItems build_library_items(const Session& s) {
  LibraryItems L;
  const FlashInferPlan& f = s.plan.library.flashinfer;
  const SplitPlan& m = s.plan.split;
  L.ran = f.ran;
  L.available = f.available;
  L.refused = f.refused;
  L.title = "FlashInfer's own plan: PrefillSplitQOKVIndptr" + (f.pin.empty() ? std::string() : " (" + f.pin + ")");
  L.line = flashinfer_agreement_line(m, f);
  L.note = f.note;
  if (!f.ran) return L;
  L.source = "device answers from " + f.device.source;
  const std::vector<PlanFieldDiff> diffs = compare_flashinfer_plan(m, f);
  L.agrees = diffs.empty();
  // a row per field: the diff's own words where the two differ, the plain values where they agree
  auto row = [&](const char* field, const std::string& model, const std::string& lib) {
    LibraryField r{field, model, lib, false};
    for (const auto& d : diffs)
      if (d.field == field) {
        r.model = d.model;
        r.library = d.library;
        r.differs = true;
      }
    L.fields.push_back(r);
  };
  row("refusal", m.refusal.empty() ? "accepts" : "refuses", f.refused ? "refuses: " + f.why : "accepts");
  if (!f.available) return L;
  row("cta_tile_q", num(m.cta_tile_q), num(f.cta_tile_q));
  row("kv_chunk_size", m.planner == Planner::kOff ? "unbounded (split off)" : num(m.chunk_tokens) + " tokens",
      f.kv_chunk_unbounded ? "unbounded (split off)" : num(f.kv_chunk_size) + " tokens");
  row("split_kv", m.split_kv ? "true" : "false", f.split_kv ? "true" : "false");
  row("new_batch_size", num(m.num_items), num(f.new_batch_size));
  row("padded_batch_size", num(m.padded_items), num(f.padded_batch_size));
  row("work_items", num(m.num_items) + " (unit, q-tile, kv-chunk)", num(f.new_batch_size) + " (request, qo-tile, kv-tile)");
  row("merge_indptr", indptr_text(m.merge_indptr), indptr_text(f.merge_indptr));
  row("o_indptr", indptr_text(m.o_indptr), indptr_text(f.o_indptr));

  // FlashInfer's grid of every unit; a cell differs where the model's item of the same id is
  // another (unit, q-tile, kv-chunk), or missing
  L.grids.assign(s.plan.units.size(), LibraryGrid{});
  const size_t n = f.request_indices.size();
  for (size_t i = 0; i < n; ++i) {
    const int u = f.request_indices[i];
    if (u < 0 || u >= static_cast<int>(L.grids.size())) continue;
    L.grids[u].tiles = std::max(L.grids[u].tiles, f.qo_tile_indices[i] + 1);
    L.grids[u].chunks = std::max(L.grids[u].chunks, f.kv_tile_indices[i] + 1);
  }
  for (auto& g : L.grids) {
    g.ids.assign(static_cast<size_t>(g.tiles) * g.chunks, -1);
    g.differs.assign(g.ids.size(), 0);
  }
  for (size_t i = 0; i < n; ++i) {
    const int u = f.request_indices[i], t = f.qo_tile_indices[i], k = f.kv_tile_indices[i];
    if (u < 0 || u >= static_cast<int>(L.grids.size())) continue;
    LibraryGrid& g = L.grids[u];
    const size_t cell = static_cast<size_t>(t) * g.chunks + k;
    g.ids[cell] = static_cast<int>(i);
    const bool same = i < m.items.size() && m.items[i].unit == u && m.items[i].q_tile == t && m.items[i].kv_chunk == k;
    g.differs[cell] = same ? 0 : 1;
    L.differing_cells += same ? 0 : 1;
  }
  return L;
}

LibraryItems build_flash_attn_items(const Session& s) {
  LibraryItems L;
  const FlashAttnPlan& f = s.plan.library.flash_attn;
  if (!f.asked) return L;  // ran stays false: the panel shows it for flash_attn cases only
  const SplitPlan& m = f.model;
  L.ran = f.ran;
  L.available = f.available;
  L.refused = f.refused;
  L.title = "FlashAttention-2's own split: flash_attn_with_kvcache's num_splits (" + f.pin + ")";
  L.line = flash_attn_agreement_line(f);
  L.note = f.available ? f.num_splits_from : "";
  if (!f.ran) return L;
  L.source = "device answers from " + f.device.source;
  const std::vector<PlanFieldDiff> diffs = compare_flash_attn_plan(f);
  L.agrees = diffs.empty();
  auto row = [&](const char* field, const std::string& model, const std::string& lib) {
    LibraryField r{field, model, lib, false};
    for (const auto& d : diffs)
      if (d.field == field) {
        r.model = d.model;
        r.library = d.library;
        r.differs = true;
      }
    L.fields.push_back(r);
  };
  row("refusal", "plans it", f.refused ? "refuses: " + f.why : "accepts");
  if (!f.available) return L;
  row("seqlen_k", num(m.seqlen_k) + " tokens", num(f.seqlen_k) + " tokens");
  row("num_splits", num(m.num_splits), num(f.num_splits));
  row("chunk_tokens", num(m.chunk_tokens), num(f.chunk_tokens));
  row("split_kv", m.split_kv ? "true" : "false", f.num_splits > 1 ? "true" : "false");
  return L;
}

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
  it.library = build_library_items(s);
  it.flash_attn = build_flash_attn_items(s);
  it.mla = build_mla_plan_items(s);
  it.padded_extra = s.plan.split.padded_items - s.plan.split.num_items;
  int item = 0;
  for (size_t u = 0; u < s.plan.units.size(); ++u) {
    it.first_item.push_back(item);
    item += s.plan.split.unit_tiles[u] * s.plan.split.unit_chunks[u];
  }
  return it;
}

namespace {

// FlashInfer's own plan beside the model: where the device answers came from, the agreement
// line, and a table of the fields with every differing one marked.
void draw_library(const LibraryItems& L, const char* model_name, const char* header = "FlashInfer's own plan beside the model",
                  const char* lib_column = "FlashInfer", const char* table_id = "fi_plan") {
  if (!ImGui::CollapsingHeader(header, ImGuiTreeNodeFlags_DefaultOpen)) return;
  ImGui::TextUnformatted(L.title.c_str());
  if (!L.source.empty()) ImGui::TextColored(ImVec4(0.95f, 0.85f, 0.4f, 1), "%s", L.source.c_str());
  ImGui::PushStyleColor(ImGuiCol_Text, !L.ran ? ImVec4(0.6f, 0.6f, 0.6f, 1) : L.agrees ? kAgrees : kDiffers);
  ImGui::TextWrapped("%s", L.line.c_str());
  ImGui::PopStyleColor();
  if (!L.note.empty() && L.line.find(L.note) == std::string::npos) ImGui::TextDisabled("%s", L.note.c_str());
  if (L.fields.empty() || !ImGui::BeginTable(table_id, 4, ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg)) return;
  ImGui::TableSetupColumn("field");
  ImGui::TableSetupColumn((std::string("model (") + model_name + ")").c_str());
  ImGui::TableSetupColumn(lib_column);
  ImGui::TableSetupColumn("");
  ImGui::TableHeadersRow();
  for (const auto& f : L.fields) {
    ImGui::TableNextRow();
    if (f.differs) ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg0, IM_COL32(120, 30, 30, 255));
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(f.field.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(f.model.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(f.library.c_str());
    ImGui::TableNextColumn();
    ImGui::TextColored(f.differs ? kDiffers : kAgrees, "%s", f.differs ? "differs" : "=");
  }
  ImGui::EndTable();
  if (L.differing_cells > 0)
    ImGui::TextColored(kDiffers, "%d work-item cells differ (red frames in the grids)", L.differing_cells);
}

}  // namespace

void SplitPanel::draw(const Session& s, UiState& ui) {
  const SplitPlan& sp = s.plan.split;
  if (built_for_ != &s) {  // plans of the four models and the case text: once per snapshot
    items_ = build_split_items(s);
    key_ = case_to_text(s.spec());
    built_for_ = &s;
  }
  const SplitItems& it = items_;
  ImGui::PushTextWrapPos(0.f);
  ImGui::Text("planner %s: tile %d packed rows, chunk %d pages (%lld keys), %s, %d work items x %d kv heads%s",
              planner_name(sp.planner), sp.cta_tile_q, sp.chunk_pages, static_cast<long long>(sp.chunk_tokens),
              sp.split_kv ? "split-KV" : "no split", sp.num_items, s.spec().num_kv_heads,
              it.padded_extra > 0 ? (", +" + std::to_string(it.padded_extra) + " padding CTAs").c_str() : "");
  if (ImGui::CollapsingHeader("Planner reasoning", ImGuiTreeNodeFlags_DefaultOpen))
    for (const auto& line : sp.reasoning) {  // BulletText does not wrap
      ImGui::Bullet();
      ImGui::TextWrapped("%s", line.c_str());
    }
  ImGui::PopTextWrapPos();
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
  draw_library(it.library, planner_name(sp.planner));
  if (it.flash_attn.ran)  // FlashAttention-2's own num_splits beside the flash_attn model
    draw_library(it.flash_attn, "flash_attn", "FlashAttention-2's own split beside the model", "FlashAttention-2", "fa_plan");
  draw_mla_plan(it.mla);  // absorbed MLA cases: FlashInfer's MLAPlan beside the model
  draw_cuda_graph(s);     // /cuda_graph: the captured grid beside the replayed batch
  // batch invariance, computed on demand on a worker
  const std::string& key = key_;
  if (pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    report_ = pending_.get();
  }
  if (report_for_ != key) report_.reset();
  ImGui::Separator();
  if (pending_.valid()) {
    ImGui::Text("batch invariance: running each request alone ...");
  } else if (ImGui::Button(("Check batch invariance (" + backend_for_role(Role::kPlanTwin) + ")").c_str())) {
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
    const LibraryGrid* fg = u < it.library.grids.size() ? &it.library.grids[u] : nullptr;
    ImGui::Text("unit %zu (request %d, q %d..%d, kv %d..%d): %d q-tiles x %d chunks, merge fan-in %d", u, un.request, un.q_begin,
                un.q_begin + un.q_len, un.kv_begin, un.kv_begin + un.kv_len, tiles, chunks, chunks);
    if (fg) {
      ImGui::SameLine();
      ImGui::TextColored(fg->tiles != tiles || fg->chunks != chunks ? kDiffers : kAgrees, "| FlashInfer (right): %d x %d",
                         fg->tiles, fg->chunks);
    }
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    const int shown_t = std::min(tiles, 16), shown_c = std::min(chunks, 32);
    int fi_t = 0, fi_c = 0;
    if (fg) {
      // FlashInfer's grid to the right of the model's; a differing cell is red-framed
      fi_t = std::min(fg->tiles, 16);
      fi_c = std::min(fg->chunks, 32);
      const float x0 = p0.x + shown_c * cw + 24;
      for (int t = 0; t < fi_t; ++t)
        for (int k = 0; k < fi_c; ++k) {
          const size_t cell = static_cast<size_t>(t) * fg->chunks + k;
          const int id = fg->ids[cell];
          if (id < 0) continue;
          const ImVec2 a(x0 + k * cw, p0.y + t * ch), b(a.x + cw - 2, a.y + ch - 2);
          dl->AddRectFilled(a, b, pack_abgr(owner_colour(un.request)));
          if (fg->differs[cell]) dl->AddRect(a, b, IM_COL32(255, 40, 40, 255), 0, 0, 3);
          const std::string label = std::to_string(id);
          dl->AddText(ImVec2(a.x + 3, a.y + 2), IM_COL32(10, 10, 10, 255), label.c_str());
        }
    }
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
    ImGui::Dummy(ImVec2(shown_c * cw + (fg ? 24 + fi_c * cw : 0), std::max(shown_t, fi_t) * ch));
    if (shown_t < tiles || shown_c < chunks) ImGui::TextDisabled("(%d x %d shown)", shown_t, shown_c);
  }
  if (s.plan.units.size() > 64) ImGui::TextDisabled("... %zu more units", s.plan.units.size() - 64);
  ImGui::EndChild();
  (void)ui;
}

}  // namespace attnscope::gui
