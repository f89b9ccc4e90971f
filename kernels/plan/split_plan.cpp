// Split-KV planners. The `flashinfer` model follows FlashInfer's FA2 PrefillPlan
// (semantics.md section 4); `fixed` is the same with a fixed chunk size (FlashInfer PR #1675);
// `off` is disable_split_kv; `flash_attn` is FlashAttention-2's num_splits heuristic (section 5).
#include "attnscope/split_plan.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

namespace attnscope {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string str(int64_t v) { return std::to_string(v); }

// FlashInfer's FA2DetermineCtaTileQ for compute capability >= 8.
int fa2_cta_tile_q(int64_t packed, int head_dim_vo) {
  if (packed > 64 && head_dim_vo < 256) return 128;
  return packed > 16 ? 64 : 16;
}

// Work items for chunks of `chunk_tokens` keys (sum over units of tiles x chunks).
int64_t count_items(const std::vector<int64_t>& packed, const std::vector<int>& kv_pages, int tile, int64_t chunk_pages) {
  int64_t n = 0;
  for (size_t i = 0; i < packed.size(); ++i) n += ceil_div(packed[i], tile) * ceil_div(std::max(kv_pages[i], 1), chunk_pages);
  return n;
}

}  // namespace

int flash_attn_num_splits(int64_t blocks, int num_sms, int num_n_blocks, int max_splits) {
  if (blocks >= 0.8f * num_sms) return 1;
  max_splits = std::min({max_splits, num_sms, num_n_blocks});
  auto eligible = [&](int s) { return s == 1 || ceil_div(num_n_blocks, s) != ceil_div(num_n_blocks, s - 1); };
  std::vector<float> eff(std::max(max_splits, 0), 0.f);
  float max_eff = 0.f;
  for (int s = 1; s <= max_splits; ++s) {
    if (!eligible(s)) continue;
    const float waves = static_cast<float>(blocks * s) / num_sms;  // float as in flash_api.cpp
    eff[s - 1] = waves / std::ceil(waves);
    max_eff = std::max(max_eff, eff[s - 1]);
  }
  for (int s = 1; s <= max_splits; ++s)
    if (eligible(s) && eff[s - 1] >= 0.85f * max_eff) return s;
  return 1;
}

