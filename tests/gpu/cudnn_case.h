// The random cases cuDNN runs, shared by the cudnn.sdpa GPU tests (test_cudnn.cpp, test_cudnn_mla.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "attnscope/case_spec.h"
#include "case_gen.h"

namespace attnscope::testing {

// A random case made runnable by cuDNN, keeping everything cuDNN can express: head dims cuDNN
// runs, fp16/bf16, no soft-cap, one document, prefixes inside the causal range, ALiBi only where
// q_len == kv_len.
inline CaseSpec cudnn_ok(CaseSpec c, uint64_t seed) {
  const int dims[] = {32, 64, 96, 128, 256};
  set_head_dim(c, dims[seed % 5]);
  if (c.dtype == DType::kFp32) c.dtype = seed % 2 ? DType::kFp16 : DType::kBf16;
  c.attention.soft_cap.reset();
  if (c.attention.alibi) {
    if (c.attention.causal && !c.attention.local_chunk)
      for (auto& r : c.requests) r.q_len = r.kv_len;
    else
      c.attention.alibi = false;
  }
  for (auto& r : c.requests) {
    if (r.doc_starts.size() > 1) r.doc_starts = {0};
    if (r.prefix_len) r.prefix_len = std::min(*r.prefix_len, r.kv_len - r.q_len + 1);
  }
  c.data.outlier_channels.clear();
  validate_case(c);
  return c;
}

}  // namespace attnscope::testing
