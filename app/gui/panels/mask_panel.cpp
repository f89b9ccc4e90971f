#include "mask_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attnscope/block_map.h"
#include "attnscope/mask.h"
#include "attnscope/mask_bits.h"
#include "attnscope/mla.h"
#include "attnscope/registry.h"
#include "attnscope/workload.h"
#include "draw/axes.h"
#include "draw/colormap.h"
#include "expr_editor.h"

namespace attnscope::gui {

MaskItems build_mask_items(const Session& s, int request, int max_cells) {
  MaskItems m;
  const CaseSpec& c = s.spec();
  request = std::clamp(request, 0, static_cast<int>(c.requests.size()) - 1);
  m.request = request;
  m.q_len = c.requests[request].q_len;
  m.kv_len = c.requests[request].kv_len;
  m.q_per_cell = std::max(1, (m.q_len + max_cells - 1) / max_cells);
  m.k_per_cell = std::max(1, (m.kv_len + max_cells - 1) / max_cells);
  m.rows = (m.q_len + m.q_per_cell - 1) / m.q_per_cell;
  m.cols = (m.kv_len + m.k_per_cell - 1) / m.k_per_cell;
  m.cells.assign(static_cast<size_t>(m.rows) * m.cols, Cell::kNone);
  const RowMask& rm = s.plan.masks[request];
  // a cell is "all" iff each of its rows allows every key of the cell, "some" iff one row allows one
  std::vector<uint8_t> all(m.cols), any(m.cols);
  for (int r = 0; r < m.rows; ++r) {
    std::fill(all.begin(), all.end(), 1);
    std::fill(any.begin(), any.end(), 0);
    for (int q = r * m.q_per_cell; q < std::min(m.q_len, (r + 1) * m.q_per_cell); ++q) {
      const int qa = q_abs_of(rm, q);
      m.allowed += allowed_in(rm, qa, 0, m.kv_len);
      for (int col = 0; col < m.cols; ++col) {
        const int k0 = col * m.k_per_cell, k1 = std::min(m.kv_len, k0 + m.k_per_cell);
        const int n = allowed_in(rm, qa, k0, k1);
        if (n < k1 - k0) all[col] = 0;
        if (n > 0) any[col] = 1;
      }
    }
    for (int col = 0; col < m.cols; ++col)
      m.cells[static_cast<size_t>(r) * m.cols + col] = all[col] ? Cell::kAll : any[col] ? Cell::kSome : Cell::kNone;
  }
  const int G = c.group_size(), T = s.plan.split.cta_tile_q;
  for (const auto& u : s.plan.units) {
    if (u.request != request) continue;
    // a red line where one virtual batch ends and the next begins, never at row 0
    if (!s.plan.local.batches.empty() && u.q_begin > 0 &&
        std::find(m.unit_starts.begin(), m.unit_starts.end(), u.q_begin) == m.unit_starts.end())
      m.unit_starts.push_back(u.q_begin);
    for (int row = 0; row < u.q_len * G; row += T) m.q_tile_starts.push_back(u.q_begin + row / G);
  }
  return m;
}

Readout mask_readout(const Session& s, int request, int head, int q, int k, const Fp8Data* fp8) {
  Readout r;
  const CaseSpec& c = s.spec();
  const RowMask& rm = s.plan.masks[request];
  r.q = q;
  r.k = k;
  r.q_abs = q_abs_of(rm, q);
  r.allowed = allowed(rm, r.q_abs, k);
  const uint64_t seed = c.request_seed(request);
  const int kvh = head / c.group_size();
  // FP8: the stored values (x / scale rounded to FP8) and their scales, as the workload holds them
  const bool quantised = c.fp8_kv() && fp8 && fp8->available;
  r.fp8 = quantised;
  r.pre_quantisation = c.fp8_kv() && !quantised;
  if (quantised) {
    const PageTable& pt = s.plan.pages;
    r.k_scale = fp8->scale_at(false, pt.page_of(request, k), k % pt.page_size, kvh);
    r.q_scale = fp8->q_scale;
  }
  double dot = 0;
  if (c.is_mla()) {  // derived rows (docs/conventions.md section 13); no FP8 or outliers with /mla
    const std::vector<float> qr = mla_query_row(c, request, q, head), kr = mla_key_row(c, request, k, kvh);
    for (int d = 0; d < c.head_dim_qk; ++d) dot += static_cast<double>(qr[d]) * kr[d];
  }
  for (int d = 0; d < (c.is_mla() ? 0 : c.head_dim_qk); ++d) {
    const double scale =
        std::count(c.data.outlier_channels.begin(), c.data.outlier_channels.end(), d) ? c.data.outlier_scale : 1.0;
    float qv = gen_value(seed, TensorId::kQ, q_index(c, request, q, head, d), c.data.mean, c.data.std, 1.0, c.dtype);
    float kv = gen_value(seed, TensorId::kK, kv_index(k, kvh, d, c.num_kv_heads, c.head_dim_qk), c.data.mean, c.data.std, scale,
                         c.dtype);
    if (quantised) {
      kv = fp8_bits_to_f32(fp8->format, quantize_fp8(fp8->format, kv, static_cast<float>(r.k_scale)));
      if (fp8->fp8_attention) qv = fp8_bits_to_f32(fp8->format, quantize_fp8(fp8->format, qv, fp8->q_scale));
    }
    dot += static_cast<double>(qv) * kv;
  }
  double x = dot * (r.q_scale * r.k_scale) * c.sm_scale_or_default();
  r.logit = x;
  if (s.plan.score_mod) {
    // a score_mod replaces the scaled logit; validation keeps soft_cap and alibi off beside it
    x = s.plan.score_mod->eval(expr_env(c, request, head, r.q_abs, k, x));
  } else {
    if (c.attention.soft_cap) x = *c.attention.soft_cap * std::tanh(x / *c.attention.soft_cap);
    if (c.attention.alibi) x += alibi_slope(head, c.num_qo_heads) * (k - r.q_abs);
  }
  r.score = x;
  r.mask_mod = c.attention.mask_mod.value_or("");
  r.score_mod = c.attention.score_mod.value_or("");
  int64_t token = 0;
  for (int i = 0; i < request; ++i) token += c.requests[i].q_len;
  token += q;
  for (const std::string& id : backends_with_role(Role::kReference)) {
    const Result* ref = s.result(id);
    if (ref && ref->ok() && ref->row_ok(token) && r.allowed && !r.pre_quantisation) {
      r.has_prob = true;
      r.prob = std::exp(x - ref->lse[token * c.num_qo_heads + head]);
      break;
    }
  }
  return r;
}

ExprSummary build_expr_summary(const Session& s, int request) {
  ExprSummary e;
  const CaseSpec& c = s.spec();
  request = std::clamp(request, 0, static_cast<int>(c.requests.size()) - 1);
  e.mask_mod = c.attention.mask_mod.value_or("");
  e.score_mod = c.attention.score_mod.value_or("");
  e.and_note = mask_mod_and_note(c, request);
  const BlockMap& bm = s.plan.blocks;
  e.full = bm.full, e.partial = bm.partial, e.empty = bm.empty;
  e.sparsity = bm.sparsity();
  for (const auto& ub : bm.units)
    if (s.plan.units[ub.unit].request == request) e.req_full += ub.full, e.req_partial += ub.partial, e.req_empty += ub.empty;
  const SplitPlan& sp = s.plan.split;
  e.items = sp.num_items;
  for (int i = 0; i < sp.num_items; ++i) {
    const WorkItem& it = sp.items[i];
    e.range_tiles += std::max(0, (it.kv_end - it.kv_begin + kKvTile - 1) / kKvTile);
  }
  e.lists_tiles = static_cast<int>(sp.item_tile_indptr.size()) == sp.num_items + 1;
  e.listed_tiles = e.lists_tiles ? sp.item_tile_indptr.back() : e.range_tiles;

  auto count = [](int64_t n) { return std::to_string(n); };
  if (!e.mask_mod.empty()) e.expr_lines.push_back("mask_mod: " + e.mask_mod);
  if (!e.and_note.empty()) e.expr_lines.push_back(e.and_note);
  if (!e.score_mod.empty()) e.expr_lines.push_back("score_mod: " + e.score_mod + "   (replaces score = q.k * sm_scale)");
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * e.sparsity);
  e.plan_lines.push_back("Block map: " + count(e.full) + " full, " + count(e.partial) + " partial, " + count(e.empty) +
                         " empty blocks, sparsity " + pct + " (this request: " + count(e.req_full) + " full, " +
                         count(e.req_partial) + " partial, " + count(e.req_empty) + " empty).");
  if (e.lists_tiles)
    e.plan_lines.push_back("Work items: " + std::to_string(e.items) + " items visit " + count(e.listed_tiles) +
                           " non-empty KV tiles of the " + count(e.range_tiles) + " in their key ranges; " +
                           count(e.range_tiles - e.listed_tiles) + " tiles are skipped, empty under the mask_mod.");
  else
    e.plan_lines.push_back("Work items: " + std::to_string(e.items) + " items over " + count(e.range_tiles) + " KV tiles of " +
                           std::to_string(kKvTile) + " keys.");
  return e;
}

