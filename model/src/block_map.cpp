// Block map: classification of (query tile x KV tile) blocks and its text form.
#include "attnscope/block_map.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <sstream>

namespace attnscope {

double BlockMap::sparsity() const {
  const int64_t all = full + partial + empty;
  return all ? static_cast<double>(empty) / static_cast<double>(all) : 0.0;
}

namespace {

// classify_tile's verdicts for one query tile over all its KV tiles, where the mask is one interval
// [lo, hi) per row (no mask_mod bits): each row's range is computed once for the tile, not once per
// KV tile. Full: every row holds the whole KV tile (max lo <= k0, min hi >= k1); empty: no row's range
// meets it; else partial. The plan of a case of 256 x 32k keys is made in the frame of an edit.
struct IntervalRows {
  std::vector<int> lo, hi;
  int max_lo = 0, min_hi = 0, min_lo = 0, max_hi = 0;
  void set(const RowMask& m, int qa0, int qa1) {
    lo.resize(qa1 - qa0);
    hi.resize(qa1 - qa0);
    max_lo = max_hi = INT32_MIN;
    min_hi = min_lo = INT32_MAX;
    for (int qa = qa0; qa < qa1; ++qa) {
      visible_range(m, qa, &lo[qa - qa0], &hi[qa - qa0]);
      max_lo = std::max(max_lo, lo[qa - qa0]);
      min_hi = std::min(min_hi, hi[qa - qa0]);
      min_lo = std::min(min_lo, lo[qa - qa0]);
      max_hi = std::max(max_hi, hi[qa - qa0]);
    }
  }
  TileClass classify(int k0, int k1) const {
    if (lo.empty() || k1 <= k0) return TileClass::kEmpty;
    if (max_lo <= k0 && min_hi >= k1) return TileClass::kFull;
    if (min_lo >= k1 || max_hi <= k0) return TileClass::kEmpty;  // every row's range ends before or starts after
    for (size_t r = 0; r < lo.size(); ++r)
      if (std::max(lo[r], k0) < std::min(hi[r], k1)) return TileClass::kPartial;
    return TileClass::kEmpty;
  }
};

}  // namespace

BlockMap make_block_map(const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks, int G, int T) {
  BlockMap bm;
  bm.q_tile_rows = T;
  IntervalRows rows_of_tile;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    const auto& un = units[u];
    const RowMask& m = masks[un.request];
    UnitBlocks ub;
    ub.unit = u;
    const int64_t rows = static_cast<int64_t>(un.q_len) * G;
    ub.q_tiles = static_cast<int>((rows + T - 1) / T);
    ub.kv_tiles = (un.kv_len + kKvTile - 1) / kKvTile;
    ub.cls.resize(static_cast<size_t>(ub.q_tiles) * ub.kv_tiles);
    for (int t = 0; t < ub.q_tiles; ++t) {
      const int row_begin = t * T;
      const int row_end = static_cast<int>(std::min<int64_t>(row_begin + T, rows));
      const int qa0 = q_abs_of(m, un.q_begin + row_begin / G);
      const int qa1 = q_abs_of(m, un.q_begin + (row_end - 1) / G) + 1;
      const bool interval = m.bits == nullptr;
      if (interval) rows_of_tile.set(m, qa0, qa1);
      for (int j = 0; j < ub.kv_tiles; ++j) {
        const int k0 = un.kv_begin + j * kKvTile;
        const int k1 = std::min(k0 + kKvTile, un.kv_begin + un.kv_len);
        const TileClass tc = interval ? rows_of_tile.classify(k0, k1) : classify_tile(m, qa0, qa1, k0, k1);
        ub.cls[static_cast<size_t>(t) * ub.kv_tiles + j] = tc;
        (tc == TileClass::kFull ? ub.full : tc == TileClass::kPartial ? ub.partial : ub.empty)++;
      }
    }
    bm.full += ub.full;
    bm.partial += ub.partial;
    bm.empty += ub.empty;
    bm.units.push_back(std::move(ub));
  }
  return bm;
}

