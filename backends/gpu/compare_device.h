// The comparison's order-defined pass on a device (model/include/attnscope/diff_chunks.h): a warp per
// chunk, lane i % 32 summing its elements in index order, the lanes folded by fold_lanes, so the
// partials are host_diff_pass's bit for bit; only they and the error-map cells are downloaded.
#pragma once

#include <cstdint>
#include <vector>

#include "attnscope/compare.h"

namespace attnscope::cuda {

// O of both sides ([total_q, heads, head_dim_vo] floats on the current device), their LSE ([total_q,
// heads], both null where a side has none), and the rows both computed (host [total_q], empty = all).
// Throws CudaError.
DiffPass device_pass(const CaseSpec& c, const float* a_o, const float* b_o, const float* a_lse, const float* b_lse,
                     const std::vector<uint8_t>& ok, double rtol, double atol);

}  // namespace attnscope::cuda