SplitPlan make_split_plan(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks) {
  SplitPlan sp;
  auto& why = sp.reasoning;
  sp.planner = c.split.planner;
  sp.group_size = c.group_size();
  sp.page_size = c.effective_page_size();
  const int G = sp.group_size, ps = sp.page_size;
  const int B = static_cast<int>(units.size());
  const bool causal_window = c.attention.window.has_value() && c.attention.causal;

  int64_t total_rows = 0, total_q = 0;
  int max_kv_tokens = 0;
  for (const auto& u : units) {
    sp.packed_rows.push_back(static_cast<int64_t>(u.q_len) * G);
    total_rows += sp.packed_rows.back();
    total_q += u.q_len;
    max_kv_tokens = std::max(max_kv_tokens, u.kv_len);
  }
  sp.avg_packed_rows = total_rows / B;
  sp.max_items = (2 * c.split.num_sms) / c.num_kv_heads;

  if (c.attention.local_chunk)
    why.push_back(str(B) + " units: the virtual batches of chunked local attention (chunk " + str(*c.attention.local_chunk) +
                  ")");
  why.push_back("GQA group " + str(G) + ": " + str(G) + " qo heads share a kv head, so each query is " + str(G) +
                " packed rows; total packed rows " + str(total_rows));

  // 1. query tile
  if (c.split.fixed_tile_q) {
    sp.cta_tile_q = *c.split.fixed_tile_q;
    why.push_back("cta_tile_q = " + str(sp.cta_tile_q) + ", fixed by /split/fixed_tile_q (independent of the batch)");
  } else if (sp.planner == Planner::kFlashAttn) {
    sp.cta_tile_q = 64;
    why.push_back("cta_tile_q = 64: FlashAttention-2's split-KV kernel uses kBlockM = 64");
  } else if (c.split.cuda_graph) {
    const int64_t worst = (total_q - B + 1) * G;
    sp.cta_tile_q = fa2_cta_tile_q(worst, c.head_dim_vo);
    why.push_back("CUDA graph: worst-case packed length (" + str(total_q) + " - " + str(B) + " + 1) x " + str(G) + " = " +
                  str(worst) + " replaces the average, so cta_tile_q = " + str(sp.cta_tile_q));
  } else {
    sp.cta_tile_q = fa2_cta_tile_q(sp.avg_packed_rows, c.head_dim_vo);
    std::string rule;
    if (sp.cta_tile_q == 128)
      rule = " > 64 and head_dim_vo " + str(c.head_dim_vo) + " < 256";
    else if (sp.cta_tile_q == 64)
      rule = sp.avg_packed_rows > 64 ? " > 64 but head_dim_vo " + str(c.head_dim_vo) + " >= 256, and > 16" : " in (16, 64]";
    else
      rule = " <= 16";
    why.push_back("avg packed rows = " + str(total_rows) + " / " + str(B) + " = " + str(sp.avg_packed_rows) + rule +
                  ", so cta_tile_q = " + str(sp.cta_tile_q) + " (depends on the whole batch: FlashInfer #2424)");
  }
  const int T = sp.cta_tile_q;
  if (T == 16) {
    sp.kv_warp_split = 4;
    why.push_back(
        "tile 16 (decode-like): 4 warps share it, each taking 16 keys of every 64-key KV tile; their states merge in warp order");
  }

  // 2. effective KV length (pages); a causal sliding window bounds what one q-tile can see
  int max_pages = 0;
  for (const auto& u : units) {
    int pages = static_cast<int>(ceil_div(u.kv_len, ps));
    if (causal_window && sp.planner != Planner::kFlashAttn) {
      const int window_left = *c.attention.window - 1;
      pages = std::min<int>(pages, static_cast<int>(ceil_div(window_left + T, ps)));
    }
    sp.kv_pages.push_back(pages);
    max_pages = std::max(max_pages, pages);
  }
  if (causal_window && sp.planner != Planner::kFlashAttn) {
    sp.window_chunks = true;
    why.push_back("sliding window W " + str(*c.attention.window) + ": effective KV per q-tile is min(L, ceil((window_left " +
                  str(*c.attention.window - 1) + " + " + str(T) + ") / page " + str(ps) +
                  ")) pages, chunks start at each q-tile's window start");
  }

  // 3. chunk size
  switch (sp.planner) {
    case Planner::kOff:
      sp.chunk_pages = std::max(max_pages, 1);
      sp.split_kv = false;
      why.push_back("split disabled: one chunk per unit (" + str(sp.chunk_pages) + " pages, the longest)");
      break;
    case Planner::kFixed:
      sp.chunk_pages = *c.split.fixed_split_size;
      sp.split_kv = c.split.cuda_graph || sp.chunk_pages < max_pages;
      why.push_back("fixed split size " + str(sp.chunk_pages) +
                    " pages: chunk boundaries of a request do not depend on the batch (FlashInfer PR #1675)");
      break;
    case Planner::kFlashInfer: {
      why.push_back("grid budget: 2 x " + str(c.split.num_sms) + " SMs / " + str(c.num_kv_heads) +
                    " kv heads = " + str(sp.max_items) + " work items");
      const int64_t lo0 = std::max(128 / ps, 1);
      int64_t lo = lo0, hi = max_pages;
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (count_items(sp.packed_rows, sp.kv_pages, T, mid) > sp.max_items)
          lo = mid + 1;
        else
          hi = mid;
      }
      sp.chunk_pages = static_cast<int>(lo);
      sp.split_kv = c.split.cuda_graph || lo < max_pages;
      const int64_t n = count_items(sp.packed_rows, sp.kv_pages, T, lo);
      std::string line = "smallest chunk c in [" + str(lo0) + ", " + str(max_pages) + "] pages with sum ceil(P_i/" + str(T) +
                         ") x ceil(L_i/c) <= " + str(sp.max_items) + " is " + str(lo) + " (" + str(n) + " items)";
      if (lo > lo0) line += "; c = " + str(lo - 1) + " would need " + str(count_items(sp.packed_rows, sp.kv_pages, T, lo - 1));
      if (n > sp.max_items) line += "; no chunk fits the budget, so the longest KV is one chunk";
      why.push_back(line);
      why.push_back(std::string("split_kv = ") + (sp.split_kv ? "true" : "false") +
                    (c.split.cuda_graph
                         ? " (always with CUDA graphs)"
                         : " (chunk " + str(lo) + (sp.split_kv ? " < " : " >= ") + "max L " + str(max_pages) + ")"));
      break;
    }
    case Planner::kFlashAttn: {
      int max_q = 0;
      for (const auto& u : units) max_q = std::max(max_q, u.q_len);
      const int block_n = c.head_dim_qk <= 64 ? 256 : (c.head_dim_qk <= 128 ? 128 : 64);
      const int n_blocks = static_cast<int>(ceil_div(max_kv_tokens, block_n));
      // FA2 swaps seqlen_q and the group for GQA decode (seqlenq_ngroups_swapped).
      const bool swapped = max_q == 1 && G > 1 && !c.attention.window && !c.attention.alibi && c.head_dim_qk % 8 == 0;
      const int64_t m_blocks = swapped ? ceil_div(G, 64) : ceil_div(max_q, 64);
      const int64_t heads = swapped ? c.num_kv_heads : c.num_qo_heads;
      const int64_t blocks = static_cast<int64_t>(B) * heads * m_blocks;
      // flash_api.cpp passes 2 x SMs ("128 threads per block"); semantics.md writes num_sms.
      const int sms2 = 2 * c.split.num_sms;
      const int s = flash_attn_num_splits(blocks, sms2, n_blocks, 128);
      const int64_t per = ceil_div(n_blocks, s);
      sp.chunk_tokens = per * block_n;
      sp.chunk_pages = static_cast<int>(ceil_div(sp.chunk_tokens, ps));
      sp.split_kv = s > 1;
      why.push_back(std::string(swapped ? "GQA decode: seqlen_q and group swapped, " : "") + "blocks = " + str(B) + " x " +
                    str(heads) + " heads x " + str(m_blocks) + " m-blocks = " + str(blocks) + "; n_blocks = ceil(" +
                    str(max_kv_tokens) + " / " + str(block_n) + ") = " + str(n_blocks));
      if (blocks >= 0.8 * sms2)
        why.push_back(str(blocks) + " >= 0.8 x " + str(sms2) + " (2 x SMs): 1 split");
      else
        why.push_back("efficiency rule over s <= min(128, " + str(sms2) + ", " + str(n_blocks) + "): num_splits = " + str(s));
      why.push_back("each split covers " + str(per) + " blocks = " + str(sp.chunk_tokens) + " keys; every unit gets " + str(s) +
                    " splits, short ones empty (they depend on the longest KV in the batch)");
      break;
    }
  }
  if (sp.planner != Planner::kFlashAttn) sp.chunk_tokens = static_cast<int64_t>(sp.chunk_pages) * ps;

  // 4. work items: unit-major, q-tile major, kv-chunk minor
  int64_t tiles_total = 0;
  for (int u = 0; u < B; ++u) {
    const auto& un = units[u];
    const RowMask& m = masks[un.request];
    const int tiles = static_cast<int>(ceil_div(sp.packed_rows[u], T));
    int chunks;
    if (sp.planner == Planner::kFlashAttn) {
      chunks = static_cast<int>(ceil_div(max_kv_tokens, sp.chunk_tokens));  // every unit, same count
    } else {
      chunks = static_cast<int>(ceil_div(std::max(sp.kv_pages[u], 1), sp.chunk_pages));
    }
    sp.unit_tiles.push_back(tiles);
    sp.unit_chunks.push_back(chunks);
    tiles_total += tiles;
    const int kv_end = un.kv_begin + un.kv_len;
    for (int t = 0; t < tiles; ++t) {
      const int row_begin = t * T;
      const int row_end = static_cast<int>(std::min<int64_t>(row_begin + T, sp.packed_rows[u]));
      int start = un.kv_begin;
      if (sp.window_chunks) {
        // first key any row of this tile can see: lo is monotone in the query position
        const int qa = q_abs_of(m, un.q_begin + row_begin / G);
        int lo, hi;
        visible_range(m, qa, &lo, &hi);
        start = std::max(un.kv_begin, std::min(lo, kv_end));
      }
      for (int k = 0; k < chunks; ++k) {
        WorkItem it;
        it.unit = u;
        it.q_tile = t;
        it.kv_chunk = k;
        it.row_begin = row_begin;
        it.row_end = row_end;
        it.kv_begin = static_cast<int>(std::min<int64_t>(start + k * sp.chunk_tokens, kv_end));
        it.kv_end = static_cast<int>(std::min<int64_t>(start + (k + 1) * sp.chunk_tokens, kv_end));
        if (k == chunks - 1 && !sp.window_chunks) it.kv_end = kv_end;  // chunks tile the unit's keys
        sp.items.push_back(it);
      }
    }
  }
  sp.num_items = static_cast<int>(sp.items.size());
  if (c.split.cuda_graph) {
    const int64_t graph_grid = std::max<int64_t>(sp.max_items, tiles_total);
    why.push_back("CUDA graph: grid padded to max(" + str(sp.max_items) + ", " + str(tiles_total) +
                  " q-tiles) = " + str(graph_grid) + " CTAs; " + str(std::max<int64_t>(0, graph_grid - sp.num_items)) +
                  " masked out by block_valid_mask");
    if (sp.num_items > graph_grid)
      why.push_back("warning: " + str(sp.num_items) +
                    " work items exceed that grid: FlashInfer sizes its CUDA-graph buffers for " + str(graph_grid) +
                    " (the split-KV workspace overflow failure mode); attnscope launches all " + str(sp.num_items));
    sp.padded_items = static_cast<int>(std::max<int64_t>(graph_grid, sp.num_items));
  } else {
    sp.padded_items = sp.num_items;
  }
  why.push_back(str(sp.num_items) + " work items x " + str(c.num_kv_heads) + " kv heads (grid " + str(sp.padded_items) +
                " x 1 x " + str(c.num_kv_heads) + ")");

  // 5. merge bookkeeping
  sp.merge_indptr.push_back(0);
  sp.o_indptr.push_back(0);
  for (int u = 0; u < B; ++u) {
    for (int q = 0; q < units[u].q_len; ++q) sp.merge_indptr.push_back(sp.merge_indptr.back() + sp.unit_chunks[u]);
    sp.o_indptr.push_back(sp.o_indptr.back() + units[u].q_len * sp.unit_chunks[u]);
  }
  if (sp.split_kv)
    why.push_back(
        "merge: each query row merges its chunk partials in chunk order 0..n-1 (LSE form, softmax_state.h); partials kept in " +
        std::string(c.split.partials == PartialPrecision::kFp32
                        ? "fp32"
                        : std::string(dtype_name(c.dtype)) + " (rounded, as FlashInfer does)"));
  return sp;
}

}  // namespace attnscope
