// FlashInfer's own split-KV planner on the host (library_plans.flashinfer): the pinned
// flashinfer::PrefillSplitQOKVIndptr and PrefillPlanWorkspaceSize, called on the case's units
// exactly as FlashInfer's batch prefill wrapper would (fi_conventions.h translates the arguments).
//
// The planner asks the device three things: its SM count (PrefillPlanImpl's grid budget), its
// compute capability and its opt-in shared memory per block (the tile rule FA2DetermineCtaTileQ).
// Without a GPU those runtime calls fail, so in this translation unit only cudaGetDevice and
// cudaDeviceGetAttribute are redirected, for FlashInfer's headers, to answers from a DeviceProfile:
// device 0's own attributes when there is a device, else the H100 SXM profile with the case's
// /split/num_sms, and DeviceProfile::source says which.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attnscope/device.h"
#include "fi_conventions.h"
#include "fi_library_plan.h"

namespace attnscope::peers::flashinfer::planner_detail {

// The profile the redirected queries answer from, for the planner call running on this thread
// (make_plan runs on the GUI's worker threads as well as the CLI's main thread).
thread_local const DeviceProfile* t_profile = nullptr;
// Attributes FlashInfer asked for that the profile has no answer to (reported, never guessed).
thread_local std::vector<int>* t_unanswered = nullptr;

}  // namespace attnscope::peers::flashinfer::planner_detail

// Stand-ins for the two runtime calls, at global scope with the runtime's signatures so that
// FlashInfer's unqualified and ::-qualified calls both resolve to them.
static cudaError_t attnscope_fi_get_device(int* device) {
  if (!attnscope::peers::flashinfer::planner_detail::t_profile) return cudaErrorNoDevice;
  *device = 0;
  return cudaSuccess;
}

static cudaError_t attnscope_fi_device_get_attribute(int* value, cudaDeviceAttr attr, int /*device*/) {
  using namespace attnscope::peers::flashinfer::planner_detail;
  if (!t_profile) return cudaErrorNoDevice;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = t_profile->sm_count;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = t_profile->cc_major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = t_profile->cc_minor;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = t_profile->max_smem_per_block_optin;
      return cudaSuccess;
    default:
      if (t_unanswered) t_unanswered->push_back(static_cast<int>(attr));
      *value = 0;
      return cudaErrorInvalidValue;
  }
}

#define cudaGetDevice attnscope_fi_get_device
#define cudaDeviceGetAttribute attnscope_fi_device_get_attribute
#include <flashinfer/attention/scheduler.cuh>
#undef cudaDeviceGetAttribute
#undef cudaGetDevice

namespace attnscope {

namespace {

namespace fi = ::flashinfer;
namespace pf = ::attnscope::peers::flashinfer;

// Device 0 as the planner would see it, queried once per process (the device does not change
// under a running process, and the GUI replans on every edit).
struct DeviceAnswer {
  bool present = false;
  DeviceProfile profile;  // valid when present
  std::string why;        // why not present
};

const DeviceAnswer& device0() {
  static const DeviceAnswer a = [] {
    DeviceAnswer d;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      cudaGetLastError();  // clear the sticky "no device" error
      int driver = 0;
      if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
      // "no CUDA device: <why>" as "no CUDA device here (<why>)": no GPU or driver, or a driver too old
      const std::string why = no_device_reason(e, cudaGetErrorString(e), driver, CUDART_VERSION);
      d.why = e == cudaSuccess ? "no CUDA device here" : "no CUDA device here (" + why.substr(why.find(": ") + 2) + ")";
      return d;
    }
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
      cudaGetLastError();
      d.why = "device 0 did not answer cudaGetDeviceProperties";
      return d;
    }
    d.present = true;
    d.profile.from_device = true;
    d.profile.sm_count = p.multiProcessorCount;
    d.profile.cc_major = p.major;
    d.profile.cc_minor = p.minor;
    d.profile.max_smem_per_block_optin = static_cast<int>(p.sharedMemPerBlockOptin);
    d.profile.source = std::string("device 0: ") + p.name + ", " + std::to_string(p.multiProcessorCount) + " SMs, cc " +
                       std::to_string(p.major) + "." + std::to_string(p.minor);
    return d;
  }();
  return a;
}

