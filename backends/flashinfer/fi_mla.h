// What the flashinfer.mla backends share with FlashInfer's MLA planner unit (fi_mla_planner.cu): the
// one call of MLAPlan in the build. The planner's device queries go to a DeviceProfile (device 0's
// own answers on a GPU), so the backends and library_plans.flashinfer_mla run the same instantiation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/library_plan.h"

namespace attnscope::peers::flashinfer {

// The buffers MLAPlan writes: the device int workspace (only its offsets are used by the planner),
// the page-locked host copy it fills, and the float workspace (offsets only).
struct MlaPlanBuffers {
  void* float_ws = nullptr;
  size_t float_bytes = 0;
  void* int_ws = nullptr;
  void* host = nullptr;
  size_t int_bytes = 0;
};

// Workspace sizes that hold any plan of `in` (12 work arrays of kMlaMaxWorks entries, 5 merge arrays
// of num_sm, the partials of 2 x clusters x 128 rows), with alignment slack.
size_t mla_int_workspace_bytes(const MlaPlanInputs& in);
size_t mla_float_workspace_bytes(const MlaPlanInputs& in, int dtype_o_bytes);

// MLAPlan on `in`, its queries answered by `prof`: returns MLAPlanInfo::ToVector() (18 entries:
// num_blks_x, num_blks_y, then the offsets in declaration order); *staged = the int bytes to copy to
// the device. Throws std::runtime_error with FlashInfer's message when the planner refuses.
std::vector<int64_t> mla_plan_call(const DeviceProfile& prof, const MlaPlanBuffers& b, const MlaPlanInputs& in, size_t* staged);

// Indices into mla_plan_call's vector.
enum MlaInfo : int {
  kBlksX = 0,
  kBlksY,
  kQIndptr,
  kKvIndptr,
  kPartialIndptr,
  kMergePackedStart,
  kMergePackedEnd,
  kMergePartialStart,
  kMergePartialEnd,
  kMergePartialStride,
  kQLen,
  kKvLen,
  kQStart,
  kKvStart,
  kKvEnd,
  kWorkIndptr,
  kPartialO,
  kPartialLse
};

// The schedule as the planner left it in the host buffer.
MlaSchedule read_mla_schedule(const std::vector<int64_t>& info, const void* host, int num_sm);

}  // namespace attnscope::peers::flashinfer
