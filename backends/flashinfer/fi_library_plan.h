// FlashInfer's own planner on attnscope's units (Plan::library.flashinfer): the family's hook,
// and what tests call directly. Defined in fi_planner.cu, or plan_stub.cpp when not compiled.
#pragma once

#include <vector>

#include "attnscope/library_plan.h"
#include "attnscope/plan.h"

namespace attnscope {

// True when this build compiled FlashInfer's planner (the flashinfer family).
bool flashinfer_planner_compiled();

// Runs FlashInfer's planner on the case. The device answers come from device 0 when there is
// one, else from h100_profile(c.split.num_sms); `force` (tests) replaces both. Not compiled,
// planner flash_attn, or refused by FlashInfer: available = false with the reason.
FlashInferPlan flashinfer_library_plan(const CaseSpec& c, const std::vector<WorkUnit>& units,
                                       const DeviceProfile* force = nullptr);

// FlashInfer's MLA planner (MLAPlan) on an absorbed MLA case's units (fi_mla_planner.cu), its device
// queries answered as above. Not compiled, not an absorbed MLA case, or refused: available = false.
FlashInferMlaPlan flashinfer_mla_library_plan(const CaseSpec& c, const std::vector<WorkUnit>& units,
                                              const DeviceProfile* force = nullptr);

// The profile the planners answer from: device 0's own attributes, else the H100 SXM profile with
// `num_sms` (fi_planner.cu).
DeviceProfile flashinfer_planner_device(int num_sms);

}  // namespace attnscope
