// Split-KV planners: the dispatch over the four planner models and what they share (the inputs,
// the work items of a tiles x chunks grid, the merge bookkeeping). The models themselves live in
// split_plan_flashinfer.cpp (flashinfer, fixed, off) and split_plan_flash_attn.cpp (flash_attn).
#include "attnscope/split_plan.h"

#include <algorithm>

#include "split_plan_detail.h"

namespace attnscope {

namespace plan_detail {

void begin_split_plan(const CaseSpec& c, const std::vector<WorkUnit>& units, SplitPlan* sp) {
  sp->planner = c.split.planner;
  sp->group_size = c.group_size();
  sp->page_size = c.effective_page_size();
  const int G = sp->group_size;
  const int B = static_cast<int>(units.size());
  int64_t total_rows = 0;
  for (const auto& u : units) {
    sp->packed_rows.push_back(static_cast<int64_t>(u.q_len) * G);
    total_rows += sp->packed_rows.back();
  }
  sp->avg_packed_rows = total_rows / B;
  // FlashInfer's grid budget (PrefillPlanImpl): 2 CTAs per SM, shared by the kv heads (grid z)
  sp->max_items = (2 * c.split.num_sms) / c.num_kv_heads;
  if (c.attention.local_chunk)
    sp->reasoning.push_back(str(B) + " units: the virtual batches of chunked local attention (chunk " +
                            str(*c.attention.local_chunk) + ")");
  sp->reasoning.push_back("GQA group " + str(G) + ": " + str(G) + " qo heads share a kv head, so each query is " + str(G) +
                          " packed rows; total packed rows " + str(total_rows));
}

void emit_items(const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks, bool last_chunk_to_window, SplitPlan* sp) {
  const int G = sp->group_size, T = sp->cta_tile_q;
  const int64_t C = sp->chunk_tokens;
  for (size_t u = 0; u < units.size(); ++u) {
    const WorkUnit& un = units[u];
    const RowMask& m = masks[un.request];
    const int tiles = sp->unit_tiles[u], chunks = sp->unit_chunks[u];
    const int kv_end = un.kv_begin + un.kv_len;
    for (int t = 0; t < tiles; ++t) {
      const int row_begin = t * T;
      const int row_end = static_cast<int>(std::min<int64_t>(row_begin + T, sp->packed_rows[u]));
      int start = un.kv_begin;
      if (sp->window_chunks) {
        // first key any row of this tile can see: lo is monotone in the query position for the
        // built-in masks; a mask_mod's rows are searched
        const int q_first = un.q_begin + row_begin / G, q_last = m.bits ? un.q_begin + (row_end - 1) / G : q_first;
        int lo = kv_end;
        for (int q = q_first; q <= q_last; ++q) {
          int l, h;
          visible_range(m, q_abs_of(m, q), &l, &h);
          if (h > l) lo = std::min(lo, l);
          if (!m.bits) lo = l;
        }
        start = std::max(un.kv_begin, std::min(lo, kv_end));
      }
      for (int k = 0; k < chunks; ++k) {
        WorkItem it;
        it.unit = static_cast<int>(u);
        it.q_tile = t;
        it.kv_chunk = k;
        it.row_begin = row_begin;
        it.row_end = row_end;
        it.kv_begin = static_cast<int>(std::min<int64_t>(start + k * C, kv_end));
        it.kv_end = static_cast<int>(std::min<int64_t>(start + (k + 1) * C, kv_end));
        // chunks tile the unit's keys; a causal window's tile sees nothing past its chunks
        if (k == chunks - 1 && !(sp->window_chunks && last_chunk_to_window)) it.kv_end = kv_end;
        sp->items.push_back(it);
      }
    }
  }
  sp->num_items = static_cast<int>(sp->items.size());
  // merge bookkeeping: every query row of a unit has one partial per chunk
  sp->merge_indptr.assign(1, 0);
  sp->o_indptr.assign(1, 0);
  for (size_t u = 0; u < units.size(); ++u) {
    for (int q = 0; q < units[u].q_len; ++q) sp->merge_indptr.push_back(sp->merge_indptr.back() + sp->unit_chunks[u]);
    sp->o_indptr.push_back(sp->o_indptr.back() + units[u].q_len * sp->unit_chunks[u]);
  }
}

}  // namespace plan_detail

SplitPlan make_split_plan(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks) {
  switch (c.split.planner) {
    case Planner::kFlashInfer:
      return plan_detail::plan_flashinfer(c, units, masks);
    case Planner::kFixed:
      return plan_detail::plan_fixed(c, units, masks);
    case Planner::kOff:
      return plan_detail::plan_off(c, units, masks);
    case Planner::kFlashAttn:
      return plan_detail::plan_flash_attn(c, units, masks);
  }
  return plan_detail::plan_flashinfer(c, units, masks);
}

}  // namespace attnscope
