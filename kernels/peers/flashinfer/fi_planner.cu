// PLACEHOLDER (being written): FlashInfer's planner on the host.
#include "attnscope/library_plan.h"
namespace attnscope {
FlashInferPlan flashinfer_library_plan(const CaseSpec&, const std::vector<WorkUnit>&) {
  FlashInferPlan p;
  p.why = "not implemented yet";
  return p;
}
}  // namespace attnscope
