#include "mask_panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "attnscope/block_map.h"
#include "attnscope/mask.h"
#include "attnscope/mask_bits.h"
#include "attnscope/mla.h"
#include "attnscope/registry.h"
#include "attnscope/workload.h"
#include "draw/axes.h"
#include "draw/colormap.h"
#include "expr_editor.h"
#include "sparse_view.h"

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
    const int64_t pos = c.key_source.position(k);  // a cascade's shared prefix has its own stream
    float kv =
        gen_value(c.key_seed(request, pos), TensorId::kK, kv_index(static_cast<int>(pos), kvh, d, c.num_kv_heads, c.head_dim_qk),
                  c.data.mean, c.data.std, scale, c.dtype);
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
                           count(e.range_tiles - e.listed_tiles) + " tiles are skipped, empty under the " +
                           (c.is_sparse() ? "sparse selection (no kept token)." : "mask_mod."));
  else
    e.plan_lines.push_back("Work items: " + std::to_string(e.items) + " items over " + count(e.range_tiles) + " KV tiles of " +
                           std::to_string(kKvTile) + " keys.");
  return e;
}

namespace {

// The block map over the mask: each (q-tile x KV tile) block outlined, green = full (no mask needed),
// orange = partial (mask applied); empty blocks are skipped by the kernels and left bare. Drawn once
// zoomed in far enough, judged at the zoom's row height `sy_zoom` (a sparse row stretched to be seen
// is not zoomed in).
void draw_block_outlines(ImDrawList* dl, const Session& s, const MaskItems& m, ImVec2 p0, ImVec2 size, float sy_zoom) {
  const int G = s.spec().group_size(), T = s.plan.split.cta_tile_q;
  const float sx = size.x / std::max(1, m.kv_len), sy = size.y / std::max(1, m.q_len);
  if (sx * kKvTile >= 6 && sy_zoom * std::max(1, T / G) >= 4) {
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

// FlexAttention's rule for one block of the packed batch (create_block_mask pads the sequences to
// whole blocks, the padding never allowed): full iff every pair of the block is inside the batch and
// allowed, partial iff some pair is allowed.
std::vector<Cell> expected_flex_blocks(const Session& s, int qb, int kb, int q_blocks, int kv_blocks) {
  const CaseSpec& c = s.spec();
  std::vector<int64_t> count(static_cast<size_t>(q_blocks) * kv_blocks, 0);
  int64_t q0 = 0, k0 = 0;
  for (size_t r = 0; r < c.requests.size(); ++r) {
    const RowMask& rm = s.plan.masks[r];
    const int ql = c.requests[r].q_len, kl = c.requests[r].kv_len;
    for (int q = 0; q < ql; ++q) {
      const int64_t i = (q0 + q) / qb;
      if (i >= q_blocks) break;
      const int qa = q_abs_of(rm, q);
      for (int64_t j = k0 / kb; j * kb < k0 + kl && j < kv_blocks; ++j) {
        const int a = static_cast<int>(std::max<int64_t>(0, j * kb - k0)),
                  b = static_cast<int>(std::min<int64_t>(kl, (j + 1) * kb - k0));
        count[static_cast<size_t>(i) * kv_blocks + j] += allowed_in(rm, qa, a, b);
      }
    }
    q0 += ql;
    k0 += kl;
  }
  std::vector<Cell> out(count.size());
  for (size_t x = 0; x < count.size(); ++x)
    out[x] = count[x] == int64_t{qb} * kb ? Cell::kAll : count[x] > 0 ? Cell::kSome : Cell::kNone;
  return out;
}

const char* cell_word(Cell c) { return c == Cell::kAll ? "full" : c == Cell::kSome ? "partial" : "empty"; }

}  // namespace

FlexBlockItems build_flex_block_items(const Session& s, int request, const ExprSummary& ours) {
  FlexBlockItems f;
  const Result* r = nullptr;
  for (const Result& x : s.results)
    if (x.ok() && !x.block_mask.empty()) r = &x;
  if (r == nullptr) return f;
  f.backend = r->backend;
  const CaseSpec& c = s.spec();
  try {
    const auto j = nlohmann::json::parse(r->block_mask);
    f.q_block = j.at("block_size").at(0).get<int>();
    f.kv_block = j.at("block_size").at(1).get<int>();
    f.total_q = j.at("seq_lengths").at(0).get<int>();
    f.total_kv = j.at("seq_lengths").at(1).get<int>();
    const auto& partial = j.at("kv_indices");
    const auto& full = j.at("full_kv_indices");
    f.q_blocks = static_cast<int>(partial.size());
    f.kv_blocks = std::min(j.at("kv_blocks").get<int>(), 512);
    f.clipped = j.value("clipped", false);
    if (f.q_block <= 0 || f.kv_block <= 0 || f.total_q != c.total_q() || f.total_kv != c.total_kv())
      throw std::runtime_error("its lengths are not this case's packed batch");
    f.cells.assign(static_cast<size_t>(f.q_blocks) * f.kv_blocks, Cell::kNone);
    auto mark = [&](const nlohmann::json& rows, Cell v) {
      for (int i = 0; i < std::min<int>(f.q_blocks, static_cast<int>(rows.size())); ++i)
        for (const auto& k : rows[i]) {
          const int kv = k.get<int>();
          if (kv >= 0 && kv < f.kv_blocks) f.cells[static_cast<size_t>(i) * f.kv_blocks + kv] = v;
        }
    };
    mark(partial, Cell::kSome);
    mark(full, Cell::kAll);
  } catch (const std::exception& e) {
    f.error = std::string("the BlockMask that ") + r->backend + " returned could not be read: " + e.what();
    f.lines.push_back(f.error);
    return f;
  }
  f.present = true;
  for (Cell x : f.cells) (x == Cell::kAll ? f.full : x == Cell::kSome ? f.partial : f.empty) += 1;
  f.expected = expected_flex_blocks(s, f.q_block, f.kv_block, f.q_blocks, f.kv_blocks);
  for (int i = 0; i < f.q_blocks; ++i)
    for (int k = 0; k < f.kv_blocks; ++k)
      if (f.cells[static_cast<size_t>(i) * f.kv_blocks + k] != f.expected[static_cast<size_t>(i) * f.kv_blocks + k]) {
        if (f.differ++ == 0) f.first_differ_q = i, f.first_differ_kv = k;
      }
  request = std::clamp(request, 0, static_cast<int>(c.requests.size()) - 1);
  for (int i = 0; i < request; ++i) f.req_q0 += c.requests[i].q_len, f.req_k0 += c.requests[i].kv_len;
  f.req_q1 = f.req_q0 + c.requests[request].q_len;
  f.req_k1 = f.req_k0 + c.requests[request].kv_len;

  const int64_t all = f.full + f.partial + f.empty;
  char buf[480];
  std::snprintf(buf, sizeof buf,
                "FlexAttention's BlockMask (%s, the batch packed as one sequence of %d queries x %d keys): %lld full, %lld "
                "partial, %lld empty blocks of %d x %d, sparsity %.1f%%%s.",
                f.backend.c_str(), f.total_q, f.total_kv, static_cast<long long>(f.full), static_cast<long long>(f.partial),
                static_cast<long long>(f.empty), f.q_block, f.kv_block, all ? 100.0 * f.empty / all : 0.0,
                f.clipped ? " (the first 512 x 512 blocks)" : "");
  f.lines.push_back(buf);
  const int tq = s.plan.split.cta_tile_q / std::max(1, c.group_size());
  std::snprintf(buf, sizeof buf,
                "attnscope's block map: %lld full, %lld partial, %lld empty blocks of %d queries x %d keys per request, "
                "sparsity %.1f%%; %s",
                static_cast<long long>(ours.full), static_cast<long long>(ours.partial), static_cast<long long>(ours.empty),
                std::max(1, tq), kKvTile, 100.0 * ours.sparsity,
                tq == f.q_block && kKvTile == f.kv_block
                    ? "the same block size."
                    : "the block sizes differ, so the counts do not compare one to one; attnscope's mask is checked on "
                      "FlexAttention's blocks below.");
  f.lines.push_back(buf);
  if (f.differ == 0) {
    f.lines.push_back("attnscope's mask on FlexAttention's " + std::to_string(f.q_block) + " x " + std::to_string(f.kv_block) +
                      " blocks: the same full / partial / empty class for all " + std::to_string(all) + " blocks.");
  } else {
    const size_t at = static_cast<size_t>(f.first_differ_q) * f.kv_blocks + f.first_differ_kv;
    std::snprintf(buf, sizeof buf,
                  "attnscope's mask on FlexAttention's blocks: %lld of %lld blocks differ (outlined red); the first at query "
                  "block %d, key block %d: FlexAttention says %s, attnscope's mask %s.",
                  static_cast<long long>(f.differ), static_cast<long long>(all), f.first_differ_q, f.first_differ_kv,
                  cell_word(f.cells[at]), cell_word(f.expected[at]));
    f.lines.push_back(buf);
  }
  return f;
}

// The map's items, texture and sentences when the snapshot or request changes; FlexAttention's blocks
// when a result brings them.
void MaskPanel::rebuild(const Session& s, const UiState& ui) {
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
    flex_stale_ = true;
  }
  const Result* flex_result = nullptr;
  for (const Result& x : s.results)
    if (x.ok() && !x.block_mask.empty()) flex_result = &x;
  if (flex_stale_ || flex_result != flex_for_) {
    flex_ = build_flex_block_items(s, ui.request, summary_);
    flex_for_ = flex_result;
    flex_stale_ = false;
    if (flex_.present) {
      std::vector<uint32_t> px(flex_.cells.size());
      const uint32_t none = pack_abgr({28, 30, 38, 255}), part = pack_abgr(block_partial_colour()),
                     full = pack_abgr(block_full_colour());
      for (size_t i = 0; i < px.size(); ++i)
        px[i] = flex_.cells[i] == Cell::kAll ? full : flex_.cells[i] == Cell::kSome ? part : none;
      flex_tex_.upload(flex_.kv_blocks, flex_.q_blocks, px);
    }
  }
}

// The hovered pair's tooltip: its readout is recomputed only when the pair moves.
void MaskPanel::draw_readout(const Session& s, const UiState& ui, ImVec2 p0, ImVec2 size) {
  const MaskItems& m = items_;
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
    ImGui::Text("score %.5g = score_mod(score = q.k * sm_scale = %.5g)%s", r.score, r.logit, r.allowed ? "" : " (masked: -inf)");
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

// The explained row (the Softmax tab's) when it is of the shown request, else the request's last row.
const SparseMaskItems* MaskPanel::sparse_items(const Session& s, const UiState& ui) {
  sparse_wanted_ = s.spec().is_sparse() && s.plan.sparse;
  if (!sparse_wanted_) return nullptr;
  if (sparse_keyed_for_ != &s) {
    sparse_case_key_ = sparse_case_key(s.spec(), s.plan);
    sparse_keyed_for_ = &s;
  }
  const int r = ui.request, q_len = s.spec().requests[r].q_len;
  const int q = ui.sm_request == r ? std::clamp(ui.sm_query, 0, q_len - 1) : q_len - 1;
  const int head = ui.head;
  const std::string key = sparse_case_key_ + "|" + std::to_string(r) + "|" + std::to_string(q) + "|" + std::to_string(head);
  if (sparse_job_.is_new(key)) {
    CaseSpec c = s.spec();
    if (c.sparse) c.sparse->indices.clear();  // the selection is the plan's; the copy needs only Q and K
    sparse_job_.want(
        key, [c = std::move(c), sel = s.plan.sparse, r, q, head] { return build_sparse_mask_items(c, (*sel)[r], r, q, head); });
  }
  sparse_job_.poll();
  const SparseMaskItems* m = sparse_job_.value();
  if (!m || m->request != r || m->rows != items_.rows || m->cols != items_.cols) return nullptr;
  if (m != sparse_uploaded_) {
    sparse_tex_.upload(m->cols, m->rows, sparse_mask_pixels(*m));
    sparse_uploaded_ = m;
  }
  return m;
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
  rebuild(s, ui);
  const auto& m = items_;
  const SparseMaskItems* sp = sparse_items(s, ui);
  ImGui::TextWrapped("q_len %d x kv_len %d, %lld allowed pairs (%.1f%%); one cell = %d x %d; %s", m.q_len, m.kv_len,
                     static_cast<long long>(m.allowed), 100.0 * m.allowed / (static_cast<double>(m.q_len) * m.kv_len),
                     m.q_per_cell, m.k_per_cell,
                     sp ? "the sparse view below (click a row to explain it)" : "yellow: all allowed, teal: some, dark: none");
  if (c.is_sparse() && !sp) {
    const std::string why =
        sparse_job_.error().empty() ? "computing the sparse selection's mass ..." : "sparse view: " + sparse_job_.error();
    ImGui::TextDisabled("%s", why.c_str());
  }
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
  for (const auto& line : flex_.lines) footer += ImGui::CalcTextSize(line.c_str(), nullptr, false, wrap).y;
  footer +=
      ImGui::GetStyle().ItemSpacing.y * (1 + summary_.plan_lines.size() + flex_.lines.size()) + ImGui::GetStyle().ItemSpacing.y;
  std::vector<std::string> sparse_lines;  // /sparse: the legend and the explained row's strip above the sentences
  // a few rows (decode) leave the mask a thin band: the strip, where the mass reads, takes the room
  const float strip = m.q_len <= 8 ? std::clamp(ImGui::GetContentRegionAvail().y * 0.5f, 110.f, 420.f) : 110.f;
  if (sp) {
    sparse_lines = {sparse_shade_line(*sp, m.q_len),
                    "Explained row (strip: its keys' mass, kept in colour on dropped grey): " + sparse_row_line(sp->row)};
    for (const auto& line : sparse_lines)
      footer += ImGui::CalcTextSize(line.c_str(), nullptr, false, wrap).y + ImGui::GetStyle().ItemSpacing.y;
    footer += strip + ImGui::GetStyle().ItemSpacing.y;
  }
  // a tree request: the tree beside the mask over its new tokens' keys, above the whole mask
  const std::vector<int> tree_hl = draw_tree_child(tree_, &tree_selected_, ImGui::GetContentRegionAvail().y - footer);
  const float flex_w = flex_.present ? std::floor(ImGui::GetContentRegionAvail().x * 0.42f) : 0.f;
  ImGui::BeginChild("maskview", ImVec2(flex_.present ? -flex_w - ImGui::GetStyle().ItemSpacing.x : 0, -footer), true,
                    ImGuiWindowFlags_HorizontalScrollbar);
  const ImVec2 margin = axes_margin();
  const ImVec2 avail(ImGui::GetContentRegionAvail().x - margin.x - 60, ImGui::GetContentRegionAvail().y - margin.y - 18);
  const float base = std::min(avail.x / std::max(1, m.cols), avail.y / std::max(1, m.rows));
  const float cell = std::max(0.5f, base) * ui.mask_zoom;
  // a sparse decode row stays at least 12 pixels tall: its kept and dropped keys must read
  const ImVec2 size(cell * m.cols, sp ? std::max(cell * m.rows, std::min(avail.y, 12.f * m.rows)) : cell * m.rows);
  ImGui::SetCursorPos(ImVec2(ImGui::GetCursorPosX() + margin.x, ImGui::GetCursorPosY() + margin.y));
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  ImGui::Image(sp ? sparse_tex_.id() : tex_.id(), size);
  const bool hovered = ImGui::IsItemHovered();
  if (sp && hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {  // the clicked row becomes the explained one
    ui.sm_request = m.request;
    ui.sm_query = std::clamp(static_cast<int>((ImGui::GetIO().MousePos.y - p0.y) / size.y * m.q_len), 0, m.q_len - 1);
  }
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
  draw_block_outlines(dl, s, m, p0, size, cell * m.rows / std::max(1, m.q_len));
  draw_tree_path_on_mask(dl, tree_, tree_hl, p0, size);
  if (hovered) draw_readout(s, ui, p0, size);
  ImGui::EndChild();
  if (flex_.present) {
    ImGui::SameLine();
    draw_flex_blocks(flex_w, -footer);
  }
  ImGui::PushTextWrapPos(0.f);
  if (sp) {
    ImGui::TextUnformatted(sparse_lines[0].c_str());
    sparse_views_.strip(sp->row, strip);
    ImGui::TextColored(ImVec4(0.55f, 0.85f, 1.f, 1.f), "%s", sparse_lines[1].c_str());
  }
  ImGui::TextUnformatted(tiles_line.c_str());
  for (const auto& line : summary_.plan_lines) ImGui::TextUnformatted(line.c_str());
  for (size_t i = 0; i < flex_.lines.size(); ++i) {
    if (flex_.differ > 0 && i + 1 == flex_.lines.size())
      ImGui::TextColored(ImVec4(1.f, 0.45f, 0.4f, 1.f), "%s", flex_.lines[i].c_str());
    else
      ImGui::TextUnformatted(flex_.lines[i].c_str());
  }
  ImGui::PopTextWrapPos();
}

// FlexAttention's block grid: one cell per block, the shown request's region outlined white, blocks
// where attnscope's mask says otherwise outlined red.
void MaskPanel::draw_flex_blocks(float width, float height) {
  const FlexBlockItems& f = flex_;
  ImGui::BeginChild("flexview", ImVec2(width, height), true);
  ImGui::Text("FlexAttention BlockMask: %d x %d blocks of %d x %d", f.q_blocks, f.kv_blocks, f.q_block, f.kv_block);
  ImGui::TextDisabled("%s; the packed batch, query blocks down", f.backend.c_str());
  const ImVec2 margin = axes_margin();
  const float legend = ImGui::CalcTextSize("x", nullptr, false, 0).y * 3;
  const ImVec2 avail(ImGui::GetContentRegionAvail().x - margin.x - 80, ImGui::GetContentRegionAvail().y - margin.y - legend - 24);
  const float cell = std::max(1.f, std::min(avail.x / std::max(1, f.kv_blocks), avail.y / std::max(1, f.q_blocks)));
  const ImVec2 size(cell * f.kv_blocks, cell * f.q_blocks);
  ImGui::SetCursorPos(ImVec2(ImGui::GetCursorPosX() + margin.x, ImGui::GetCursorPosY() + margin.y));
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  ImGui::Image(flex_tex_.id(), size);
  const bool hovered = ImGui::IsItemHovered();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  draw_axes(dl, p0, size, f.kv_blocks, f.q_blocks, "key block", "query block");
  if (cell >= 4)
    for (int i = 1; i < std::max(f.q_blocks, f.kv_blocks); ++i) {
      if (i < f.kv_blocks)
        dl->AddLine(ImVec2(p0.x + i * cell, p0.y), ImVec2(p0.x + i * cell, p0.y + size.y), IM_COL32(0, 0, 0, 120));
      if (i < f.q_blocks)
        dl->AddLine(ImVec2(p0.x, p0.y + i * cell), ImVec2(p0.x + size.x, p0.y + i * cell), IM_COL32(0, 0, 0, 120));
    }
  // the shown request's rows and keys in the packed batch
  const float qs = cell / f.q_block, ks = cell / f.kv_block;
  dl->AddRect(ImVec2(p0.x + f.req_k0 * ks, p0.y + f.req_q0 * qs), ImVec2(p0.x + f.req_k1 * ks, p0.y + f.req_q1 * qs),
              IM_COL32(255, 255, 255, 200), 0.f, 0, 1.5f);
  int outlined = 0;
  for (int i = 0; i < f.q_blocks && outlined < 4000; ++i)
    for (int k = 0; k < f.kv_blocks && outlined < 4000; ++k) {
      const size_t x = static_cast<size_t>(i) * f.kv_blocks + k;
      if (f.cells[x] == f.expected[x]) continue;
      ++outlined;
      dl->AddRect(ImVec2(p0.x + k * cell, p0.y + i * cell), ImVec2(p0.x + (k + 1) * cell, p0.y + (i + 1) * cell),
                  IM_COL32(255, 60, 60, 255), 0.f, 0, 2.f);
    }
  if (hovered) {
    const ImVec2 mp = ImGui::GetIO().MousePos;
    const int i = std::clamp(static_cast<int>((mp.y - p0.y) / cell), 0, f.q_blocks - 1);
    const int k = std::clamp(static_cast<int>((mp.x - p0.x) / cell), 0, f.kv_blocks - 1);
    const size_t x = static_cast<size_t>(i) * f.kv_blocks + k;
    ImGui::SetTooltip("query block %d (queries %d-%d), key block %d (keys %d-%d)\nFlexAttention: %s; attnscope's mask: %s", i,
                      i * f.q_block, std::min(f.total_q, (i + 1) * f.q_block) - 1, k, k * f.kv_block,
                      std::min(f.total_kv, (k + 1) * f.kv_block) - 1, cell_word(f.cells[x]), cell_word(f.expected[x]));
  }
  ImGui::SetCursorScreenPos(ImVec2(p0.x - margin.x, p0.y + size.y + 20));
  ImGui::PushTextWrapPos(0.f);
  ImGui::TextDisabled(
      "%s: full, orange: partial (mask_mod applied), dark: empty (skipped); white outline: this request; red: "
      "blocks where attnscope's mask differs",
      palette() == Palette::kColourBlind ? "sky blue" : "green");
  ImGui::PopTextWrapPos();
  ImGui::EndChild();
}

}  // namespace attnscope::gui
