// Mask panel: one request's q x k mask as a heatmap (exact any/all pooling for long sequences),
// the block map's tile grid over it, zoom and pan, and a hover readout (q_abs, k, allowed, score,
// probability against the reference's LSE).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "draw/texture.h"
#include "gui_state.h"
#include "session.h"

namespace attnscope::gui {

enum class Cell : uint8_t { kNone = 0, kSome = 1, kAll = 2 };

struct MaskItems {
  int request = 0;
  int q_len = 0, kv_len = 0;
  int rows = 0, cols = 0;  // cells
  int q_per_cell = 1, k_per_cell = 1;
  std::vector<Cell> cells;         // [rows * cols]: pairs allowed in that cell: none, some, all
  int64_t allowed = 0;             // allowed (q, k) pairs of the request
  std::vector<int> q_tile_starts;  // query index where each q-tile of the plan starts (per unit)
  std::vector<int> unit_starts;    // query index where each unit (virtual batch) starts
  int kv_tile = 64;
};

// Exact pooling: a cell is kAll iff every pair in it is allowed, kNone iff none is.
MaskItems build_mask_items(const Session& s, int request, int max_cells = 512);

struct Readout {
  int q = 0, q_abs = 0, k = 0;
  bool allowed = false;
  double score = 0;  // sm_scale q.k (+ soft-cap, ALiBi) from the generated inputs
  bool has_prob = false;
  double prob = 0;  // exp(score - LSE) with the reference's LSE
};
Readout mask_readout(const Session& s, int request, int head, int q, int k);

class MaskPanel {
 public:
  void draw(const Session& s, UiState& ui);

 private:
  const Session* built_for_ = nullptr;
  int built_request_ = -1;
  MaskItems items_;
  Texture tex_;
};

}  // namespace attnscope::gui
