// The split-KV work partition: query tiles, KV chunks, work items (CTAs) and the merge, plus the
// planner's inputs and its reasoning. The kernels, the CPU plan twin and the GUI all execute/draw this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/mask.h"

namespace attnscope {

// What the kernels run over: a request, or one virtual batch of chunked local attention.
struct WorkUnit {
  int request = 0;   // original request
  int q_begin = 0;   // first query (index within the request's queries)
  int q_len = 0;     // queries
  int kv_begin = 0;  // first key, absolute position within the request
  int kv_len = 0;    // keys [kv_begin, kv_begin + kv_len)
};

// One CTA's work for every KV head (grid z): packed rows [row_begin, row_end) of a unit (row =
// q_local * group_size + g) against keys [kv_begin, kv_end).
struct WorkItem {
  int unit = 0;
  int q_tile = 0;
  int kv_chunk = 0;
  int row_begin = 0, row_end = 0;  // packed rows within the unit
  int kv_begin = 0, kv_end = 0;    // absolute keys; may be empty for a windowed tile's tail chunk
};

struct SplitPlan {
  Planner planner = Planner::kFlashInfer;
  int group_size = 1;  // qo heads per kv head: rows packed per query
  int page_size = 1;   // tokens per page used by the planner (1 when ragged)
  // inputs, per unit
  std::vector<int64_t> packed_rows;  // [units] q_len * group_size
  std::vector<int> kv_pages;         // [units] effective KV length in pages (window applied)
  int64_t avg_packed_rows = 0;       // sum(packed_rows) / units (integer division)
  int max_items = 0;                 // grid budget per KV head: 2 * num_sms / num_kv_heads
  // decisions
  int cta_tile_q = 0;             // packed rows per query tile
  int chunk_pages = 0;            // KV chunk size in pages (tokens when ragged)
  int64_t chunk_tokens = 0;       // chunk_pages * page_size
  bool split_kv = false;          // partials are written and merged
  bool window_chunks = false;     // chunk starts follow each q-tile's window start
  int kv_warp_split = 1;          // warps sharing one query tile, each taking kKvTile / split keys of
                                  // every KV tile, merged in warp order (the decode path: tile 16)
  int num_items = 0;              // real work items
  int padded_items = 0;           // grid x (CUDA graph: padded; extra CTAs do nothing)
  std::vector<int> unit_chunks;   // [units] KV chunks per query tile
  std::vector<int> unit_tiles;    // [units] query tiles
  std::vector<WorkItem> items;    // [num_items], unit-major, q-tile major, kv-chunk minor
  std::vector<int> merge_indptr;  // [total queries + 1], partials of each query (all heads alike)
  std::vector<int> o_indptr;      // [units + 1], first partial row of each unit: sum q_len * chunks
  // A mask_mod's non-empty KV tiles (kKvTile keys from the item's first key) of each item, item-major:
  // the tiles the flash kernel visits (FlexAttention's kv_indices). Empty without a mask_mod.
  std::vector<int> item_tile_indptr;          // [num_items + 1]
  std::vector<int> item_tiles;                // first key of each tile
  std::vector<unsigned char> item_tile_full;  // [item_tiles] 1: every row of the item sees every key of the tile
  std::string refusal;                        // the library's planner refuses this plan (FlashInfer: a CUDA-graph
                                              // plan with more work items than its padded grid); attnscope still
                                              // runs it. Empty: the library accepts the plan.
  int num_splits = 0;                         // flash_attn: FA2's num_splits, the same for every unit; 0 otherwise
  int64_t seqlen_k = 0;                       // flash_attn: the KV length FA2's heuristic sees, tokens (the
                                              // allocated cache: block-table width x page size); 0 otherwise
  std::vector<std::string> reasoning;         // the planner's decisions in words, in order
};

struct Plan;  // plan.h

// Runs the planner model named by c.split over the units.
SplitPlan make_split_plan(const CaseSpec& c, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks);

// FlashAttention-2's num_splits_heuristic (conventions.md section 5), exposed for tests.
int flash_attn_num_splits(int64_t batch_nheads_mblocks, int num_sms, int num_n_blocks, int max_splits);

// FlashInfer's FA2DetermineCtaTileQ (utils.cuh) for a device of compute capability >= 8 with
// `smem_optin` bytes of opt-in shared memory per block: the query tile for a packed length.
int flashinfer_cta_tile_q(int64_t packed_len, int head_dim_vo, int head_dim_qk, int kv_dtype_bytes, int smem_optin);

// The opt-in shared memory the flashinfer model assumes (H100 SXM, the profile FlashInfer's own
// planner answers from without a GPU), bytes.
constexpr int kModelSmemOptin = 232448;

// The KV length FlashAttention-2's flash_attn_with_kvcache hands its split heuristic, tokens:
// max_num_blocks_per_seq x page_size (the block table's width; absent: the widest unit's pages).
int64_t flash_attn_seqlen_k(const CaseSpec& c, const std::vector<WorkUnit>& units);

}  // namespace attnscope
