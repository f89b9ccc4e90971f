// FlashInfer's top-k selection on the GPU (topk.cuh), run beside attnscope's (sparse.h select_top_k) on
// the same score rows: TopKRaggedTransformDispatch with TopKTieBreak::Small, which breaks ties at the
// k-th score towards the smaller index, attnscope's rule (docs/dsa.md section 3).
#pragma once

#include <vector>

namespace attnscope::peers::flashinfer {

// rows: [n][stride] fp32 scores; row i's candidates are its first lengths[i] entries (1 <= lengths[i] <=
// stride). Returns [n][top_k] positions within the row, a row's kept positions then -1 (in FlashInfer's
// order, not by score). Throws std::runtime_error naming FlashInfer's refusal (top_k above 2048, a GPU
// without the 128 KiB of shared memory its filtered kernel needs) or a CUDA error.
std::vector<int> flashinfer_top_k(const std::vector<float>& rows, const std::vector<int>& lengths, int stride, int top_k);

}  // namespace attnscope::peers::flashinfer
