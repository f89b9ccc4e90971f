// library_plans.flash_attn: FlashAttention-2's num_splits for the case as flash_attn_with_kvcache
// decides it, reproduced on the host (fa_conventions.cpp's num_splits_heuristic and translate),
// with attnscope's flash_attn model of the same case beside it. Host code, built in every
// configuration; the SM count is the device's when the kernels are compiled and a GPU is present.
#pragma once

#include <vector>

#include "attnscope/library_plan.h"

namespace attnscope::peers::flash_attn {

inline constexpr const char* kFlashAttnPin = "flash-attn==2.8.3.post2";

FlashAttnPlan library_plan(const CaseSpec& c, const std::vector<WorkUnit>& units, const DeviceProfile& device);

// The profile the planner answers from: device 0's SM count when the family's kernels are compiled
// and a device is present, else h100_profile(num_sms) with the reason.
DeviceProfile planner_device(int num_sms);

}  // namespace attnscope::peers::flash_attn
