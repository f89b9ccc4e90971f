// The seam between flashinfer.prefill_sm90 (fi_prefill_sm90.cu: plan, buffers, checks, timing) and
// the sm_90a instance units (fi_sm90_kernel.cuh, one generated unit per line of
// fi_sm90_instances.def). The backend fills Sm90Args, a plain struct without FlashInfer or CUTLASS
// types, so that only the instance units pay for FlashInfer's Hopper headers (~90 s and 3.3 GB of
// RAM per kernel); each instance unit turns it into FlashInfer's PagedParams and launches.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/types.h"
#include "fi_conventions.h"

namespace attnscope::peers::flashinfer {

// One launch of BatchPrefillWithPagedKVCacheDispatched. Pointers are device pointers; the plan
// arrays point into the int workspace at PrefillPlanSM90Info's offsets. Strides are in elements.
struct Sm90Args {
  const void* q = nullptr;  // [nnz_qo, num_qo_heads, head_dim], the case dtype; TMA-loaded
  const void* k = nullptr;  // the paged K pool, NHD [pages, page_size, heads, dim] or HND [pages, heads, page_size, dim]
  const void* v = nullptr;  // the paged V pool, the same shape and strides as K (the kernel reads V with K's strides)
  void* o = nullptr;        // [nnz_qo, num_qo_heads, head_dim], the case dtype
  float* lse = nullptr;     // [nnz_qo, num_qo_heads], base 2
  const int32_t* kv_indices = nullptr;  // physical pages of every unit, CSR with the plan's kv_indptr (pages)

  // the plan, per work tile (qo tile x qo head) except work_indptr: [num_SMs + 1] tiles per CTA
  int32_t* qo_tile_indices = nullptr;
  int32_t* qo_indptr = nullptr;  // first query row of the tile's unit
  int32_t* kv_indptr = nullptr;  // first page (index into kv_indices) of the tile's unit
  int32_t* qo_lens = nullptr;    // queries of the unit
  int32_t* kv_lens = nullptr;    // keys of the unit, tokens
  int32_t* head_indices = nullptr;
  int32_t* work_indptr = nullptr;
  int32_t* batch_indices = nullptr;

  int64_t q_stride_n = 0, q_stride_h = 0;  // between tokens, between heads
  int64_t o_stride_n = 0, o_stride_h = 0;
  int64_t kv_stride_n = 0, kv_stride_h = 0;  // within a page: between tokens, between heads (K and V alike)
  int64_t kv_page_stride = 0;                // between pages (K and V alike)
  int64_t nnz_qo = 0;                        // rows of Q and O (>= 1: the TMA descriptor needs one)
  int num_qo_heads = 0, num_kv_heads = 0;
  int page_size = 1;
  int window_left = -1;  // the window instantiations read it; -1 otherwise
  double sm_scale = 1.0;
  double logits_soft_cap = 0.0;  // soft-cap variant only (> 0)
  // FP8 instances (DefaultFP8Attention, hopper/variants.cuh): Q, K and V are FP8 bytes; the kernel
  // multiplies q_scale * k_scale into sm_scale and v_scale into the output, each from the per-head
  // array when given ([num_qo_heads] for Q, [num_kv_heads] for K and V, FlashInfer's maybe_scale_*),
  // else from the scalar (scale_*_scalar), as its Python's _split_scale_param hands them over.
  const float* q_scale = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  double q_scale_scalar = 1.0, k_scale_scalar = 1.0, v_scale_scalar = 1.0;
};

// A launcher returns FlashInfer's status (cudaSuccess or the launch / attribute error).
using Sm90Launcher = cudaError_t (*)(const Sm90Args&, cudaStream_t);

// One line of fi_sm90_instances.def as built, with the kernel's shape for messages.
struct Sm90Instance {
  int head_dim = 0;                       // qk = vo
  DType dtype = DType::kBf16;             // Q, K, V and O; the output's with fp8
  std::optional<Fp8Format> fp8;           // Q, K and V in FP8 (the FP8 kernel, DefaultFP8Attention); O in dtype
  FiVariant variant = FiVariant::kPlain;  // kPlain (StandardAttention) or kSoftcap (LogitsSoftCap)
  FiMask mask = FiMask::kCausal;          // kCausal or kNone
  bool window = false;                    // LEFT_SLIDING_WINDOW
  Sm90Launcher launch = nullptr;
  int cta_q = 0, cta_kv = 0;  // the kernel's tile (FlashInfer's choice per head dim)
  int threads = 0;            // per CTA: one producer warp group + CTA_Q / 64 consumer warp groups
  size_t smem_bytes = 0;      // sizeof(SharedStorage), the launch's dynamic shared memory
};

// The instances this build compiled (fi_prefill_sm90.cu, over the generated table).
const std::vector<Sm90Instance>& sm90_instances();

// The built line for exactly these parameters, or nullptr.
const Sm90Instance* find_sm90(int head_dim, DType dt, FiVariant v, FiMask m, bool window,
                              std::optional<Fp8Format> fp8 = std::nullopt);

// "128 bf16 plain causal, 128 bf16 plain none, ..." for messages; "none" when empty.
std::string sm90_instances_text();

}  // namespace attnscope::peers::flashinfer
