#include "local_panel.h"

#include <imgui.h>

#include <algorithm>
#include <string>

#include "attnscope/mask.h"
#include "draw/colormap.h"
#include "draw/text_fit.h"

namespace attnscope::gui {

LocalItems build_local_items(const Session& s) {
  LocalItems it;
  it.chunk = s.plan.local.chunk;
  for (size_t i = 0; i < s.plan.local.batches.size(); ++i) {
    const auto& b = s.plan.local.batches[i];
    VbDiagram d;
    d.index = static_cast<int>(i);
    d.request = b.request;
    d.q_begin = b.q_begin;
    d.q_len = b.q_len;
    d.kv_begin = b.kv_begin;
    d.kv_len = b.kv_len;
    d.q_abs_first = q_abs_of(s.plan.masks[b.request], b.q_begin);
    it.batches.push_back(d);
  }
  return it;
}

void LocalPanel::draw(const Session& s, UiState& ui) {
  if (built_for_ != &s) {
    items_ = build_local_items(s);
    built_for_ = &s;
  }
  const LocalItems& it = items_;
  if (it.batches.empty()) {
    ImGui::TextWrapped(
        "This case has no chunked local attention (/attention/local_chunk). With a chunk c, vLLM cuts every request into one "
        "causal "
        "virtual request per chunk its new tokens touch; the table and diagrams appear here. Try "
        "examples/llama4-chunked-local.json.");
    return;
  }
  ImGui::Text("chunk %d: %zu virtual batches (vLLM make_local_attention_virtual_batches)", it.chunk, it.batches.size());
  if (ImGui::BeginTable("vbs", 7, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY, ImVec2(0, 220))) {
    for (const char* h : {"vb", "request", "q_begin", "q_len", "chunk start", "kv_len", "block table"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const auto& b : it.batches) {
      ImGui::TableNextRow();
      const int vals[] = {b.index, b.request, b.q_begin, b.q_len, b.kv_begin, b.kv_len};
      for (int v : vals) {
        ImGui::TableNextColumn();
        ImGui::Text("%d", v);
      }
      ImGui::TableNextColumn();
      const auto& bt = s.plan.local.batches[b.index].block_table;
      std::string t;
      for (size_t i = 0; i < bt.size() && i < 512; ++i) {
        if (i) t += ' ';
        t += std::to_string(bt[i]);
      }
      if (bt.size() > 512) t += " ...";
      text_elided(t);  // cut to the column with "...", whole in the tooltip
    }
    ImGui::EndTable();
  }
  // diagrams: each virtual batch's q x kv causal block within its chunk
  ImGui::Text("Each diagram: rows are the virtual batch's queries, columns its chunk's keys; yellow = visible.");
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float box = 96.f;
  const float avail = ImGui::GetContentRegionAvail().x;
  const int per_row = std::max(1, static_cast<int>(avail / (box + 24)));
  ImVec2 origin = ImGui::GetCursorScreenPos();
  for (size_t i = 0; i < it.batches.size() && i < 64; ++i) {
    const auto& b = it.batches[i];
    const float x0 = origin.x + (i % per_row) * (box + 24), y0 = origin.y + (i / per_row) * (box + 36);
    const Rgba oc = owner_colour(b.request);
    dl->AddRect(ImVec2(x0 - 1, y0 - 1), ImVec2(x0 + box + 1, y0 + box + 1), pack_abgr(oc));
    const int n = std::min(32, std::max(b.q_len, 1)), m = std::min(32, std::max(it.chunk, 1));
    const float cw = box / m, ch = box / n;
    const RowMask& rm = s.plan.masks[b.request];
    for (int r = 0; r < n; ++r) {
      const int q = b.q_begin + r * b.q_len / n;
      const int qa = q_abs_of(rm, q);
      for (int c = 0; c < m; ++c) {
        const int k = b.kv_begin + c * it.chunk / m;
        const bool vis = k < b.kv_begin + b.kv_len && allowed(rm, qa, k);
        dl->AddRectFilled(ImVec2(x0 + c * cw, y0 + r * ch), ImVec2(x0 + (c + 1) * cw, y0 + (r + 1) * ch),
                          vis ? IM_COL32(253, 231, 37, 255) : IM_COL32(30, 32, 40, 255));
      }
    }
    const std::string label =
        "vb " + std::to_string(b.index) + " r" + std::to_string(b.request) + " @" + std::to_string(b.kv_begin);
    dl->AddText(ImVec2(x0, y0 + box + 3), IM_COL32(220, 220, 220, 255), label.c_str());
  }
  const int rows = static_cast<int>((std::min<size_t>(it.batches.size(), 64) + per_row - 1) / per_row);
  ImGui::Dummy(ImVec2(avail, rows * (box + 36)));
  (void)ui;
}

}  // namespace attnscope::gui
