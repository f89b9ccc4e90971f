#include "engine_panel.h"

#include <imgui.h>

#include <algorithm>
#include <string>

#include "draw/colormap.h"
#include "draw/text_fit.h"

namespace attnscope::gui {

namespace {

constexpr int kMaxGridRows = 64;   // rows drawn per table; the rest are counted
constexpr int kMaxGridCols = 512;  // columns drawn per row
constexpr size_t kMaxText = 4000;  // characters of one tensor's values in the table

std::string values_line(const EngineTensor& t) {
  std::string s;
  for (size_t i = 0; i < t.values.size() && s.size() < kMaxText; ++i) {
    if (i) s += ' ';
    s += std::to_string(t.values[i]);
  }
  if (s.size() >= kMaxText) s += " ... (" + std::to_string(t.values.size()) + " values)";
  return s;
}

std::string shape_line(const EngineTensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(t.shape[i]);
  }
  return s + "]";
}

}  // namespace

EngineView build_engine_view(const Session& s, Engine e) { return engine_metadata(e, s.spec(), s.plan); }

// One cell per table entry, coloured by the owner of the page it names (the Pages tab's colours:
// grey the null page, dark an unused page or one outside the pool); the id is written in the cell
// when it fits.
void EnginePanel::draw_grid(const Session& s, const EngineTensor& t) {
  const PageTable& pt = s.plan.pages;
  const int rows = static_cast<int>(t.shape[0]), cols = static_cast<int>(t.shape[1]);
  const int shown_rows = std::min(rows, kMaxGridRows), shown_cols = std::min(cols, kMaxGridCols);
  const float avail = ImGui::GetContentRegionAvail().x - 40;
  const float cell = std::clamp(avail / std::max(1, shown_cols), 4.f, 36.f);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGui::SetCursorPosX(ImGui::GetCursorPosX() + 40);
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 mp = ImGui::GetIO().MousePos;
  int hr = -1, hc = -1;
  char b[24];
  for (int r = 0; r < shown_rows; ++r) {
    std::snprintf(b, sizeof b, "%d", r);
    dl->AddText(ImVec2(p0.x - 36, p0.y + r * cell), IM_COL32(185, 185, 185, 255), b);
    for (int c = 0; c < shown_cols; ++c) {
      const int64_t v = t.values[static_cast<size_t>(r) * cols + c];
      const int owner = engine_cell_owner(pt, v, t.slots);
      ImU32 col = IM_COL32(45, 45, 52, 255);
      if (owner >= 0) col = pack_abgr(owner_colour(owner));
      if (owner == kPageNull) col = IM_COL32(120, 120, 120, 255);
      const float x = p0.x + c * cell, y = p0.y + r * cell;
      dl->AddRectFilled(ImVec2(x, y), ImVec2(x + cell - 1, y + cell - 1), col);
      std::snprintf(b, sizeof b, "%lld", static_cast<long long>(v));
      if (ImGui::CalcTextSize(b).x < cell - 2 && cell >= 14) dl->AddText(ImVec2(x + 1, y), IM_COL32(20, 20, 20, 255), b);
      if (mp.x >= x && mp.x < x + cell && mp.y >= y && mp.y < y + cell) hr = r, hc = c;
    }
  }
  ImGui::Dummy(ImVec2(shown_cols * cell, shown_rows * cell));
  if (shown_rows < rows || shown_cols < cols)
    ImGui::TextDisabled("(first %d of %d rows, %d of %d columns drawn)", shown_rows, rows, shown_cols, cols);
  if (hr >= 0 && ImGui::IsWindowHovered()) {
    const int64_t v = t.values[static_cast<size_t>(hr) * cols + hc];
    ImGui::BeginTooltip();
    ImGui::Text("%s[%d, %d] = %lld", t.name.c_str(), hr, hc, static_cast<long long>(v));
    ImGui::TextUnformatted(engine_cell_text(pt, v, t.slots).c_str());
    ImGui::EndTooltip();
  }
}

void EnginePanel::draw(const Session& s, UiState& ui) {
  ImGui::RadioButton("SGLang FlashAttention (sglang-fa)", &ui.engine, 0);
  ImGui::SameLine();
  ImGui::RadioButton("vLLM FlashInfer (vllm-flashinfer)", &ui.engine, 1);
  ImGui::SameLine();  // the DeepSeek sparse attention backends' index buffers (a /sparse case)
  ImGui::RadioButton("SGLang DSA (sglang-nsa)", &ui.engine, 2);
  ImGui::SameLine();
  ImGui::RadioButton("vLLM DSA (vllm-flashmla-sparse)", &ui.engine, 3);
  ui.engine = std::clamp(ui.engine, 0, 3);
  const Engine e = static_cast<Engine>(ui.engine);
  if (built_for_ != &s || built_engine_ != ui.engine) {
    view_ = build_engine_view(s, e);
    built_for_ = &s;
    built_engine_ = ui.engine;
  }
  const EngineSource& src = engine_source(e);
  ImGui::TextDisabled("%s %s @ %.12s (the tensors are shown, not yet fed to the backends)", src.repo, src.file, src.commit);
  ImGui::Text("mode: %s", view_.mode.c_str());
  if (!view_.mode_reason.empty()) {
    ImGui::SameLine();
    std::string why = "(";
    why += view_.mode_reason;
    text_elided(why + ")");
  }
  if (view_.refusal) {
    ImGui::TextColored(ImVec4(1, 0.55f, 0.3f, 1), "refused:");
    ImGui::SameLine();
    ImGui::TextWrapped("%s", view_.refusal->c_str());
    return;
  }
  if (!view_.request_order.empty()) {
    std::string o;
    for (int r : view_.request_order) {
      o += ' ';
      o += std::to_string(r);
    }
    ImGui::Text("request order (the case's index at each batch position):%s", o.c_str());
  }
  for (const auto& m : view_.mismatches) ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "mismatch: %s", m.c_str());
  if (ImGui::BeginTable("tensors", 5, ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders | ImGuiTableFlags_Resizable)) {
    ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthFixed, 300);
    ImGui::TableSetupColumn("dtype", ImGuiTableColumnFlags_WidthFixed, 50);
    ImGui::TableSetupColumn("shape", ImGuiTableColumnFlags_WidthFixed, 80);
    ImGui::TableSetupColumn("values");
    ImGui::TableSetupColumn("what", ImGuiTableColumnFlags_WidthFixed, 260);
    ImGui::TableHeadersRow();
    for (const auto& t : view_.tensors) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(t.name.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(t.dtype.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(shape_line(t).c_str());
      ImGui::TableNextColumn();
      text_elided(t.table ? "(grid below) " + values_line(t) : values_line(t));
      ImGui::TableNextColumn();
      text_elided(t.note);
    }
    ImGui::EndTable();
  }
  for (const auto& t : view_.tensors) {
    if (!t.table) continue;
    const std::string head = t.name + " " + shape_line(t) + (t.slots ? ": token slots" : ": physical pages");
    if (ImGui::CollapsingHeader(head.c_str(), ImGuiTreeNodeFlags_DefaultOpen)) draw_grid(s, t);
  }
  for (const auto& n : view_.notes) ImGui::TextWrapped("note: %s", n.c_str());
}

}  // namespace attnscope::gui
