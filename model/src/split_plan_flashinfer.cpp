// The FlashInfer planner models: `flashinfer` (FlashInfer's FA2 PrefillPlan, conventions.md section
// 4), `fixed` (the same with fixed_split_size, FlashInfer PR #1675) and `off` (disable_split_kv).
// All three follow PrefillSplitQOKVIndptr in the pinned include/flashinfer/attention/scheduler.cuh
// step by step; the CPU test test_library_plan.cpp runs that function beside these on a few
// hundred random cases and requires every field to agree.
#include <algorithm>
#include <limits>

#include "split_plan_detail.h"

namespace attnscope {

using plan_detail::ceil_div;
using plan_detail::str;

int flashinfer_cta_tile_q(int64_t packed, int head_dim_vo, int head_dim_qk, int kv_dtype_bytes, int smem_optin) {
  // FA2DetermineCtaTileQ (utils.cuh), branch by branch; the compute capability is >= 8 (sm80+)
  const int qk = head_dim_qk ? head_dim_qk : head_dim_vo;
  if (head_dim_vo >= 512) return packed <= 32 ? 16 : 32;  // VO-split kernels
  if (qk >= 512) return 16;                               // o_frag registers allow only one MMA row
  if (packed > 64 && head_dim_vo < 256) return 128;
  if (packed > 16) return 64;
  // tile 16 uses the 1x4 warp layout: one Q tile plus one K+V step must fit in shared memory
  const int64_t q_tile_smem = 16LL * qk * 2;
  const int64_t kv_step_smem = static_cast<int64_t>(qk + head_dim_vo) * 16 * 4 * kv_dtype_bytes;
  return q_tile_smem + kv_step_smem > smem_optin ? 64 : 16;
}

namespace plan_detail {

namespace {

// FA2DetermineCtaTileQ's branch for `packed`, in words.
std::string tile_rule_text(int64_t packed, int T, const CaseSpec& c) {
  const int vo = c.head_dim_vo, qk = c.head_dim_qk;
  if (vo >= 512) return std::string(packed <= 32 ? " <= 32" : " > 32") + " with head_dim_vo " + str(vo) + " >= 512 (VO split)";
  if (qk >= 512) return ", head_dim_qk " + str(qk) + " >= 512: only tile 16 fits the o_frag registers";
  if (T == 128) return " > 64 and head_dim_vo " + str(vo) + " < 256";
  if (T == 64 && packed > 16)
    return packed > 64 ? " > 64 but head_dim_vo " + str(vo) + " >= 256, and > 16" : std::string(" in (16, 64]");
  if (T == 64)
    return " <= 16, but one Q tile + one K/V step of the 1x4 layout exceed " + str(kModelSmemOptin) +
           " B of opt-in shared memory";
  return " <= 16";
}

// Steps 1-2 of PrefillSplitQOKVIndptr: the query tile (average packed length, or the CUDA-graph
// worst case) and each unit's effective KV length in pages (window applied whenever set).
void tile_and_kv(const CaseSpec& c, const std::vector<WorkUnit>& units, SplitPlan* sp) {
  auto& why = sp->reasoning;
  const int G = sp->group_size, ps = sp->page_size, B = static_cast<int>(units.size());
  const int kv_bytes = dtype_bytes(c.dtype);
  int64_t total_q = 0;
  for (const auto& u : units) total_q += u.q_len;
  if (c.split.fixed_tile_q) {
    sp->cta_tile_q = *c.split.fixed_tile_q;
    why.push_back("cta_tile_q = " + str(sp->cta_tile_q) +
                  ", fixed by /split/fixed_tile_q (independent of the batch; not a FlashInfer plan argument)");
  } else if (c.split.cuda_graph) {
    // CUDA-graph branch (uniform_q_len 0): the graph replays any batch with as many rows, so the
    // tile is sized for the longest request those rows allow
    const int64_t worst = (total_q - B + 1) * G;
    sp->cta_tile_q = flashinfer_cta_tile_q(worst, c.head_dim_vo, c.head_dim_qk, kv_bytes, kModelSmemOptin);
    why.push_back("CUDA graph: worst-case packed length (" + str(total_q) + " - " + str(B) + " + 1) x " + str(G) + " = " +
                  str(worst) + tile_rule_text(worst, sp->cta_tile_q, c) +
                  " replaces the average, so cta_tile_q = " + str(sp->cta_tile_q));
  } else {
    sp->cta_tile_q = flashinfer_cta_tile_q(sp->avg_packed_rows, c.head_dim_vo, c.head_dim_qk, kv_bytes, kModelSmemOptin);
    int64_t total_rows = 0;
    for (int64_t r : sp->packed_rows) total_rows += r;
    why.push_back("avg packed rows = " + str(total_rows) + " / " + str(B) + " = " + str(sp->avg_packed_rows) +
                  tile_rule_text(sp->avg_packed_rows, sp->cta_tile_q, c) + ", so cta_tile_q = " + str(sp->cta_tile_q) +
                  " (depends on the whole batch: FlashInfer #2424)");
  }
  const int T = sp->cta_tile_q;
  if (T == 16) {
    sp->kv_warp_split = 4;
    why.push_back(
        "tile 16 (decode-like): 4 warps share it, each taking 16 keys of every 64-key KV tile; their states merge in warp order");
  }
  // FlashInfer bounds each q-tile's KV by window_left + tile whenever window_left >= 0, causal or
  // not (it pads the tile "to consider the causal kv-len")
  const bool window = c.attention.window.has_value();
  const int window_left = window ? *c.attention.window - 1 : -1;
  for (const auto& u : units) {
    int64_t pages = ceil_div(u.kv_len, ps);
    if (window) pages = std::min<int64_t>(pages, ceil_div(window_left + T, ps));
    sp->kv_pages.push_back(static_cast<int>(pages));
  }
  if (window) {
    sp->window_chunks = true;
    why.push_back("sliding window W " + str(*c.attention.window) + ": effective KV per q-tile is min(L, ceil((window_left " +
                  str(window_left) + " + " + str(T) + ") / page " + str(ps) +
                  ")) pages, chunks start at each q-tile's window start");
    if (!c.attention.causal)
      why.push_back(
          "non-causal window: FlashInfer bounds the KV as if causal, but keys right of a query stay visible; its kernel's "
          "last chunk of a q-tile ends at the window start + chunks x chunk size (prefill.cuh chunk_end), so with split_kv "
          "keys past it are not read. attnscope's last chunk runs to the unit's end");
  }
}

int max_pages_of(const SplitPlan& sp) {
  int m = 1;  // FlashInfer's max_kv_len starts at 1
  for (int p : sp.kv_pages) m = std::max(m, p);
  return m;
}

// Step 3 of PrefillSplitQOKVIndptr and PrefillPlan's padding: tiles and chunks per unit, the work
// items, the CUDA-graph grid (and FlashInfer's refusal when the items overflow it), the merge.
SplitPlan finish(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks, SplitPlan sp) {
  auto& why = sp.reasoning;
  const int T = sp.cta_tile_q, G = sp.group_size, B = static_cast<int>(units.size());
  sp.chunk_tokens = static_cast<int64_t>(sp.chunk_pages) * sp.page_size;
  for (size_t u = 0; u < units.size(); ++u) {
    sp.unit_tiles.push_back(static_cast<int>(ceil_div(sp.packed_rows[u], T)));
    sp.unit_chunks.push_back(
        sp.planner == Planner::kOff ? 1 : static_cast<int>(ceil_div(std::max(sp.kv_pages[u], 1), sp.chunk_pages)));
  }
  emit_items(units, masks, c.attention.causal, &sp);
  if (c.split.cuda_graph) {
    // the graph's grid is fixed at capture: a bound on the q-tiles any batch of as many rows can
    // need (each request wastes at most one partial tile), or the budget, whichever is larger
    int64_t total_q = 0;
    for (const auto& u : units) total_q += u.q_len;
    const int64_t tile_bound = ceil_div(total_q * G, T) + B - 1;
    const int64_t graph_grid = std::max<int64_t>(sp.max_items, tile_bound);
    why.push_back("CUDA graph: grid padded to max(" + str(sp.max_items) + ", ceil(" + str(total_q) + " x " + str(G) + " / " +
                  str(T) + ") + " + str(B) + " - 1 = " + str(tile_bound) + ") = " + str(graph_grid) + " CTAs; " +
                  str(std::max<int64_t>(0, graph_grid - sp.num_items)) + " masked out by block_valid_mask");
    if (sp.num_items > graph_grid) {
      sp.refusal = "FlashInfer refuses the plan: " + str(sp.num_items) + " work items exceed the CUDA-graph grid of " +
                   str(graph_grid) +
                   " (\"new batch size should not exceed padded batch size. If you are using fixed split size, please "
                   "consider disabling cuda graph.\")";
      why.push_back(sp.refusal + "; attnscope launches all " + str(sp.num_items));
    }
    sp.padded_items = static_cast<int>(std::max<int64_t>(graph_grid, sp.num_items));
  } else {
    sp.padded_items = sp.num_items;
  }
  why.push_back(str(sp.num_items) + " work items x " + str(c.num_kv_heads) + " kv heads (grid " + str(sp.padded_items) +
                " x 1 x " + str(c.num_kv_heads) + ")");
  if (sp.split_kv)
    why.push_back(
        "merge: each query row merges its chunk partials in chunk order 0..n-1 (LSE form, softmax_state.h); partials kept in " +
        std::string(c.split.partials == PartialPrecision::kFp32
                        ? "fp32"
                        : std::string(dtype_name(c.dtype)) + " (rounded, as FlashInfer does)"));
  return sp;
}

}  // namespace

SplitPlan plan_flashinfer(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks) {
  SplitPlan sp;
  begin_split_plan(c, units, &sp);
  tile_and_kv(c, units, &sp);
  auto& why = sp.reasoning;
  const int T = sp.cta_tile_q, ps = sp.page_size;
  why.push_back("grid budget: 2 x " + str(c.split.num_sms) + " SMs / " + str(c.num_kv_heads) +
                " kv heads = " + str(sp.max_items) + " work items");
  // PrefillBinarySearchKVChunkSize: the smallest chunk whose items fit the budget
  auto items_for = [&](int64_t chunk) {
    int64_t n = 0;
    for (size_t i = 0; i < sp.packed_rows.size(); ++i)
      n += ceil_div(sp.packed_rows[i], T) * ceil_div(std::max(sp.kv_pages[i], 1), chunk);
    return n;
  };
  const int max_pages = max_pages_of(sp);
  const int64_t lo0 = std::max(128 / ps, 1);
  int64_t lo = lo0, hi = max_pages;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (items_for(mid) > sp.max_items)
      lo = mid + 1;
    else
      hi = mid;
  }
  sp.chunk_pages = static_cast<int>(lo);
  sp.split_kv = c.split.cuda_graph || lo < max_pages;
  const int64_t n = items_for(lo);
  std::string line = "smallest chunk c in [" + str(lo0) + ", " + str(max_pages) + "] pages with sum ceil(P_i/" + str(T) +
                     ") x ceil(L_i/c) <= " + str(sp.max_items) + " is " + str(lo) + " (" + str(n) + " items)";
  if (lo > lo0) line += "; c = " + str(lo - 1) + " would need " + str(items_for(lo - 1));
  if (n > sp.max_items) line += "; no chunk fits the budget, so the longest KV is one chunk";
  why.push_back(line);
  why.push_back(std::string("split_kv = ") + (sp.split_kv ? "true" : "false") +
                (c.split.cuda_graph ? " (always with CUDA graphs)"
                                    : " (chunk " + str(lo) + (sp.split_kv ? " < " : " >= ") + "max L " + str(max_pages) + ")"));
  return finish(c, units, masks, std::move(sp));
}

SplitPlan plan_fixed(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks) {
  SplitPlan sp;
  begin_split_plan(c, units, &sp);
  tile_and_kv(c, units, &sp);
  sp.chunk_pages = *c.split.fixed_split_size;
  const int max_pages = max_pages_of(sp);
  // FlashInfer sets split_kv from the chunk counts alone with a fixed split size: a CUDA graph
  // does not force it (the binary search's "always with CUDA graphs" is not reached)
  sp.split_kv = sp.chunk_pages < max_pages;
  sp.reasoning.push_back("fixed split size " + str(sp.chunk_pages) +
                         " pages: chunk boundaries of a request do not depend on the batch (FlashInfer PR #1675)");
  sp.reasoning.push_back(std::string("split_kv = ") + (sp.split_kv ? "true (a unit has" : "false (no unit has") +
                         " more than one chunk: chunk " + str(sp.chunk_pages) + (sp.split_kv ? " < " : " >= ") + "max L " +
                         str(max_pages) + ")" +
                         (c.split.cuda_graph ? "; a CUDA graph does not force it with a fixed split size" : ""));
  return finish(c, units, masks, std::move(sp));
}

SplitPlan plan_off(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks) {
  SplitPlan sp;
  begin_split_plan(c, units, &sp);
  tile_and_kv(c, units, &sp);
  sp.chunk_pages = max_pages_of(sp);
  sp.split_kv = false;
  sp.reasoning.push_back("split disabled: one chunk per unit (" + str(sp.chunk_pages) +
                         " pages, the longest; FlashInfer's kv_chunk_size is INT64_MAX pages, never read)");
  return finish(c, units, masks, std::move(sp));
}

}  // namespace plan_detail

}  // namespace attnscope
