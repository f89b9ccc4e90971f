// Built when the flashinfer family is not: library_plans.flashinfer says why it is absent.
#include "fi_library_plan.h"

namespace attnscope {

bool flashinfer_planner_compiled() { return false; }

FlashInferPlan flashinfer_library_plan(const CaseSpec&, const std::vector<WorkUnit>&, const DeviceProfile*) {
  FlashInferPlan p;
  p.why = "not compiled: flashinfer family: " ATTNSCOPE_FAMILY_WHY;
  return p;
}

FlashInferMlaPlan flashinfer_mla_library_plan(const CaseSpec& c, const std::vector<WorkUnit>& units, const DeviceProfile*) {
  FlashInferMlaPlan p;
  p.why = "not compiled: flashinfer family: " ATTNSCOPE_FAMILY_WHY;
  if (c.mla_absorbed()) {  // the model's side still has its inputs
    p.inputs = mla_plan_inputs(c, units, c.split.num_sms);
    p.model_num_sms = c.split.num_sms;
  }
  return p;
}

DeviceProfile flashinfer_planner_device(int num_sms) { return h100_profile(num_sms, "flashinfer family not compiled"); }

}  // namespace attnscope
