// The workload on the device: plan metadata uploaded once, inputs generated on the GPU by the same
// counter-based generator as the host (bit-identical; tested), stored in the case dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "attnscope/backend.h"
#include "attnscope/fp8.h"
#include "cuda_util.h"

namespace attnscope::cuda {

// Device views of the plan's per-request metadata.
struct DevicePlanView {
  const RowMask* masks = nullptr;     // [requests], doc_starts pointing into device memory
  const int* kv_indptr = nullptr;     // [requests + 1]
  const int* kv_indices = nullptr;    // [pages used]
  const int64_t* q_indptr = nullptr;  // [requests + 1] token offsets
  int num_requests = 0;
  int page_size = 1;
  int page_shift = -1;  // log2(page_size) when a power of two (key >> shift), else -1
  KvLayout layout = KvLayout::kNHD;
};

#if defined(__CUDACC__)  // host code (the GPU tests) includes this header too
// Physical page and slot of key k: a shift for power-of-two pages instead of an integer division.
__device__ inline void page_slot(const DevicePlanView& v, int k, int* page_col, int* slot) {
  const int col = v.page_shift >= 0 ? (k >> v.page_shift) : k / v.page_size;
  *page_col = col;
  *slot = k - col * v.page_size;
}
#endif

struct DeviceWorkload {
  DType dtype = DType::kBf16;
  DeviceBuffer q, k, v;  // raw storage in the dtype: 2 bytes (fp16/bf16) or 4 (fp32)
  DeviceBuffer masks, docs, kv_indptr, kv_indices, q_indptr;
  DeviceBuffer mask_bits, mask_bounds;  // a mask_mod's bits (RowMask::bits point here); empty without one
  DevicePlanView view;
  int64_t total_q = 0;
  int64_t q_elems = 0, k_elems = 0, v_elems = 0;
  // FP8 (docs/conventions.md section 10; the host's Workload holds the same bits): with an FP8 cache,
  // k8 / v8 are the stored bytes in the pool's layout (1 byte per element, unused slots 0x7f under
  // poison_unused, else 0) and k / v hold the same FP8 values in the dtype (exact), so a kernel that
  // reads the dtype pool needs only the scales. k_scale / v_scale: float, fp8.h's scale_index order.
  // With fp8_attention, q holds Q's FP8 values in the dtype and q_scale its scale.
  std::optional<Fp8Format> fp8;
  ScaleGranularity granularity = ScaleGranularity::kTensor;
  DeviceBuffer k8, v8, k_scale, v_scale;
  float q_scale = 1.0f;
  // A /sparse case's gathered form (RunOptions::inputs_case): the workload q, k, v and the FP8 buffers
  // are borrowed from, kept alive here.
  std::shared_ptr<const DeviceWorkload> inputs;
};

// A score_mod's postfix program and per-request variables on the device, for the kernels that
// interpret it (cuda.reference / cuda.naive, cuda.flash's FlashMode::kScoreMod). The variables' doc_starts stay
// null: the kernels take the device copy from the request's mask.
struct DeviceScoreMod {
  DeviceBuffer ops, envs;  // [n] ExprOp, [requests] ExprEnv
  int n = 0;
};
DeviceScoreMod upload_score_mod(const CaseSpec& c, const Expr& e);

// Bytes of device memory the inputs need (for the refuse-before-allocating check).
int64_t device_workload_bytes(const CaseSpec& c, const Plan& p);

// Uploads the plan metadata and generates Q, K, V on the device.
DeviceWorkload make_device_workload(const CaseSpec& c, const Plan& p);

// The device workload of (c, p), read-only and shared (issue 43): every GPU backend run with the same
// non-empty opt.inputs_key on the same device gets the one generated first (the last key's is kept);
// an empty key gives a fresh one. With opt.inputs_case (a gathered /sparse run) the inputs are those of
// that case, addressed through (c, p)'s metadata. A backend that changes its inputs calls make_device_workload.
std::shared_ptr<const DeviceWorkload> device_workload(const CaseSpec& c, const Plan& p, const RunOptions& opt);

// Inputs copied back as floats (for the bit-identity test against the host generator).
std::vector<float> download_as_float(const DeviceBuffer& b, int64_t elems, DType t);

// Memory check before a run: throws CudaError naming the numbers when `need` does not fit.
void require_device_memory(int64_t need, const std::string& what);

}  // namespace attnscope::cuda
