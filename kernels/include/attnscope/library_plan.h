// A real library's own plan for the case, made by the library's planner code (FlashInfer's
// PrefillSplitQOKVIndptr, compiled from the pinned headers), kept beside attnscope's model of it
// (SplitPlan) so the two can be compared field by field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/split_plan.h"

namespace attnscope {

// What FlashInfer's planner asks the device (SM count, compute capability, opt-in shared memory).
// Without a GPU the answers come from an explicit profile, and `source` says so.
struct DeviceProfile {
  std::string source;   // "device 0: NVIDIA H100 80GB HBM3" or "profile H100 SXM (no CUDA device here)"
  bool from_device = false;
  int sm_count = 132;   // the profile takes /split/num_sms
  int cc_major = 9, cc_minor = 0;
  int max_smem_per_block_optin = 232448;  // bytes (H100: 227 KiB)
};

// FlashInfer's FA2 PrefillPlan for the case's units (requests, or vLLM's virtual batches).
struct FlashInferPlan {
  bool available = false;  // false: not compiled, or FlashInfer refused the plan (why says which)
  std::string why;
  DeviceProfile device;
  // inputs as passed to the planner
  std::vector<int> qo_indptr;  // [units + 1], queries
  std::vector<int> kv_indptr;  // [units + 1], pages (tokens when ragged: page_size 1)
  int page_size = 1;
  int window_left = -1;
  int fixed_split_size = -1;  // pages; -1 = none
  bool disable_split_kv = false;
  bool enable_cuda_graph = false;
  int max_batch_size_if_split = 0;  // 2 x SMs / kv heads
  // outputs, as FlashInfer returns them
  int cta_tile_q = 0;
  int64_t kv_chunk_size = 0;  // tokens (FlashInfer multiplies its page count by page_size)
  bool split_kv = false;
  int new_batch_size = 0;     // real work items
  int padded_batch_size = 0;  // grid x
  std::vector<int> request_indices, qo_tile_indices, kv_tile_indices;  // [new_batch_size]
  std::vector<int> merge_indptr;  // [total queries + 1]
  std::vector<int> o_indptr;      // [units + 1]
};

struct LibraryPlans {
  FlashInferPlan flashinfer;  // for the flashinfer / fixed / off planner models; why says when not run
};

// Runs FlashInfer's planner on the case (not compiled: available = false with the reason).
FlashInferPlan flashinfer_library_plan(const CaseSpec& c, const std::vector<WorkUnit>& units);

}  // namespace attnscope
