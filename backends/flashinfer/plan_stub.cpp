// Built when the flashinfer family is not: library_plans.flashinfer says why it is absent.
#include <stdexcept>

#include "fi_library_plan.h"
#include "fi_topk.h"

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

namespace attnscope::peers::flashinfer {

std::vector<int> flashinfer_top_k(const std::vector<float>&, const std::vector<int>&, int, int) {
  throw std::runtime_error("not compiled: flashinfer family: " ATTNSCOPE_FAMILY_WHY);
}

}  // namespace attnscope::peers::flashinfer
