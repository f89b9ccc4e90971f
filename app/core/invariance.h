// Batch invariance: is each request's output bit-identical when it runs alone and inside the
// batch? Checked per planner model (FlashInfer PR #1675 is the story).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"

namespace attnscope {

struct PlannerInvariance {
  Planner planner = Planner::kFlashInfer;
  std::string note;                                // settings used (e.g. the fixed split size and tile chosen)
  std::string error;                               // the backend failed or is unavailable: nothing compared
  int batch_tile = 0, batch_chunk_pages = 0;       // plan of the full batch
  std::vector<int> alone_tile, alone_chunk_pages;  // [requests] plan of each request alone
  std::vector<int> differing_values;               // [requests] O/LSE values whose bits differ (0 = identical)
  int identical_requests() const;
};

struct InvarianceReport {
  std::string backend;
  std::string case_name;
  int num_requests = 0;
  std::vector<PlannerInvariance> planners;
};

struct InvarianceOptions {
  std::string backend;  // "" = the plan twin (Role::kPlanTwin), the CPU backend that follows the plan
  std::vector<Planner> planners = {Planner::kFlashInfer, Planner::kFlashAttn, Planner::kFixed, Planner::kOff};
  std::optional<int> fixed_split_size;  // for `fixed` (default: the case's, else 2048 tokens of pages)
  std::optional<int> fixed_tile_q;      // for `fixed` (default: the case's, else 128, 64 for head_dim_vo >= 256)
  std::function<void(const std::string&)> progress;
};

// Throws CaseError for an invalid case.
InvarianceReport check_invariance(const CaseSpec& c, const InvarianceOptions& opt);

}  // namespace attnscope
