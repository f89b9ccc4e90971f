// Split-KV panel: per unit the q-tile x kv-chunk grid with work item (CTA) ids, padding items,
// merge fan-in, the planner's reasoning, the four planner models side by side, and the batch
// invariance status (computed on request, off the GUI thread).
#pragma once

#include <future>
#include <optional>
#include <string>
#include <vector>

#include "gui_state.h"
#include "invariance.h"
#include "session.h"

namespace attnscope::gui {

struct PlannerRow {
  std::string planner;
  std::string error;  // the model cannot plan this case (e.g. no fixed split size)
  int tile = 0, chunk_pages = 0, items = 0, padded = 0;
  bool split = false;
};

struct SplitItems {
  std::vector<PlannerRow> models;  // flashinfer, flash_attn, fixed, off
  int padded_extra = 0;            // CUDA-graph CTAs that do nothing
  std::vector<int> first_item;     // [units] id of the unit's first work item
};

SplitItems build_split_items(const Session& s);

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
