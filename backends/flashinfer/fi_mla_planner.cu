// FlashInfer's MLA planner (MLAPlan, scheduler.cuh of the pinned headers) on the host: the one unit
// that instantiates it, for library_plans.flashinfer_mla and for the flashinfer.mla backends.
//
// MLAPlan asks the runtime for the current device and its SM count. As in fi_planner.cu, those two
// calls are redirected in this unit to a DeviceProfile: device 0's own answers when there is a GPU,
// else the H100 SXM profile with the case's /split/num_sms.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fi_library_plan.h"
#include "fi_mla.h"

namespace attnscope::peers::flashinfer::mla_planner_detail {
thread_local const DeviceProfile* t_profile = nullptr;
thread_local std::vector<int>* t_unanswered = nullptr;
}  // namespace attnscope::peers::flashinfer::mla_planner_detail

static cudaError_t attnscope_fi_mla_get_device(int* device) {
  if (!attnscope::peers::flashinfer::mla_planner_detail::t_profile) return cudaErrorNoDevice;
  *device = 0;
  return cudaSuccess;
}

static cudaError_t attnscope_fi_mla_device_get_attribute(int* value, cudaDeviceAttr attr, int /*device*/) {
  using namespace attnscope::peers::flashinfer::mla_planner_detail;
  if (!t_profile) return cudaErrorNoDevice;
  if (attr == cudaDevAttrMultiProcessorCount) {
    *value = t_profile->sm_count;
    return cudaSuccess;
  }
  if (t_unanswered) t_unanswered->push_back(static_cast<int>(attr));
  *value = 0;
  return cudaErrorInvalidValue;
}

#define cudaGetDevice attnscope_fi_mla_get_device
#define cudaDeviceGetAttribute attnscope_fi_mla_device_get_attribute
#include <flashinfer/attention/scheduler.cuh>
#undef cudaDeviceGetAttribute
#undef cudaGetDevice

