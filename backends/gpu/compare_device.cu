// The comparison's pass on the device (compare_device.h) and the app's entry to it (device_compare.h).
#include <algorithm>
#include <limits>
#include <mutex>

#include "attnscope/device_compare.h"
#include "compare_device.h"
#include "device_result.h"

namespace attnscope::cuda {

namespace {

constexpr int kWarps = 4;  // warps (chunks in flight) per block

__global__ void __launch_bounds__(kWarps * 32)
    diff_chunks_kernel(const float* a, const float* b, int64_t n, int64_t per_token, const uint8_t* ok, int t, double rtol,
                       double atol, DiffPartial* out, int64_t chunks) {
  __shared__ DiffPartial lanes[kWarps][kDiffLanes];
  const int w = threadIdx.x / kDiffLanes, lane = threadIdx.x % kDiffLanes;
  const DType dt = static_cast<DType>(t);
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kWarps + w; k < chunks; k += static_cast<int64_t>(gridDim.x) * kWarps) {
    DiffPartial s = empty_partial();
    const int64_t hi = (k + 1) * kDiffChunk < n ? (k + 1) * kDiffChunk : n;
    for (int64_t i = k * kDiffChunk + lane; i < hi; i += kDiffLanes)
      if (!ok || ok[i / per_token]) diff_element(s, dt, a[i], b[i], i, rtol, atol);
    lanes[w][lane] = s;
    __syncwarp();
    if (lane == 0) {
      fold_lanes(lanes[w]);
      out[k] = lanes[w][0];
    }
    __syncwarp();
  }
}

// A warp per (token, head) row: its error-map cell, NaN where the row is not compared.
__global__ void error_map_kernel(const float* a, const float* b, int64_t rows, int hq, int dv, const uint8_t* ok, float* map) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
    if (ok && !ok[r / hq]) {
      if (lane == 0) map[r] = __int_as_float(0x7fc00000);
      continue;
    }
    float worst = 0;
    for (int d = lane; d < dv; d += 32) worst = error_cell(worst, a[r * dv + d], b[r * dv + d]);
    // cells are never NaN (error_cell makes a NaN difference +inf), so a maximum in any order
    for (int off = 16; off > 0; off /= 2) worst = fmaxf(worst, __shfl_down_sync(0xffffffffu, worst, off));
    if (lane == 0) map[r] = worst;
  }
}

std::vector<DiffPartial> chunks(const float* a, const float* b, int64_t n, int64_t per_token, const uint8_t* ok, DType t,
                                double rtol, double atol) {
  const int64_t nc = (n + kDiffChunk - 1) / kDiffChunk;
  if (nc == 0) return {};
  DeviceBuffer out(nc * sizeof(DiffPartial));
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((nc + kWarps - 1) / kWarps, 65535)));
  diff_chunks_kernel<<<grid, kWarps * 32>>>(a, b, n, per_token, ok, static_cast<int>(t), rtol, atol, out.as<DiffPartial>(), nc);
  check_launch("diff_chunks_kernel", grid, dim3(kWarps * 32), 0, false);
  return out.to_host<DiffPartial>(nc);
}

}  // namespace

DiffPass device_pass(const CaseSpec& c, const float* a_o, const float* b_o, const float* a_lse, const float* b_lse,
                     const std::vector<uint8_t>& ok, double rtol, double atol) {
  const int Hq = c.num_qo_heads, Dv = c.head_dim_vo;
  const int64_t T = c.total_q(), rows = T * Hq;
  const DeviceBuffer d_ok = DeviceBuffer::from(ok);
  const uint8_t* okp = ok.empty() ? nullptr : d_ok.as<uint8_t>();
  DiffPass p;
  p.o = chunks(a_o, b_o, rows * Dv, int64_t{Hq} * Dv, okp, c.dtype, rtol, atol);
  if (a_lse && b_lse) p.lse = chunks(a_lse, b_lse, rows, Hq, okp, DType::kFp32, 0, 0);
  if (rows > 0) {
    DeviceBuffer map(rows * sizeof(float));
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((rows + 7) / 8, 65535)));
    error_map_kernel<<<grid, 256>>>(a_o, b_o, rows, Hq, Dv, okp, map.as<float>());
    check_launch("error_map_kernel", grid, dim3(256), 0, false);
    p.error_map = map.to_host<float>(rows);
  }
  for (int64_t t = 0; t < T; ++t) p.rows_compared += ok.empty() || ok[t] ? Hq : 0;
  return p;
}

}  // namespace attnscope::cuda

namespace attnscope {

std::optional<DiffPass> device_diff_pass(const CaseSpec& c, const Result& a, const Result& b, double rtol, double atol) {
  const auto* da = dynamic_cast<const cuda::DeviceResult*>(a.device.get());
  const auto* db = dynamic_cast<const cuda::DeviceResult*>(b.device.get());
  if (!da || !db || da->device() != db->device()) return std::nullopt;
  const int64_t rows = c.total_q() * c.num_qo_heads, n = rows * c.head_dim_vo;
  // the copies are of these host vectors (attach_device_copy checks the sizes too)
  for (const auto* d : {da, db})
    if (d->o_elems() != n || (d->lse_elems() != 0 && d->lse_elems() != rows)) return std::nullopt;
  if (static_cast<int64_t>(a.o.size()) != n || static_cast<int64_t>(b.o.size()) != n ||
      da->lse_elems() != static_cast<int64_t>(a.lse.size()) || db->lse_elems() != static_cast<int64_t>(b.lse.size()))
    return std::nullopt;
  // both at once (std::lock): another thread may be comparing the pair the other way round
  std::unique_lock<std::mutex> la(da->mutex(), std::defer_lock), lb;
  if (db != da) {
    lb = std::unique_lock<std::mutex>(db->mutex(), std::defer_lock);
    std::lock(la, lb);
  } else {
    la.lock();
  }
  if (da->dropped() || db->dropped()) return std::nullopt;
  std::vector<uint8_t> ok;
  if (!a.row_valid.empty() || !b.row_valid.empty()) {
    ok.resize(c.total_q());
    for (int64_t t = 0; t < c.total_q(); ++t) ok[t] = a.row_ok(t) && b.row_ok(t);
  }
  int prev = 0;
  if (cudaGetDevice(&prev) != cudaSuccess) return std::nullopt;
  try {
    cuda::check(cudaSetDevice(da->device()), "cudaSetDevice");
    const bool lse = da->lse_elems() && db->lse_elems();
    DiffPass p = cuda::device_pass(c, da->o(), db->o(), lse ? da->lse() : nullptr, lse ? db->lse() : nullptr, ok, rtol, atol);
    cudaSetDevice(prev);
    return p;
  } catch (const cuda::CudaError&) {
    // the host computes the same bits: a device that fails here costs time, never an answer
    cudaGetLastError();
    cudaSetDevice(prev);
    return std::nullopt;
  }
}

DiffPassFn diff_pass_where_the_data_is(const CaseSpec& c) {
  return [c](const Result& a, const Result& b, double rtol, double atol) {
    if (auto p = device_diff_pass(c, a, b, rtol, atol)) return std::move(*p);
    return host_diff_pass(c, a, b, rtol, atol);
  };
}

}  // namespace attnscope
