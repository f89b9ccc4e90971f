#include "fi_topk.h"

// topk.cuh uses math::ptx_rcp without including math.cuh (FlashInfer includes sampling.cuh first)
#include <flashinfer/math.cuh>
#include <flashinfer/topk.cuh>
#include <stdexcept>
#include <string>

#include "cuda_util.h"

namespace attnscope::peers::flashinfer {

std::vector<int> flashinfer_top_k(const std::vector<float>& rows, const std::vector<int>& lengths, int stride, int top_k) {
  const int n = static_cast<int>(lengths.size());
  if (n == 0) return {};
  if (rows.size() != static_cast<size_t>(n) * stride) throw std::invalid_argument("flashinfer_top_k: rows is not n x stride");
  std::vector<int> offsets(n, 0);  // the transform adds a row's offset to each index: 0 keeps positions
  cuda::DeviceBuffer d_rows = cuda::DeviceBuffer::from(rows), d_len = cuda::DeviceBuffer::from(lengths),
                     d_off = cuda::DeviceBuffer::from(offsets);
  cuda::DeviceBuffer d_out(static_cast<size_t>(n) * top_k * sizeof(int));
  cuda::check(cudaMemset(d_out.as<void>(), 0x7f, d_out.bytes()), "cudaMemset (poison the top-k output)");
  // the radix path's per-row state; the filtered path (taken with a tie-break mode) does not read it
  cuda::DeviceBuffer d_state(static_cast<size_t>(n) * sizeof(::flashinfer::sampling::RadixRowState));
  cuda::check(cudaMemset(d_state.as<void>(), 0, d_state.bytes()), "cudaMemset (top-k row states)");
  const cudaError_t st = ::flashinfer::sampling::TopKRaggedTransformDispatch<float, int>(
      d_rows.as<float>(), d_out.as<int>(), d_off.as<int>(), d_len.as<int>(), nullptr, static_cast<uint32_t>(n),
      static_cast<uint32_t>(top_k), static_cast<uint32_t>(stride), d_state.as<::flashinfer::sampling::RadixRowState>(),
      /*deterministic=*/false, ::flashinfer::sampling::TopKTieBreak::Small);
  if (st == cudaErrorNotSupported)
    throw std::runtime_error(
        "FlashInfer's top-k with a tie-break mode takes top_k <= 2048 on a GPU with 128 KiB of "
        "shared memory per SM (TopKRaggedTransformDispatch: cudaErrorNotSupported)");
  cuda::check(st, "FlashInfer TopKRaggedTransformDispatch");
  cuda::check(cudaDeviceSynchronize(), "FlashInfer TopKRaggedTransformDispatch");
  return d_out.to_host<int>(static_cast<size_t>(n) * top_k);
}

}  // namespace attnscope::peers::flashinfer
