// Chunked local attention as vLLM's virtual batches (make_local_attention_virtual_batches):
// each request is cut into one causal virtual request per attention chunk its new tokens touch.
#pragma once

#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/paging.h"

namespace attnscope {

struct VirtualBatch {
  int request = 0;               // original request
  int q_begin = 0;               // first query of this virtual batch, index within the request's queries
  int q_len = 0;                 // queries
  int kv_begin = 0;              // chunk start: absolute key position of the first key
  int kv_len = 0;                // keys [kv_begin, kv_begin + kv_len)
  std::vector<int> block_table;  // [chunk / page_size] physical pages of the chunk (vLLM's sliced
                                 // table; entries past the request's pages are clipped to its last)
};

struct VirtualBatches {
  int chunk = 0;  // attention chunk size c, tokens
  std::vector<VirtualBatch> batches;
  std::vector<int> cu_q;           // [batches + 1] cumulative queries
  std::vector<int> request_first;  // [num_requests + 1] first virtual batch of each request
};

// Requires chunk % page_size == 0 (validated by validate_case).
VirtualBatches make_virtual_batches(const CaseSpec& c, const PageTable& pt);

}  // namespace attnscope
