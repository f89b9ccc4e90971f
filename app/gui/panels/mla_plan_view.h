// The Split-KV tab's MLA view (absorbed MLA cases): FlashInfer's own MLAPlan beside attnscope's model of
// it (docs/conventions.md section 14): the agreement line, the fields that differ, and the schedule as
// one lane per cluster, its work items laid end to end by their keys, coloured by request, split items
// (those writing a partial output the merge CTAs combine) hatched.
#pragma once

#include <string>
#include <vector>

#include "attnscope/library_plan.h"
#include "session.h"

namespace attnscope::gui {

struct MlaLaneItem {
  int request = 0;
  int q_start = 0;               // the tile's first packed row (query * heads + head)
  int kv_start = 0, kv_end = 0;  // keys of the item
  bool split = false;            // writes a partial (partial_indptr >= 0)
};

struct MlaPlanItems {
  bool mla = false;        // an absorbed MLA case: the view is drawn
  bool available = false;  // FlashInfer's plan ran: the lanes are its schedule, else the model's
  bool agrees = false;
  std::string line;                  // flashinfer_mla_agreement_line
  std::string source;                // where the device answers came from
  std::vector<PlanFieldDiff> diffs;  // fields where the model differs
  int cluster_size = 1, kv_len_limit = 0, merge_ctas = 0, work_items = 0;
  std::vector<std::vector<MlaLaneItem>> lanes;  // [clusters] in work order
  int64_t longest_lane = 0;                     // keys of the busiest cluster
};

MlaPlanItems build_mla_plan_items(const Session& s);

// Draws the view (nothing for a case without absorbed MLA).
void draw_mla_plan(const MlaPlanItems& it);

}  // namespace attnscope::gui
