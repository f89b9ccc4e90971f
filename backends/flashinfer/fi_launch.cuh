// What flashinfer.prefill's and flashinfer.decode's launch functors share (fi_prefill.cu, fi_decode.cu):
// the params fields both kernels read, the split-KV partials, the stream (the default one or a CUDA
// graph's), and what follows the kernel. Each functor adds its own fields and its kernel call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "device_workload.h"
#include "fi_params.cuh"
#include "fi_runtime.h"

namespace attnscope::peers::flashinfer {

// T: Q and O; KV = T: the dtype pools; an FP8 KV: the FP8 byte pools (k8 / v8) with FlashInfer's FP8
// KV convention (fi_runtime.h Fp8KvScales: k_scale in sm_scale, v_scale on the output after the kernel).
// Params: PrefillParams<T, KV> or DecodeParams<T, KV>.
template <class T, class KV, class Params>
class FiLaunch {
 public:
  // CUDA-graph capture (fi_graph.h): Q from the graph's bucket-sized buffer, launches on its stream.
  void graph_io(void* q, cudaStream_t s) {
    p_.q = static_cast<T*>(q);
    stream_ = s;
  }

 protected:
  // The fields both kernels read, from the plan (Info: PrefillPlanInfo or DecodePlanInfo, offsets into
  // the workspaces) and the device inputs, for `batch` units.
  template <class Info>
  FiLaunch(const CaseSpec& c, const cuda::DeviceWorkload& w, const DeviceUnits& du, const DeviceOutputs& out, Workspaces& ws,
           const Info& info, FiVariant v, uint32_t batch, const float* slopes, Fp8KvScales sc)
      : dtype_(c.dtype),
        v_scale_(sc.v),
        o_elems_(static_cast<int64_t>(out.o.bytes() / dtype_bytes(c.dtype))),
        kernels_(kernels_for<T, KV>(c.head_dim_qk)) {
    const fi::QKVLayout layout = c.kv_cache.layout == KvLayout::kNHD ? fi::QKVLayout::kNHD : fi::QKVLayout::kHND;
    // K and V pools share one shape (equal head dims, shape_refusal): the contiguous-pool constructor's
    // strides, NHD [pages, page_size, heads, dim] / HND [pages, heads, page_size, dim], are attnscope's
    // kv_offset() layouts
    KV* k = std::is_same_v<T, KV> ? w.k.as<KV>() : w.k8.as<KV>();
    KV* vp = std::is_same_v<T, KV> ? w.v.as<KV>() : w.v8.as<KV>();
    p_.paged_kv = fi::paged_kv_t<KV, FiId>(c.num_kv_heads, w.view.page_size, c.head_dim_qk, batch, layout, k, vp,
                                           du.kv_indices.as<FiId>(), du.kv_indptr.as<FiId>(), du.kv_last_page_len.as<FiId>());
    p_.q = w.q.as<T>();  // [total_q, hq, dqk], contiguous; in decode one query per unit, units in token order
    p_.o = out.o.as<T>();
    p_.lse = out.lse.as<float>();
    p_.maybe_alibi_slopes = const_cast<float*>(slopes);
    p_.logits_soft_cap = c.attention.soft_cap.value_or(0.0);
    p_.sm_scale = c.sm_scale_or_default() * sc.k;  // double, as the wrappers: sm_scale *= k_scale (1 without FP8)
    p_.num_qo_heads = c.num_qo_heads;
    p_.q_stride_n = c.num_qo_heads * c.head_dim_qk;
    p_.q_stride_h = c.head_dim_qk;
    // the plain variant has no window predicate, but the kernel still skips KV tiles left of
    // params.window_left: it must be -1 there
    p_.window_left = v == FiVariant::kPlain ? -1 : window_left(c);
    char* iw = ws.int_ws.as<char>();
    p_.request_indices = fi::GetPtrFromBaseOffset<FiId>(iw, info.request_indices_offset);
    p_.kv_tile_indices = fi::GetPtrFromBaseOffset<FiId>(iw, info.kv_tile_indices_offset);
    p_.o_indptr = fi::GetPtrFromBaseOffset<FiId>(iw, info.o_indptr_offset);
    p_.kv_chunk_size_ptr = fi::GetPtrFromBaseOffset<FiId>(iw, info.kv_chunk_size_ptr_offset);
    if (info.split_kv) {
      tmp_v_ = fi::GetPtrFromBaseOffset<T>(ws.float_ws.as<void>(), info.v_offset);  // partials in the dtype
      tmp_s_ = fi::GetPtrFromBaseOffset<float>(ws.float_ws.as<void>(), info.s_offset);
    }
    p_.padded_batch_size = static_cast<uint32_t>(info.padded_batch_size);
  }

  // The instance of this head dim and dtype; a throw naming the launch where the build has none.
  const FiKernels<T, KV>& kernels() const {
    if (!kernels_) throw cuda::CudaError("no instance for " + name_);
    return *kernels_;
  }
  // After the kernel (and its merge; `st` its status): with an FP8 cache whose v_scale is not 1, the
  // wrapper's `out *= v_scale` (the wrappers skip it for a float 1.0); then the checks, a sync when `sync`.
  void finish(cudaError_t st, bool sync) {
    check_fi_launch(st, name_, false);
    if (v_scale_ != 1.0) scale_output(p_.o, o_elems_, dtype_, static_cast<float>(v_scale_), stream_);
    check_fi_launch(cudaSuccess, name_ + (v_scale_ != 1.0 ? " and out *= v_scale" : ""), sync);
  }

  cudaStream_t stream_ = nullptr;
  DType dtype_;
  double v_scale_ = 1.0;
  int64_t o_elems_ = 0;
  Params p_;
  T* tmp_v_ = nullptr;
  float* tmp_s_ = nullptr;
  const FiKernels<T, KV>* kernels_ = nullptr;
  std::string name_;  // the kernel and its launch shape, for error messages
};

}  // namespace attnscope::peers::flashinfer