void list_item_tiles(SplitPlan* sp, const std::vector<WorkUnit>& units, const std::vector<RowMask>& masks, int G) {
  sp->item_tile_indptr.assign(1, 0);
  sp->item_tiles.clear();
  sp->item_tile_full.clear();
  for (int i = 0; i < sp->num_items; ++i) {
    const WorkItem& it = sp->items[i];
    const WorkUnit& un = units[it.unit];
    const RowMask& m = masks[un.request];
    const int q0 = un.q_begin + it.row_begin / G, q1 = un.q_begin + (it.row_end - 1) / G;
    for (int k0 = it.kv_begin; k0 < it.kv_end; k0 += kKvTile) {
      const int k1 = std::min(k0 + kKvTile, it.kv_end);
      const TileClass tc = classify_tile(m, q_abs_of(m, q0), q_abs_of(m, q1) + 1, k0, k1);
      if (tc == TileClass::kEmpty) continue;
      sp->item_tiles.push_back(k0);
      sp->item_tile_full.push_back(tc == TileClass::kFull ? 1 : 0);
    }
    sp->item_tile_indptr.push_back(static_cast<int>(sp->item_tiles.size()));
  }
}

std::string flex_block_mask_text(const RowMask& m, int qb, int kb) {
  const int rows = (m.q_len + qb - 1) / qb, cols = (m.kv_len + kb - 1) / kb;
  std::vector<uint8_t> dense(static_cast<size_t>(rows) * cols, 0);  // block computed (partial or full)
  int64_t computed = 0;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      bool any = false;
      for (int q = i * qb; q < std::min(m.q_len, (i + 1) * qb) && !any; ++q)
        any = allowed_in(m, q_abs_of(m, q), j * kb, std::min(m.kv_len, (j + 1) * kb)) > 0;
      dense[static_cast<size_t>(i) * cols + j] = any;
      computed += any;
    }
  // BlockMask.sparsity(): 100 * (1 - computed blocks * block area / numel), in doubles as Python
  const double numel = static_cast<double>(m.q_len) * m.kv_len;
  const double sparsity = 100.0 * (1.0 - static_cast<double>(computed * qb * kb) / numel);
  // to_string(grid_size=(20, 20)): cells of row_step x col_step blocks, each '█' (all computed),
  // ' ' (none) or '░', written twice; then __str__ strips the whole text
  auto cdiv = [](int a, int b) { return (a + b - 1) / b; };
  const int rs = std::max(1, cdiv(rows, 20)), cs = std::max(1, cdiv(cols, 20));
  std::string grid = "(0, 0)\n";
  for (int r = 0; r < rows; r += rs) {
    for (int c = 0; c < cols; c += cs) {
      int on = 0, n = 0;
      for (int i = r; i < std::min(rows, r + rs); ++i)
        for (int j = c; j < std::min(cols, c + cs); ++j, ++n) on += dense[static_cast<size_t>(i) * cols + j];
      grid += on == n ? "██" : on == 0 ? "  " : "░░";
    }
    grid += "\n";
  }
  const size_t a = grid.find_first_not_of(" \n"), b = grid.find_last_not_of(" \n");
  grid = grid.substr(a, b - a + 1);
  char head[160];
  std::snprintf(head, sizeof head, "BlockMask(shape=(1, 1, %d, %d), sparsity=%.2f%%, \n", m.q_len, m.kv_len, sparsity);
  return head + grid + "\n)";
}

std::string block_map_text(const BlockMap& bm, int max_units, int max_cols) {
  std::ostringstream o;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "BlockMask(q_tile=%d packed rows, kv_tile=%d keys, sparsity=%.2f%%, full=%lld, partial=%lld, empty=%lld)\n",
                bm.q_tile_rows, bm.kv_tile, 100.0 * bm.sparsity(), static_cast<long long>(bm.full),
                static_cast<long long>(bm.partial), static_cast<long long>(bm.empty));
  o << buf;
  const int nu = static_cast<int>(bm.units.size());
  for (int u = 0; u < std::min(nu, max_units); ++u) {
    const auto& ub = bm.units[u];
    o << "(unit " << u << ": " << ub.q_tiles << " x " << ub.kv_tiles << ")\n";
    const int cols = std::min(ub.kv_tiles, max_cols);
    for (int t = 0; t < ub.q_tiles; ++t) {
      for (int j = 0; j < cols; ++j) {
        const TileClass tc = ub.cls[static_cast<size_t>(t) * ub.kv_tiles + j];
        o << (tc == TileClass::kFull ? "██" : tc == TileClass::kPartial ? "░░" : "  ");
      }
      if (cols < ub.kv_tiles) o << " ... (" << ub.kv_tiles - cols << " more tiles)";
      o << "\n";
    }
  }
  if (nu > max_units) o << "... " << nu - max_units << " more units\n";
  return o.str();
}

}  // namespace attnscope
