// The input generator's shared parts (device_workload.cu, device_mla.cu): the parameters every
// generation kernel takes and the small device helpers they share.
#pragma once

#include <algorithm>
#include <cstdint>

#include "attnscope/case_spec.h"
#include "attnscope/types.h"

namespace attnscope::cuda::gen {

__device__ inline int find_request(const int64_t* indptr, int n, int64_t t) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (indptr[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__device__ inline void store(void* base, int64_t i, float v, DType t) {
  if (t == DType::kFp32)
    static_cast<float*>(base)[i] = v;
  else if (t == DType::kFp16)
    static_cast<uint16_t*>(base)[i] = f32_to_f16_bits(v);
  else
    static_cast<uint16_t*>(base)[i] = f32_to_bf16_bits(v);
}

struct GenParams {
  const uint64_t* seeds;    // [requests]
  const int64_t* q_indptr;  // [requests + 1]
  const int* page_owner;    // [num_pages] request or < 0
  const int* page_pos;      // [num_pages] page index inside its request
  const int* kv_len;        // [requests]
  const int* q_offset;      // [requests] RequestSpec::q_offset
  const double* k_scale;    // [head_dim_qk] outlier scale per channel
  int num_requests, hq, hk, dq, dv, page_size, num_pages;
  KvLayout layout;
  double mean, std;
  DType dt;
  bool poison;
  KeySource keys;        // the case's key numbering (case_spec.h): partition sub-cases, cascade
  uint64_t shared_seed;  // CaseSpec::shared_prefix_seed()
};

// The generator's position and stream of request r's key k, as CaseSpec::key_seed on the host.
__device__ inline uint64_t key_stream(const GenParams& p, int r, int k, int64_t* pos) {
  *pos = p.keys.position(k);
  return *pos < p.keys.shared_prefix ? p.shared_seed : p.seeds[r];
}

inline dim3 grid_for(int64_t n) { return dim3(static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535 * 4))); }

}  // namespace attnscope::cuda::gen
