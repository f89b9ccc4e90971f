// Split-KV panel: per unit the q-tile x kv-chunk grid with work item (CTA) ids, padding items,
// merge fan-in, the planner's reasoning, the four planner models side by side, FlashInfer's own
// plan beside the model with every differing field marked, and the batch invariance status
// (computed on request, off the GUI thread).
#pragma once

#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "gui_state.h"
#include "invariance.h"
#include "mla_plan_view.h"
#include "session.h"

namespace attnscope::gui {

struct PlannerRow {
  std::string planner;
  std::string error;  // the model cannot plan this case (e.g. no fixed split size)
  int tile = 0, chunk_pages = 0, items = 0, padded = 0;
  bool split = false;
};

// One field of FlashInfer's own plan beside the model's value.
struct LibraryField {
  std::string field;           // "cta_tile_q", "kv_chunk_size", ... (library_plan.h PlanFieldDiff names)
  std::string model, library;  // the values, in words
  bool differs = false;        // marked in the panel
};

// FlashInfer's work-item grid of one unit, drawn beside the model's.
struct LibraryGrid {
  int tiles = 0, chunks = 0;     // FlashInfer's q-tiles x kv-tiles of the unit
  std::vector<int> ids;          // [tiles * chunks] FlashInfer's work item id of each cell, -1 where none
  std::vector<uint8_t> differs;  // [tiles * chunks] 1 where the model has another item at this id (or none)
};

// FlashInfer's own plan (library_plans.flashinfer) against the plan's model, ready to draw.
struct LibraryItems {
  bool ran = false, available = false, refused = false, agrees = false;
  std::string title;                 // "FlashInfer's own plan: PrefillSplitQOKVIndptr (flashinfer-python==...)"
  std::string source;                // where the device answers came from (a profile is said, never silent)
  std::string line;                  // the agreement line (library_plan.h flashinfer_agreement_line)
  std::string note;                  // what the case asks for that FlashInfer has no argument for
  std::vector<LibraryField> fields;  // tile, chunk, split_kv, items, padded, work items, merge_indptr, o_indptr, refusal
  std::vector<LibraryGrid> grids;    // [units] when available
  int differing_cells = 0;           // sum of the grids' differs
};

struct SplitItems {
  std::vector<PlannerRow> models;  // flashinfer, flash_attn, fixed, off
  int padded_extra = 0;            // CUDA-graph CTAs that do nothing
  std::vector<int> first_item;     // [units] id of the unit's first work item
  LibraryItems library;            // FlashInfer's own plan beside the model
  LibraryItems flash_attn;         // FlashAttention-2's own num_splits beside the flash_attn model (flash_attn cases)
  MlaPlanItems mla;                // absorbed MLA cases: FlashInfer's MLAPlan beside the model
};

SplitItems build_split_items(const Session& s);
LibraryItems build_library_items(const Session& s);
LibraryItems build_flash_attn_items(const Session& s);

// /cuda_graph (split_panel_graph.cpp): the padded batch the engine replays, and per captured backend the
// captured grid beside the replayed batch's, with the replay's checks.
void draw_cuda_graph(const Session& s);

class SplitPanel {
 public:
  void draw(const Session& s, UiState& ui);

 private:
  const Session* built_for_ = nullptr;
  SplitItems items_;
  std::string key_;  // the case as text, for the invariance report
  std::future<InvarianceReport> pending_;
  std::optional<InvarianceReport> report_;
  std::string report_for_;  // case text the report belongs to
};

}  // namespace attnscope::gui