namespace attnscope {

namespace pf = ::attnscope::peers::flashinfer;

namespace peers::flashinfer {

size_t mla_int_workspace_bytes(const MlaPlanInputs& in) {
  return 10 * static_cast<size_t>(kMlaMaxWorks) * sizeof(int32_t) + 5 * (static_cast<size_t>(in.num_sm) * 4 + 16) + 1024;
}

size_t mla_float_workspace_bytes(const MlaPlanInputs& in, int dtype_o_bytes) {
  const size_t rows = 2 * static_cast<size_t>(in.num_sm) * 64;  // 2 x clusters x cluster_tile_q, at most
  return rows * static_cast<size_t>(dtype_o_bytes) * static_cast<size_t>(in.head_dim_o) + rows * sizeof(float) + 64;
}

std::vector<int64_t> mla_plan_call(const DeviceProfile& prof, const MlaPlanBuffers& b, const MlaPlanInputs& in, size_t* staged) {
  using namespace mla_planner_detail;
  std::vector<int> unanswered;
  t_profile = &prof;
  t_unanswered = &unanswered;
  struct Reset {
    ~Reset() {
      t_profile = nullptr;
      t_unanswered = nullptr;
    }
  } reset;
  std::vector<int> qo = in.qo_indptr, kv = in.kv_indptr, len = in.kv_len;  // FlashInfer takes non-const pointers
  ::flashinfer::MLAPlanInfo info{};
  size_t st = 0;
  cudaError_t e;
  try {
    e = ::flashinfer::MLAPlan<int32_t>(b.float_ws, b.float_bytes, b.int_ws, b.host, b.int_bytes, info, st, qo.data(), kv.data(),
                                       len.data(), static_cast<uint32_t>(len.size()), static_cast<uint32_t>(in.num_heads),
                                       static_cast<uint32_t>(in.head_dim_o), in.causal, /*stream=*/nullptr);
  } catch (const ::flashinfer::Error& err) {
    throw std::runtime_error(std::string("FlashInfer's MLAPlan refuses the batch: ") + err.what());
  }
  if (!unanswered.empty()) throw std::runtime_error("MLAPlan asked for a device attribute the profile does not answer");
  if (e != cudaSuccess) throw std::runtime_error(std::string("MLAPlan failed: ") + cudaGetErrorName(e));
  *staged = st;
  return info.ToVector();
}

MlaSchedule read_mla_schedule(const std::vector<int64_t>& info, const void* host, int num_sm) {
  MlaSchedule s;
  s.num_blks_x = info[kBlksX];
  s.num_blks_y = info[kBlksY];
  auto at = [&](int field) { return reinterpret_cast<const int32_t*>(static_cast<const char*>(host) + info[field]); };
  const int32_t* wi = at(kWorkIndptr);
  s.work_indptr.assign(wi, wi + s.num_blks_y + 1);
  const int n = s.work_indptr.back();
  s.works.resize(n);
  const int32_t *q = at(kQIndptr), *kv = at(kKvIndptr), *pi = at(kPartialIndptr), *ql = at(kQLen), *kl = at(kKvLen),
                *qs = at(kQStart), *ks = at(kKvStart), *ke = at(kKvEnd);
  for (int i = 0; i < n; ++i) s.works[i] = {q[i], kv[i], pi[i], ql[i], kl[i], qs[i], ks[i], ke[i]};
  auto arr = [&](int field) { return std::vector<int>(at(field), at(field) + num_sm); };
  s.merge_packed_start = arr(kMergePackedStart);
  s.merge_packed_end = arr(kMergePackedEnd);
  s.merge_partial_start = arr(kMergePartialStart);
  s.merge_partial_end = arr(kMergePartialEnd);
  s.merge_partial_stride = arr(kMergePartialStride);
  return s;
}

}  // namespace peers::flashinfer

FlashInferMlaPlan flashinfer_mla_library_plan(const CaseSpec& c, const std::vector<WorkUnit>& units, const DeviceProfile* force) {
  FlashInferMlaPlan fp;
  fp.compiled = true;
  fp.pin = ATTNSCOPE_FLASHINFER_PIN;
  if (!c.mla_absorbed()) {
    fp.why = c.is_mla() ? "the non-absorbed MLA form is plain attention (FlashInfer's MLA planner schedules the absorbed form)"
                        : "not an MLA case";
    return fp;
  }
  fp.device = force ? *force : flashinfer_planner_device(c.split.num_sms);
  fp.inputs = mla_plan_inputs(c, units, fp.device.sm_count);
  fp.model_num_sms = c.split.num_sms;
  // the model's refusals are attnscope's own checks before the call (FlashInfer would divide by an
  // empty batch, or overrun its work arrays, rather than refuse)
  const MlaPlanModel pre = model_mla_plan(fp.inputs);
  if (!pre.refusal.empty()) {
    fp.refused = true;
    fp.why = "attnscope does not call MLAPlan: " + pre.refusal;
    return fp;
  }
  const size_t ib = pf::mla_int_workspace_bytes(fp.inputs);
  std::vector<uint64_t> host((ib + 7) / 8);             // the page-locked buffer's stand-in (and the int offsets' base)
  alignas(64) static thread_local char float_base[64];  // offsets only: the planner never writes the float workspace
  pf::MlaPlanBuffers b{float_base, pf::mla_float_workspace_bytes(fp.inputs, 2), host.data(), host.data(), ib};
  fp.ran = true;
  try {
    size_t staged = 0;
    const std::vector<int64_t> info = pf::mla_plan_call(fp.device, b, fp.inputs, &staged);
    fp.schedule = pf::read_mla_schedule(info, host.data(), fp.inputs.num_sm);
    fp.int_workspace_bytes = static_cast<int64_t>(staged);
    fp.float_workspace_bytes = info[pf::kPartialLse] + 2 * fp.schedule.num_blks_y * 64 * fp.schedule.num_blks_x * 4;
  } catch (const std::exception& e) {
    fp.refused = true;
    fp.why = e.what();
  }
  fp.available = fp.ran && !fp.refused;
  return fp;
}

}  // namespace attnscope
