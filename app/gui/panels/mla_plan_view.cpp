// The Split-KV tab's MLA view: mla_plan_view.h.
#include "mla_plan_view.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "draw/colormap.h"

namespace attnscope::gui {

MlaPlanItems build_mla_plan_items(const Session& s) {
  MlaPlanItems it;
  if (!s.spec().mla_absorbed()) return it;
  it.mla = true;
  const FlashInferMlaPlan& lib = s.plan.library.flashinfer_mla;
  const MlaPlanModel model = flashinfer_mla_model(lib);
  it.line = flashinfer_mla_agreement_line(model, lib);
  it.available = lib.available;
  if (lib.ran) it.source = "device answers from " + lib.device.source;
  if (lib.available || lib.refused) it.diffs = compare_flashinfer_mla_plan(model, lib);
  it.agrees = lib.available && it.diffs.empty();
  const MlaSchedule& sch = lib.available ? lib.schedule : model.schedule;
  const MlaPlanInputs& in = lib.available ? lib.inputs : model.inputs;
  it.cluster_size = static_cast<int>(sch.num_blks_x);
  it.kv_len_limit = model.kv_len_limit;
  it.merge_ctas = model.merge_ctas;
  it.work_items = static_cast<int>(sch.works.size());
  for (size_t c = 0; c + 1 < sch.work_indptr.size(); ++c) {
    std::vector<MlaLaneItem> lane;
    int64_t keys = 0;
    for (int i = sch.work_indptr[c]; i < sch.work_indptr[c + 1] && i < static_cast<int>(sch.works.size()); ++i) {
      const MlaWork& w = sch.works[i];
      const auto r = std::upper_bound(in.qo_indptr.begin(), in.qo_indptr.end(), w.q_indptr) - in.qo_indptr.begin() - 1;
      lane.push_back({static_cast<int>(std::max<std::ptrdiff_t>(r, 0)), w.q_start, w.kv_start, w.kv_end, w.partial_indptr >= 0});
      keys += w.kv_end - w.kv_start;
    }
    it.longest_lane = std::max(it.longest_lane, keys);
    it.lanes.push_back(std::move(lane));
  }
  return it;
}

void draw_mla_plan(const MlaPlanItems& it) {
  if (!it.mla || !ImGui::CollapsingHeader("FlashInfer's MLA plan (MLAPlan) beside the model", ImGuiTreeNodeFlags_DefaultOpen))
    return;
  if (!it.source.empty()) ImGui::TextColored(ImVec4(0.95f, 0.85f, 0.4f, 1), "%s", it.source.c_str());
  ImGui::PushStyleColor(ImGuiCol_Text, !it.available ? ImVec4(0.6f, 0.6f, 0.6f, 1)
                                       : it.agrees   ? ImVec4(0.4f, 0.9f, 0.4f, 1)
                                                     : ImVec4(1, 0.45f, 0.3f, 1));
  ImGui::TextWrapped("%s", it.line.c_str());
  ImGui::PopStyleColor();
  for (const auto& d : it.diffs)
    ImGui::TextColored(ImVec4(1, 0.45f, 0.3f, 1), "  %s: model %s | FlashInfer %s", d.field.c_str(), d.model.c_str(),
                       d.library.c_str());
  ImGui::Text("%s schedule: %zu clusters of %d CTA%s, %d work items, at most %d keys each, %d merge CTAs",
              it.available ? "FlashInfer's" : "the model's", it.lanes.size(), it.cluster_size, it.cluster_size > 1 ? "s" : "",
              it.work_items, it.kv_len_limit, it.merge_ctas);
  if (it.lanes.empty() || it.longest_lane <= 0) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float w = std::max(200.f, ImGui::GetContentRegionAvail().x - 60);
  const float lane_h = std::clamp(260.f / static_cast<float>(it.lanes.size()), 2.f, 12.f);
  const float px = w / static_cast<float>(it.longest_lane);
  ImVec2 p0 = ImGui::GetCursorScreenPos();
  p0.x += 56;
  const ImVec2 mp = ImGui::GetIO().MousePos;
  const MlaLaneItem* hovered = nullptr;
  int hovered_lane = -1;
  for (size_t c = 0; c < it.lanes.size(); ++c) {
    const float y = p0.y + c * lane_h;
    if (c % std::max<size_t>(1, static_cast<size_t>(14 / lane_h)) == 0) {
      char b[24];
      std::snprintf(b, sizeof b, "%zu", c);
      dl->AddText(ImVec2(p0.x - 52, y - 3), IM_COL32(170, 170, 170, 255), b);
    }
    float x = p0.x;
    for (const MlaLaneItem& item : it.lanes[c]) {
      const float x1 = x + std::max(1.f, (item.kv_end - item.kv_start) * px);
      dl->AddRectFilled(ImVec2(x, y), ImVec2(x1 - 1, y + lane_h - 1), pack_abgr(owner_colour(item.request)));
      if (item.split) dl->AddLine(ImVec2(x, y + lane_h - 1), ImVec2(std::min(x1 - 1, x + lane_h), y), IM_COL32(20, 20, 20, 255));
      if (mp.x >= x && mp.x < x1 && mp.y >= y && mp.y < y + lane_h) {
        hovered = &item;
        hovered_lane = static_cast<int>(c);
      }
      x = x1;
    }
  }
  ImGui::Dummy(ImVec2(w + 56, it.lanes.size() * lane_h + 4));
  ImGui::TextDisabled("one lane per cluster (y), its work items end to end by keys (x), coloured by request; hatched: split");
  if (hovered && ImGui::IsWindowHovered()) {
    ImGui::BeginTooltip();
    ImGui::Text("cluster %d: request %d, packed rows from %d, keys [%d, %d)%s", hovered_lane, hovered->request, hovered->q_start,
                hovered->kv_start, hovered->kv_end, hovered->split ? ", split (partial output, merged later)" : "");
    ImGui::EndTooltip();
  }
}

}  // namespace attnscope::gui