void MaskPanel::draw(const Session& s, UiState& ui) {
  const CaseSpec& c = s.spec();
  const int nreq = static_cast<int>(c.requests.size());
  ui.request = std::clamp(ui.request, 0, nreq - 1);
  ui.head = std::clamp(ui.head, 0, c.num_qo_heads - 1);
  ImGui::SetNextItemWidth(160);
  ImGui::SliderInt("request", &ui.request, 0, nreq - 1);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(160);
  ImGui::SliderInt("head", &ui.head, 0, c.num_qo_heads - 1);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(120);
  ImGui::SliderFloat("zoom", &ui.mask_zoom, 1.f, 16.f, "%.1fx", ImGuiSliderFlags_Logarithmic);
  if (built_for_ != &s || built_request_ != ui.request) {
    items_ = build_mask_items(s, ui.request);
    std::vector<uint32_t> px(items_.cells.size());
    const uint32_t none = pack_abgr({28, 30, 38, 255}), some = pack_abgr({33, 145, 140, 255}),
                   all = pack_abgr({253, 231, 37, 255});
    for (size_t i = 0; i < px.size(); ++i)
      px[i] = items_.cells[i] == Cell::kAll ? all : items_.cells[i] == Cell::kSome ? some : none;
    tex_.upload(items_.cols, items_.rows, px);
    summary_ = build_expr_summary(s, ui.request);
    tree_ = build_tree_items(s, ui.request);
    if (built_request_ != ui.request) tree_selected_ = tree_.q_len - 1;  // a deep token: its path shows the rule
    built_for_ = &s;
    built_request_ = ui.request;
  }
  const auto& m = items_;
  ImGui::TextWrapped(
      "q_len %d x kv_len %d, %lld allowed pairs (%.1f%%); one cell = %d x %d; yellow: all allowed, teal: some, dark: none",
      m.q_len, m.kv_len, static_cast<long long>(m.allowed), 100.0 * m.allowed / (static_cast<double>(m.q_len) * m.kv_len),
      m.q_per_cell, m.k_per_cell);
  // the expressions above the map, in the colour of text the user typed
  ImGui::PushTextWrapPos(0.f);
  for (const auto& line : summary_.expr_lines) {
    const bool expr = line.rfind("mask_mod: ", 0) == 0 || line.rfind("score_mod: ", 0) == 0;
    if (expr)
      ImGui::TextColored(ImVec4(0.55f, 0.85f, 1.f, 1.f), "%s", line.c_str());
    else
      ImGui::TextDisabled("%s", line.c_str());
  }
  ImGui::PopTextWrapPos();
  // the sentences under the map, measured so that the map leaves them room at any width
  const std::string tiles_line =
      "Tiles: query tile " + std::to_string(s.plan.split.cta_tile_q) + " packed rows (white lines), KV tile " +
      std::to_string(m.kv_tile) + " keys (grey)" +
      (m.unit_starts.empty() ? std::string("") : ", virtual-batch boundaries (red)") + "; zoom in to see blocks outlined " +
      (palette() == Palette::kColourBlind ? "sky blue" : "green") + " (full) or orange (partial, masked).";
  const float wrap = ImGui::GetContentRegionAvail().x;
  float footer = ImGui::CalcTextSize(tiles_line.c_str(), nullptr, false, wrap).y;
  for (const auto& line : summary_.plan_lines) footer += ImGui::CalcTextSize(line.c_str(), nullptr, false, wrap).y;
  footer += ImGui::GetStyle().ItemSpacing.y * (1 + summary_.plan_lines.size()) + ImGui::GetStyle().ItemSpacing.y;
  // a tree request: the tree beside the mask over its new tokens' keys, above the whole mask
  const std::vector<int> tree_hl = draw_tree_child(tree_, &tree_selected_, ImGui::GetContentRegionAvail().y - footer);
  ImGui::BeginChild("maskview", ImVec2(0, -footer), true, ImGuiWindowFlags_HorizontalScrollbar);
  const ImVec2 margin = axes_margin();
  const ImVec2 avail(ImGui::GetContentRegionAvail().x - margin.x - 60, ImGui::GetContentRegionAvail().y - margin.y - 18);
  const float base = std::min(avail.x / std::max(1, m.cols), avail.y / std::max(1, m.rows));
  const float cell = std::max(0.5f, base) * ui.mask_zoom;
  const ImVec2 size(cell * m.cols, cell * m.rows);
  ImGui::SetCursorPos(ImVec2(ImGui::GetCursorPosX() + margin.x, ImGui::GetCursorPosY() + margin.y));
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  ImGui::Image(tex_.id(), size);
  const bool hovered = ImGui::IsItemHovered();
  // pan: drag with the left or right mouse button; zoom: the slider, or Ctrl + wheel
  if (hovered || ImGui::IsItemActive()) {
    const ImGuiIO& io = ImGui::GetIO();
    if (ImGui::IsMouseDragging(ImGuiMouseButton_Left) || ImGui::IsMouseDragging(ImGuiMouseButton_Right)) {
      ImGui::SetScrollX(ImGui::GetScrollX() - io.MouseDelta.x);
      ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseDelta.y);
    }
    if (io.KeyCtrl && io.MouseWheel != 0) ui.mask_zoom = std::clamp(ui.mask_zoom * (io.MouseWheel > 0 ? 1.25f : 0.8f), 1.f, 16.f);
  }
  ImDrawList* dl = ImGui::GetWindowDrawList();
  draw_axes(dl, p0, size, m.kv_len, m.q_len, "key k", "query q");
  // plan overlay: q-tile boundaries (white) and virtual-batch boundaries (red), KV tiles (grey)
  for (int qs : m.q_tile_starts) {
    const float y = p0.y + size.y * qs / std::max(1, m.q_len);
    dl->AddLine(ImVec2(p0.x, y), ImVec2(p0.x + size.x, y), IM_COL32(255, 255, 255, 90));
  }
  for (int qs : m.unit_starts) {
    const float y = p0.y + size.y * qs / std::max(1, m.q_len);
    dl->AddLine(ImVec2(p0.x, y), ImVec2(p0.x + size.x, y), IM_COL32(255, 80, 80, 200), 2.f);
  }
  if (size.x / std::max(1, m.kv_len) * m.kv_tile > 4)
    for (int k = m.kv_tile; k < m.kv_len; k += m.kv_tile) {
      const float x = p0.x + size.x * k / m.kv_len;
      dl->AddLine(ImVec2(x, p0.y), ImVec2(x, p0.y + size.y), IM_COL32(200, 200, 200, 50));
    }
  // block map: outline each (q-tile x KV tile) block, green = full (no mask needed), orange =
  // partial (mask applied); empty blocks are skipped by the kernels and left bare
  {
    const int G = c.group_size(), T = s.plan.split.cta_tile_q;
    const float sx = size.x / std::max(1, m.kv_len), sy = size.y / std::max(1, m.q_len);
    if (sx * kKvTile >= 6 && sy * std::max(1, T / G) >= 4) {
      int drawn = 0;
      for (const auto& ub : s.plan.blocks.units) {
        const WorkUnit& un = s.plan.units[ub.unit];
        if (un.request != m.request) continue;
        for (int t = 0; t < ub.q_tiles && drawn < 20000; ++t) {
          const float q0 = un.q_begin + static_cast<float>(t * T) / G;
          const float q1 = un.q_begin + std::min(static_cast<float>((t + 1) * T) / G, static_cast<float>(un.q_len));
          for (int j = 0; j < ub.kv_tiles; ++j, ++drawn) {
            const TileClass tc = ub.cls[static_cast<size_t>(t) * ub.kv_tiles + j];
            if (tc == TileClass::kEmpty) continue;
            const float k0 = static_cast<float>(un.kv_begin + j * kKvTile);
            const float k1 = std::min(k0 + kKvTile, static_cast<float>(un.kv_begin + un.kv_len));
            dl->AddRect(ImVec2(p0.x + k0 * sx + 1, p0.y + q0 * sy + 1), ImVec2(p0.x + k1 * sx - 1, p0.y + q1 * sy - 1),
                        pack_abgr(tc == TileClass::kFull ? block_full_colour() : block_partial_colour()));
          }
        }
      }
    }
  }
  draw_tree_path_on_mask(dl, tree_, tree_hl, p0, size);
  if (hovered) {
    const ImVec2 mp = ImGui::GetIO().MousePos;
    const int q = std::clamp(static_cast<int>((mp.y - p0.y) / size.y * m.q_len), 0, m.q_len - 1);
    const int k = std::clamp(static_cast<int>((mp.x - p0.x) / size.x * m.kv_len), 0, m.kv_len - 1);
    const auto fp8 = s.spec().fp8_kv() ? fp8_cache().get(s) : nullptr;
    const std::array<int, 4> at{m.request, ui.head, q, k};
    if (at != readout_at_ || readout_for_ != &s || fp8) {  // FP8: the cache may still be filling
      readout_ = mask_readout(s, m.request, ui.head, q, k, fp8.get());
      readout_at_ = at;
      readout_for_ = &s;
    }
    const Readout& r = readout_;
    ImGui::BeginTooltip();
    ImGui::Text("q %d (q_abs %d), k %d: %s", r.q, r.q_abs, r.k, r.allowed ? "allowed" : "masked");
    if (!r.score_mod.empty())
      ImGui::Text("score %.5g = score_mod(score = q.k * sm_scale = %.5g)%s", r.score, r.logit,
                  r.allowed ? "" : " (masked: -inf)");
    else
      ImGui::Text("score %.5g%s", r.score, r.allowed ? "" : " (masked: -inf)");
    if (r.has_prob) ImGui::Text("probability %.4g (reference LSE)", r.prob);
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 45);
    if (r.fp8)
      ImGui::TextDisabled("from the FP8 cache: stored K x its scale %.4g%s", r.k_scale,
                          s.spec().fp8_attention ? ", stored Q x its scale" : "");
    if (r.pre_quantisation)
      ImGui::TextDisabled(
          "the logit before FP8 quantisation, no probability: the FP8 scales are not known here (being computed, or the case is "
          "over the GUI's host limit)");
    if (!r.mask_mod.empty()) ImGui::TextDisabled("mask_mod: %s", r.mask_mod.c_str());
    if (!r.score_mod.empty()) ImGui::TextDisabled("score_mod: %s", r.score_mod.c_str());
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
  ImGui::EndChild();
  ImGui::PushTextWrapPos(0.f);
  ImGui::TextUnformatted(tiles_line.c_str());
  for (const auto& line : summary_.plan_lines) ImGui::TextUnformatted(line.c_str());
  ImGui::PopTextWrapPos();
}

}  // namespace attnscope::gui