// Sets the profile the redirected queries answer from for the lifetime of one planner call.
class ProfileScope {
 public:
  ProfileScope(const DeviceProfile* p, std::vector<int>* unanswered) {
    pf::planner_detail::t_profile = p;
    pf::planner_detail::t_unanswered = unanswered;
  }
  ~ProfileScope() {
    pf::planner_detail::t_profile = nullptr;
    pf::planner_detail::t_unanswered = nullptr;
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;
};

}  // namespace

bool flashinfer_planner_compiled() { return true; }

DeviceProfile flashinfer_planner_device(int num_sms) {
  const DeviceAnswer& d = device0();
  return d.present ? d.profile : h100_profile(num_sms, d.why);
}

FlashInferPlan flashinfer_library_plan(const CaseSpec& c, const std::vector<WorkUnit>& units, const DeviceProfile* force) {
  FlashInferPlan fp;
  fp.compiled = true;
  fp.pin = ATTNSCOPE_FLASHINFER_PIN;
  if (force) {
    fp.device = *force;
  } else {
    const DeviceAnswer& d = device0();
    fp.device = d.present ? d.profile : h100_profile(c.split.num_sms, d.why);
  }
  const pf::SplitArgs sa = pf::split_args(c);
  fp.note = sa.note;
  if (c.split.planner == Planner::kFlashAttn) {
    fp.why =
        "planner flash_attn models FlashAttention-2's num_splits heuristic, which FlashInfer has no plan for (planners "
        "flashinfer, fixed and off run FlashInfer's PrefillPlan)";
    return fp;
  }

  // the planner's inputs: int32 CSR over the units (vLLM's FlashInfer backend plans on the virtual
  // batches of chunked local attention), KV in pages (page 1 when ragged)
  const int ps = c.effective_page_size();
  const uint32_t B = static_cast<uint32_t>(units.size());
  fp.page_size = ps;
  fp.qo_indptr.assign(1, 0);
  fp.kv_indptr.assign(1, 0);
  for (const WorkUnit& u : units) {
    fp.qo_indptr.push_back(fp.qo_indptr.back() + u.q_len);
    fp.kv_indptr.push_back(fp.kv_indptr.back() + (u.kv_len + ps - 1) / ps);
  }
  fp.total_num_rows = fp.qo_indptr.back();
  fp.num_qo_heads = c.num_qo_heads;
  fp.num_kv_heads = c.num_kv_heads;
  fp.head_dim_qk = c.head_dim_qk;
  fp.head_dim_vo = c.head_dim_vo;
  fp.kv_dtype_bytes = dtype_bytes(c.dtype);
  fp.window_left = pf::window_left(c);  // FlashInfer applies it whenever >= 0, causal or not
  fp.fixed_split_size = sa.fixed_split_size;
  fp.disable_split_kv = sa.disable_split_kv;
  fp.enable_cuda_graph = sa.enable_cuda_graph;
  fp.uniform_q_len = 0;  // attnscope's requests are ragged: the CUDA-graph worst-case branch
  // PrefillPlanImpl's grid budget, written out as it computes it (no colocated decode CTAs)
  const int64_t available_ctas = static_cast<int64_t>(2) * fp.device.sm_count;
  const int max_grid_size = static_cast<int>(std::max<int64_t>(0, available_ctas));
  fp.max_batch_size_if_split = static_cast<int>(static_cast<uint32_t>(max_grid_size) / static_cast<uint32_t>(c.num_kv_heads));

  std::vector<int> qo = fp.qo_indptr, kv = fp.kv_indptr;  // FlashInfer takes non-const pointers
  std::vector<int> unanswered;
  const ProfileScope scope(&fp.device, &unanswered);
  fp.ran = true;
  try {
    auto [split_kv, new_batch_size, padded_batch_size, cta_tile_q, kv_chunk_size, request_indices, qo_tile_indices,
          kv_tile_indices, merge_indptr, o_indptr] =
        fi::PrefillSplitQOKVIndptr<int32_t>(qo.data(), kv.data(), static_cast<uint32_t>(fp.total_num_rows), B,
                                            static_cast<uint32_t>(c.num_qo_heads), static_cast<uint32_t>(c.num_kv_heads),
                                            static_cast<uint32_t>(c.head_dim_vo), static_cast<uint32_t>(ps),
                                            static_cast<uint32_t>(fp.max_batch_size_if_split), fp.enable_cuda_graph,
                                            fp.window_left, fp.fixed_split_size, fp.disable_split_kv, fp.uniform_q_len,
                                            static_cast<uint32_t>(c.head_dim_qk), static_cast<uint32_t>(fp.kv_dtype_bytes));
    fp.split_kv = split_kv;
    fp.new_batch_size = static_cast<int>(new_batch_size);
    fp.padded_batch_size = static_cast<int>(padded_batch_size);
    fp.cta_tile_q = static_cast<int>(cta_tile_q);
    // disable_split_kv: FlashInfer sets the chunk to INT64_MAX pages and then multiplies it by
    // page_size, which overflows int64 for page_size > 1; kept as returned, flagged, never read
    fp.kv_chunk_size = kv_chunk_size;
    fp.kv_chunk_unbounded = fp.disable_split_kv;
    fp.request_indices = std::move(request_indices);
    fp.qo_tile_indices = std::move(qo_tile_indices);
    fp.kv_tile_indices = std::move(kv_tile_indices);
    fp.merge_indptr = std::move(merge_indptr);
    fp.o_indptr = std::move(o_indptr);

    // the same plan through PrefillPlanImpl (SM query included), counting its workspaces
    size_t float_bytes = 0, int_bytes = 0;
    const cudaError_t st = fi::PrefillPlanWorkspaceSize<int32_t>(
        float_bytes, int_bytes, qo.data(), kv.data(), static_cast<uint32_t>(fp.total_num_rows), B,
        static_cast<uint32_t>(c.num_qo_heads), static_cast<uint32_t>(c.num_kv_heads), static_cast<uint32_t>(c.head_dim_qk),
        static_cast<uint32_t>(c.head_dim_vo), static_cast<uint32_t>(ps), fp.enable_cuda_graph,
        static_cast<uint32_t>(dtype_bytes(c.dtype)), fp.window_left, fp.fixed_split_size, fp.disable_split_kv,
        /*num_colocated_ctas=*/0, fp.uniform_q_len, /*stream=*/nullptr, static_cast<uint32_t>(fp.kv_dtype_bytes));
    if (st != cudaSuccess) {
      fp.note += std::string(fp.note.empty() ? "" : "; ") + "PrefillPlanWorkspaceSize failed: " + cudaGetErrorName(st);
    } else {
      fp.float_workspace_bytes = static_cast<int64_t>(float_bytes);
      fp.int_workspace_bytes = static_cast<int64_t>(int_bytes);
    }
  } catch (const fi::Error& e) {
    fp.refused = true;
    fp.why = std::string("FlashInfer's planner refuses the plan: ") + e.what();
  }
  if (!unanswered.empty()) {
    std::string list;
    for (int a : unanswered) list += (list.empty() ? "" : ", ") + std::to_string(a);
    fp.why += std::string(fp.why.empty() ? "" : "; ") + "the planner asked for device attributes the profile does not answer (" +
              list + ")";
  }
  fp.available = fp.ran && !fp.refused && unanswered.empty();
  if (fp.available) fp.why.clear();
  return fp;
}

}  // namespace attnscope
