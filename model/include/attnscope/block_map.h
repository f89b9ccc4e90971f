// Block map: per unit, which (query tile x KV tile) blocks are full, partial (need the mask) or
// empty (skipped), and the sparsity. Text export in the style of FlexAttention's BlockMask.
#pragma once

#include <string>
#include <vector>

#include "attnscope/mask.h"
#include "attnscope/split_plan.h"

namespace attnscope {

constexpr int kKvTile = 64;  // keys per KV tile in the block map, the plan twin and the kernels

struct UnitBlocks {
  int unit = 0;
  int q_tiles = 0;             // rows of the grid (query tiles of cta_tile_q packed rows)
  int kv_tiles = 0;            // columns (kKvTile keys each, from the unit's first key)
  std::vector<TileClass> cls;  // [q_tiles * kv_tiles] row-major
  int64_t full = 0, partial = 0, empty = 0;
};

struct BlockMap {
  int q_tile_rows = 0;    // packed rows per tile
  int kv_tile = kKvTile;  // keys per tile
  std::vector<UnitBlocks> units;
  int64_t full = 0, partial = 0, empty = 0;
  double sparsity() const;  // empty / all blocks
};

BlockMap make_block_map(const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks, int group_size, int cta_tile_q);

// Fills split.item_tile_indptr / item_tiles: for each work item the KV tiles (kKvTile keys from its
// first key) in which some row of the item has an allowed key. Used when a mask_mod can leave empty
// tiles inside a row's range. item_tile_full marks the tiles in which every row of the item has every
// key (up to the item's last key) allowed: there the kernels skip the mask_mod's per-key test.
void list_item_tiles(SplitPlan* split, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks, int group_size);

// What PyTorch prints for FlexAttention's create_block_mask(mask_mod, 1, 1, q_len, kv_len,
// BLOCK_SIZE=(q_block, kv_block)) of one request's mask (print(block_mask): its __str__, which
// draws to_string(grid_size=(20, 20)): '█' where a block is computed, ' ' where it is skipped, '░'
// for a downsampled cell holding both), with the sparsity as FlexAttention computes it (blocks
// computed x block area over q_len x kv_len). FlexAttention's q_idx counts from 0 within the query
// tensor: row i is attnscope's query at position kv_len - q_len + i (the same when q_len ==
// kv_len). The mask is head-independent, hence H = 1.
std::string flex_block_mask_text(const RowMask& m, int q_block, int kv_block);

// FlexAttention-style text grid: '█' full, '░' partial, ' ' empty; at most max_units units and
// max_cols columns (the cut is said).
std::string block_map_text(const BlockMap& bm, int max_units = 8, int max_cols = 64);

}  // namespace attnscope
