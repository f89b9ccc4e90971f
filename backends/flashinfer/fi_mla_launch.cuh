// The flashinfer.mla kernel units' shared part: FlashInfer's MLAParams filled from attnscope's absorbed
// MLA pools and the plan's offsets. Included by fi_mla_fa2.cu and fi_mla_sm90.cu only (FlashInfer headers).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <flashinfer/attention/mla_params.cuh>
#include <flashinfer/fastdiv.cuh>

#include "fi_mla_kernels.h"

namespace attnscope::peers::flashinfer {

template <class T>
::flashinfer::MLAParams<T, T, T, int32_t> mla_params(const MlaLaunchArgs& a) {
  using Id = int32_t;
  ::flashinfer::MLAParams<T, T, T, Id> p{};
  char* iw = static_cast<char*>(a.int_ws);
  auto at = [&](int field) { return reinterpret_cast<Id*>(iw + a.info[field]); };
  // Q rows are [W_uk^T q_nope ; q_pe] (576 dims): q_nope is the row's first 512, q_pe the last 64
  p.q_nope = static_cast<T*>(a.q);
  p.q_pe = static_cast<T*>(a.q) + kMlaRank;
  // the K pool's rows are [ckv ; kpe]: both caches are views of it (ckv is also V)
  p.ckv = static_cast<T*>(a.kv);
  p.kpe = static_cast<T*>(a.kv) + kMlaRank;
  p.partial_o = static_cast<T*>(a.partial_o);
  p.partial_lse = a.partial_lse;
  p.final_o = static_cast<T*>(a.o);
  p.final_lse = a.lse;
  p.q_indptr = at(kQIndptr);
  p.kv_indptr = at(kKvIndptr);
  p.partial_indptr = at(kPartialIndptr);
  p.merge_packed_offset_start = at(kMergePackedStart);
  p.merge_packed_offset_end = at(kMergePackedEnd);
  p.merge_partial_packed_offset_start = at(kMergePartialStart);
  p.merge_partial_packed_offset_end = at(kMergePartialEnd);
  p.merge_partial_stride = at(kMergePartialStride);
  p.kv_indices = const_cast<Id*>(a.kv_indices);
  p.q_len = at(kQLen);
  p.kv_len = at(kKvLen);
  p.q_start = at(kQStart);
  p.kv_start = at(kKvStart);
  p.kv_end = at(kKvEnd);
  p.work_indptr = at(kWorkIndptr);
  p.block_size = ::flashinfer::uint_fastdiv(static_cast<uint32_t>(a.page_size));
  p.num_heads = ::flashinfer::uint_fastdiv(static_cast<uint32_t>(a.num_heads));
  const uint32_t row = kMlaRank + kMlaRope;
  p.q_nope_stride_n = p.q_pe_stride_n = static_cast<uint32_t>(a.num_heads) * row;
  p.q_nope_stride_h = p.q_pe_stride_h = row;
  p.ckv_stride_page = p.kpe_stride_page = static_cast<uint32_t>(a.page_size) * row;
  p.ckv_stride_n = p.kpe_stride_n = row;
  p.o_stride_n = static_cast<uint32_t>(a.num_heads) * kMlaRank;
  p.o_stride_h = kMlaRank;
  p.sm_scale = a.sm_scale;
  p.return_lse_base_on_e = false;  // base 2, as the family's other kernels (download_outputs converts)
  return p;
}

}  // namespace attnscope::peers::flashinfer
