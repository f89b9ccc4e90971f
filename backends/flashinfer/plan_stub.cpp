// Built when the flashinfer family is not: library_plans.flashinfer says why it is absent.
#include "fi_library_plan.h"

namespace attnscope {

bool flashinfer_planner_compiled() { return false; }

FlashInferPlan flashinfer_library_plan(const CaseSpec&, const std::vector<WorkUnit>&, const DeviceProfile*) {
  FlashInferPlan p;
  p.why = "not compiled: flashinfer family: " ATTNSCOPE_FAMILY_WHY;
  return p;
}

}  // namespace attnscope
