// Host planning cost (`attnscope-cli bench CASE --plan-only`, the Sweep tab's planning-cost chart): what
// each planner costs per engine step as the batch grows, the number vLLM #21137 is about. The case is the
// template: its request list is cut or extended to each batch size (copies of its last request, as the
// sweep's /requests/#), then timed on the host, median of `reps` calls each:
//   split:<planner>  attnscope's split-KV model alone (make_split_plan on the batch's units and masks),
//                    for the flashinfer and flash_attn models;
//   make_plan        attnscope's whole plan of the case (page table, masks, units, split plan, block map);
//   <family>         each family's own planner on the same units (FlashInfer's PrefillPlan / MLAPlan compiled
//                    from its pinned headers), where that family is compiled.
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace attnscope {

struct PlanCostColumn {
  std::string name;  // "split:flashinfer", "make_plan", "flashinfer (library)"
  std::string what;  // one line: what the column times
};

struct PlanCostPoint {
  int batch = 0;
  std::string error;               // the case is invalid at this batch size (nothing was timed)
  std::vector<double> us;          // median microseconds per column; negative: not run (see notes)
  std::vector<std::string> notes;  // per column: why not run, else ""
};

struct PlanCostReport {
  std::string case_name;
  int reps = 0;
  std::vector<PlanCostColumn> columns;
  std::vector<PlanCostPoint> points;
  // the yardstick: the split plan alone (the case's planner model) at batch 256
  double split_us_at_256 = -1;
};

struct PlanCostOptions {
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  int reps = 20;
  std::function<void(int point, int points)> progress;
  const std::atomic<bool>* cancel = nullptr;
};

// `base` is the case file's JSON. Throws std::invalid_argument for a batch list that is empty or has
// a size outside [1, 65536]; an invalid case at one size is that point's error.
PlanCostReport run_plan_cost(const nlohmann::json& base, const PlanCostOptions& opt);

// "1:1024:x2" or "1,8,64" (sweep's value grammar, integers in [1, 65536]). Throws std::invalid_argument
// naming the option and the rule.
std::vector<int> parse_batches(const std::string& arg);

nlohmann::ordered_json plan_cost_to_json(const PlanCostReport& r);  // schema attnscope/plan-cost@1
std::string plan_cost_table(const PlanCostReport& r);               // the CLI's text table

}  // namespace attnscope
