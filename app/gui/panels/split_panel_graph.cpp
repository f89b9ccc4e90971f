// The Split-KV tab's CUDA-graph section (/cuda_graph, docs/conventions.md "CUDA-graph replay").
#include <imgui.h>

#include <algorithm>
#include <string>

#include "attnscope/cuda_graph_pad.h"
#include "cuda_graph_run.h"
#include "draw/colormap.h"
#include "split_panel.h"

namespace attnscope::gui {

namespace {

const ImVec4 kPass(0.4f, 0.9f, 0.4f, 1), kFail(1, 0.45f, 0.3f, 1), kGrey(0.6f, 0.6f, 0.6f, 1);

// One row of boxes, one per entry of the padded batch: the live requests in their colours, the
// padding grey, labelled with the keys each entry reads.
void draw_entries(const CudaGraphPad& pad) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float w = 30, h = 18;
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const int shown = std::min<int>(static_cast<int>(pad.entries.size()), 64);
  for (int b = 0; b < shown; ++b) {
    const GraphPadEntry& e = pad.entries[b];
    const ImVec2 a(p0.x + b * w, p0.y), z(a.x + w - 2, a.y + h);
    dl->AddRectFilled(a, z, e.padding() ? IM_COL32(70, 70, 80, 255) : pack_abgr(owner_colour(e.request)));
    const std::string label = std::to_string(e.seq_len);
    dl->AddText(ImVec2(a.x + 2, a.y + 2), IM_COL32(10, 10, 10, 255), label.c_str());
    if (ImGui::IsMouseHoveringRect(a, z))
      ImGui::SetTooltip("%s: %d query token(s), seq_len %d, %zu page(s)%s", e.padding() ? "padding" : "live request", e.q_len,
                        e.seq_len, e.pages.size(), e.pages.empty() ? "" : (", first page " + std::to_string(e.pages[0])).c_str());
  }
  ImGui::Dummy(ImVec2(shown * w, h));
  if (shown < static_cast<int>(pad.entries.size())) ImGui::TextDisabled("(%d of %zu entries shown)", shown, pad.entries.size());
}

void grid_cell(const GraphGrid& g) {
  if (g.entries == 0) {
    ImGui::TextDisabled("-");
    return;
  }
  ImGui::Text("%d x %d CTAs%s", g.padded_batch, g.kv_heads,
              g.new_batch > 0 ? (" (" + std::to_string(g.new_batch) + " needed)").c_str() : "");
  ImGui::TextDisabled("%s%s", g.split_kv ? ("split-KV " + std::to_string(g.kv_chunk_tokens) + " tokens").c_str() : "no split",
                      g.cta_tile_q > 0 ? (", tile " + std::to_string(g.cta_tile_q)).c_str() : "");
}

}  // namespace

void draw_cuda_graph(const Session& s) {
  const CaseSpec& c = s.spec();
  if (!c.cuda_graph) return;
  const std::string title = "CUDA graph: bucket " + std::to_string(c.cuda_graph->bucket) + ", " +
                            std::to_string(c.requests.size()) + " live (" + graph_engine_name(c.cuda_graph->engine) + " padding)";
  if (!ImGui::CollapsingHeader(title.c_str(), ImGuiTreeNodeFlags_DefaultOpen)) return;
  const CudaGraphPad pad = cuda_graph_pad(c, s.plan.pages);
  ImGui::TextUnformatted("the replayed batch (keys per entry; grey = padding):");
  draw_entries(pad);
  ImGui::TextWrapped("padded rows: %s", pad.expect_text.c_str());
  if (!ImGui::BeginTable("graphs", 4, ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg)) return;
  for (const char* h : {"backend", "captured grid", "replayed batch's grid", "checks"}) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  for (const auto& r : s.results) {
    if (!r.graph) continue;
    const GraphReplayReport& g = *r.graph;
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(r.backend.c_str());
    if (!g.captured) {
      ImGui::TableNextColumn();
      ImGui::TextColored(kGrey, "not captured");
      ImGui::TableNextColumn();
      ImGui::TableNextColumn();
      ImGui::PushStyleColor(ImGuiCol_Text, kGrey);
      ImGui::TextWrapped("%s", g.not_captured.c_str());
      ImGui::PopStyleColor();
      continue;
    }
    ImGui::TableNextColumn();
    grid_cell(g.captured_grid);
    ImGui::TableNextColumn();
    grid_cell(g.replay_grid);
    ImGui::TableNextColumn();
    for (const auto& k : g.checks) {
      ImGui::PushStyleColor(ImGuiCol_Text, k.skipped ? kGrey : k.pass ? kPass : kFail);
      ImGui::TextWrapped("%s %s: %s", k.skipped ? "not checked" : k.pass ? "ok" : "FAIL", k.what.c_str(), k.detail.c_str());
      ImGui::PopStyleColor();
    }
    if (g.replay_reps > 0) ImGui::TextWrapped("time: %s", graph_time_text(g).c_str());
  }
  ImGui::EndTable();
}

}  // namespace attnscope::gui
