// The flashinfer.mla kernels as attnscope calls them: FlashInfer's BatchMLAPagedAttention (mla.cuh,
// FA2 style, fi_mla_fa2.cu) and BatchMLAPageAttentionHopper (mla_hopper.cuh, sm_90a, fi_mla_sm90.cu),
// for head_dim_ckv 512 and head_dim_kpe 64, bf16 / fp16, causal or not. No FlashInfer types here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "attnscope/types.h"
#include "fi_mla.h"

namespace attnscope::peers::flashinfer {

constexpr int kMlaRank = 512, kMlaRope = 64;  // the only head dims FlashInfer's MLA kernels are built for here

// One launch: the absorbed case's device tensors, the plan (MLAPlanInfo's 18 entries and the device
// int workspace they index) and the float workspace's partials.
struct MlaLaunchArgs {
  void* q = nullptr;     // [total_q, heads, 576]
  void* kv = nullptr;    // the K pool [pages, page_size, 576] (one latent head)
  void* o = nullptr;     // [total_q, heads, 512]
  float* lse = nullptr;  // [total_q, heads], base 2
  void* partial_o = nullptr;
  float* partial_lse = nullptr;
  const int32_t* kv_indices = nullptr;
  void* int_ws = nullptr;
  const int64_t* info = nullptr;  // mla_plan_call's vector
  int num_heads = 0, page_size = 1;
  float sm_scale = 1.f;
};

// FA2-style kernel (sm80+): launch status (FlashInfer's own refusals thrown as std::domain_error) (cudaErrorNotSupported for a
// dtype other than bf16 / fp16).
cudaError_t launch_mla_fa2(const MlaLaunchArgs& a, bool causal, DType dt, cudaStream_t s);
// The Hopper kernel; empty string from mla_sm90_not_built() when it is compiled, else why not.
std::string mla_sm90_not_built();
cudaError_t launch_mla_sm90(const MlaLaunchArgs& a, bool causal, DType dt, cudaStream_t s);

}  // namespace attnscope::peers::flashinfer
