// What the split-KV planner models share (split_plan.cpp): the inputs every model starts from, the
// work items of a (tiles x chunks) grid and the merge bookkeeping. Each model is its own function:
// split_plan_flashinfer.cpp (flashinfer, fixed, off: FlashInfer's PrefillSplitQOKVIndptr with its
// three chunk rules) and split_plan_flash_attn.cpp (FlashAttention-2's num_splits heuristic).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/split_plan.h"

namespace attnscope::plan_detail {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline std::string str(int64_t v) { return std::to_string(v); }

// Fills planner, group_size, page_size, packed_rows, avg_packed_rows and max_items, and the first
// reasoning lines (units, GQA packing).
void begin_split_plan(const CaseSpec& c, const std::vector<WorkUnit>& units, SplitPlan* sp);

// Work items of every unit from sp->unit_tiles, sp->unit_chunks and sp->chunk_tokens, unit-major,
// q-tile major, kv-chunk minor; then num_items and the merge bookkeeping (merge_indptr, o_indptr).
// Chunk k of a q-tile covers keys [start + k * chunk_tokens, start + (k + 1) * chunk_tokens) of its
// unit, where start is the unit's first key, or with sp->window_chunks the first key the tile's
// first row can see (FlashInfer's kernel offsets its chunks by the tile's window start). The last
// chunk of a tile runs to the unit's end unless `last_chunk_to_window` (a causal window: keys past
// the tile's last row are masked anyway), so that every allowed key is covered exactly once.
void emit_items(const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks, bool last_chunk_to_window, SplitPlan* sp);

// The models. Each returns a complete plan (items and merge bookkeeping included).
SplitPlan plan_flashinfer(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks);
SplitPlan plan_fixed(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks);
SplitPlan plan_off(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks);
SplitPlan plan_flash_attn(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks);

}  // namespace attnscope::plan_detail
