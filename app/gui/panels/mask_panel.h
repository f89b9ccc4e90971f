// Mask panel: one request's q x k mask as a heatmap (exact any/all pooling for long sequences),
// the block map's tile grid over it, zoom and pan, and a hover readout (q_abs, k, allowed, score,
// probability against the reference's LSE).
#pragma once

#include <imgui.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "draw/texture.h"
#include "fp8_data.h"
#include "gui_state.h"
#include "session.h"
#include "sparse_data.h"
#include "sparse_view.h"
#include "tree_view.h"

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
  std::vector<int> unit_starts;    // query index (> 0) where a virtual batch after the first starts
  int kv_tile = 64;
};

// Exact pooling: a cell is kAll iff every pair in it is allowed, kNone iff none is.
MaskItems build_mask_items(const Session& s, int request, int max_cells = 512);

struct Readout {
  int q = 0, q_abs = 0, k = 0;
  bool allowed = false;
  double logit = 0;  // sm_scale q.k from the generated inputs: a score_mod's `score`
  double score = 0;  // the logit after the score_mod, or after soft-cap and ALiBi
  bool has_prob = false;
  double prob = 0;                  // exp(score - LSE) with the reference's LSE
  std::string mask_mod, score_mod;  // the case's expressions ("" when absent)
  // FP8 cache: the logit is from the stored values times their scales, as the references read them
  // (fp8), or, while those scales are not known here, from the values before quantisation
  // (pre_quantisation: then no probability, the reference's LSE being the dequantised cache's)
  bool fp8 = false, pre_quantisation = false;
  double k_scale = 1, q_scale = 1;
};
// `fp8`: the case's FP8 data (fp8_data.h), needed for the logit of an FP8 case.
Readout mask_readout(const Session& s, int request, int head, int q, int k, const Fp8Data* fp8 = nullptr);

// What a mask_mod does to the plan: the expressions, the block map's counts (the whole batch and
// the shown request) and the work items' KV tiles: those they list as non-empty (what the plan-executing GPU kernel
// visits) against all tiles in their key ranges.
struct ExprSummary {
  std::string mask_mod, score_mod;  // "" when absent
  std::string and_note;             // the mask_mod is ANDed with this request's built-in mask
  int64_t full = 0, partial = 0, empty = 0;
  double sparsity = 0;  // empty / all blocks, the batch
  int64_t req_full = 0, req_partial = 0, req_empty = 0;
  int items = 0;
  bool lists_tiles = false;             // the plan lists each item's non-empty tiles (a mask_mod exists)
  int64_t listed_tiles = 0;             // tiles the items list (lists_tiles), else the range's
  int64_t range_tiles = 0;              // kKvTile-key tiles from each item's first key to its last
  std::vector<std::string> expr_lines;  // the expressions, printed above the map
  std::vector<std::string> plan_lines;  // block map and work-item sentences, printed under it
};
ExprSummary build_expr_summary(const Session& s, int request);

// FlexAttention's BlockMask, as python.flex_attention built it for the batch packed as one sequence
// (Result::block_mask), beside attnscope's block map: the block grid (full / partial / empty), its
// counts, and attnscope's own mask classified on the same blocks, so the lines say where they differ.
struct FlexBlockItems {
  bool present = false;
  std::string backend;
  std::string error;                // the summary could not be read ("" when present)
  int q_block = 0, kv_block = 0;    // FlexAttention's BLOCK_SIZE
  int total_q = 0, total_kv = 0;    // the packed batch
  int q_blocks = 0, kv_blocks = 0;  // the grid drawn (clipped to what the worker sent)
  bool clipped = false;
  std::vector<Cell> cells;     // [q_blocks * kv_blocks]: kAll full, kSome partial, kNone empty
  std::vector<Cell> expected;  // the same blocks from attnscope's mask
  int64_t full = 0, partial = 0, empty = 0;
  int64_t differ = 0;  // blocks where the two disagree
  int first_differ_q = -1, first_differ_kv = -1;
  int req_q0 = 0, req_q1 = 0, req_k0 = 0, req_k1 = 0;  // the shown request's rows / keys, packed
  std::vector<std::string> lines;
};
FlexBlockItems build_flex_block_items(const Session& s, int request, const ExprSummary& attnscope_blocks);

class MaskPanel {
 public:
  void draw(const Session& s, UiState& ui);
  // a /sparse case's grid and mass still computing, or not yet asked for
  bool busy() const { return sparse_job_.busy() || (sparse_wanted_ && !sparse_job_.value() && sparse_job_.error().empty()); }

 private:
  void draw_flex_blocks(float width, float height);
  void rebuild(const Session& s, const UiState& ui);
  void draw_readout(const Session& s, const UiState& ui, ImVec2 p0, ImVec2 size);
  // /sparse: the kept tokens over the causal mask and their mass, from a worker (sparse_data.h); shown
  // instead of tex_ once they are of the shown request
  const SparseMaskItems* sparse_items(const Session& s, const UiState& ui);
  SparseJob<SparseMaskItems> sparse_job_;
  bool sparse_wanted_ = false;
  const Session* sparse_keyed_for_ = nullptr;
  std::string sparse_case_key_;
  const SparseMaskItems* sparse_uploaded_ = nullptr;
  Texture sparse_tex_;
  SparseViews sparse_views_;
  const Session* built_for_ = nullptr;
  int built_request_ = -1;
  MaskItems items_;
  ExprSummary summary_;
  FlexBlockItems flex_;
  const Result* flex_for_ = nullptr;  // the result flex_ was built from
  bool flex_stale_ = true;            // the session or request changed since
  Texture tex_, flex_tex_;
  TreeItems tree_;          // the request's tree_parents (empty without)
  int tree_selected_ = -1;  // the clicked tree token, highlighted while none is hovered
  // The hovered pair's readout, recomputed only when the pair moves: an MLA case derives its Q and K
  // rows (65k weights each) for it, too much to redo every frame on the GUI thread.
  Readout readout_;
  std::array<int, 4> readout_at_{-1, -1, -1, -1};  // request, head, q, k
  const Session* readout_for_ = nullptr;
};

}  // namespace attnscope::gui
