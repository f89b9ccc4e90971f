// cuda.merge (cuda_merge.h): attnscope's merge of partitioned runs' partials on the device. One warp
// per row, its lanes over the row's values; each lane folds the partials in order 0, 1, ... with
// merge_weights<true> and merge_fold_element, as merge_fold does on the host, so every bit is the host's.
// Compiled with -fmad=false (CMakeLists.txt) as well: no multiply here may be fused into an add.
#include <stdexcept>
#include <string>

#include "attnscope/partition.h"
#include "cuda_merge.h"
#include "device_check.h"
#include "device_partials.h"
#include "gpu_timer.h"

namespace attnscope::cuda {

namespace {

struct MergeKernelParams {
  const float* o[kMaxMergeParts];
  const float* lse[kMaxMergeParts];
  int parts;
  int64_t rows;
  int dv;
  DType dt;
  LseBase native, read;
  float* o_out;
  float* lse_out;
};

constexpr int kPerLane = 4;  // values per lane and pass: 128 of a row per pass of the warp

__global__ void merge_partials_kernel(const MergeKernelParams p) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.rows) return;
  const size_t at = static_cast<size_t>(row) * p.dv;
  for (int base = 0; base < p.dv; base += 32 * kPerLane) {
    float acc[kPerLane];
    float lse2 = merge_input_lse2(p.lse[0][row], p.native, p.read);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = base + lane + 32 * i;
      acc[i] = d < p.dv ? p.o[0][at + d] : 0.f;
    }
    for (int k = 1; k < p.parts; ++k) {
      // merge_fold's step: its weights, then its element arithmetic on this lane's values
      float wa, wb, l;
      merge_weights<true>(lse2, merge_input_lse2(p.lse[k][row], p.native, p.read), &wa, &wb, &l);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int d = base + lane + 32 * i;
        if (d < p.dv) acc[i] = merge_fold_element(wa, acc[i], wb, p.o[k][at + d]);
      }
      lse2 = l;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = base + lane + 32 * i;
      if (d < p.dv) p.o_out[at + d] = round_to(p.dt, acc[i]);
    }
    if (base == 0 && lane == 0) p.lse_out[row] = lse2_to_e(lse2);
  }
}

std::string base_text(const MergeInput& in) {
  return std::string("partials' LSE read in base ") + lse_base_name(in.read) + " (their backend's: " + lse_base_name(in.native) +
         ")";
}

}  // namespace

void launch_merge_partials(const std::vector<const float*>& o, const std::vector<const float*>& lse, int64_t rows, int dv,
                           DType dt, LseBase native, LseBase read, float* o_out, float* lse_out, cudaStream_t stream) {
  if (o.size() != lse.size() || o.empty() || o.size() > static_cast<size_t>(kMaxMergeParts))
    throw std::invalid_argument("cuda.merge takes 1 to " + std::to_string(kMaxMergeParts) + " partials, not " +
                                std::to_string(o.size()));
  if (rows <= 0) return;
  MergeKernelParams p{};
  for (size_t k = 0; k < o.size(); ++k) {
    p.o[k] = o[k];
    p.lse[k] = lse[k];
  }
  p.parts = static_cast<int>(o.size());
  p.rows = rows;
  p.dv = dv;
  p.dt = dt;
  p.native = native;
  p.read = read;
  p.o_out = o_out;
  p.lse_out = lse_out;
  const dim3 block(128), grid(static_cast<unsigned>((rows * 32 + 127) / 128));
  merge_partials_kernel<<<grid, block, 0, stream>>>(p);
  check_launch("merge_partials_kernel", grid, block, 0, false);
}

namespace {

// The host partials uploaded to the current device.
std::shared_ptr<const GpuPartials> upload(const MergeInput& in, int device) {
  auto g = std::make_shared<GpuPartials>(device, static_cast<int>(in.parts.size()), in.rows, in.dv);
  for (size_t k = 0; k < in.parts.size(); ++k) {
    check(cudaMemcpy(g->o(static_cast<int>(k)), in.parts[k].o, static_cast<size_t>(in.rows) * in.dv * 4, cudaMemcpyHostToDevice),
          "cudaMemcpy (partial O)");
    check(cudaMemcpy(g->lse(static_cast<int>(k)), in.parts[k].lse, static_cast<size_t>(in.rows) * 4, cudaMemcpyHostToDevice),
          "cudaMemcpy (partial LSE)");
  }
  return g;
}

MergeRun merge_on(const MergeInput& in) {
  MergeRun r;
  const auto* given = dynamic_cast<const GpuPartials*>(in.on_device.get());
  const bool use_given =
      given && given->parts() == static_cast<int>(in.parts.size()) && given->rows() == in.rows && given->dv() == in.dv;
  const int device = use_given ? given->device() : in.device;
  ScopedDevice on(device);
  std::shared_ptr<const GpuPartials> held;
  const GpuPartials* src = given;
  if (!use_given) {
    held = upload(in, device);
    src = held.get();
  }
  DeviceBuffer o(static_cast<size_t>(in.rows) * in.dv * 4), lse(static_cast<size_t>(in.rows) * 4);
  GpuEventTimer timer;
  timer.start();
  launch_merge_partials(src->o_ptrs(), src->lse_ptrs(), in.rows, in.dv, in.dtype, in.native, in.read, o.as<float>(),
                        lse.as<float>(), nullptr);
  r.device_ms = timer.stop();
  check_launch("merge_partials_kernel", dim3(), dim3(), 0);
  r.o = o.to_host<float>(static_cast<size_t>(in.rows) * in.dv);
  r.lse = lse.to_host<float>(static_cast<size_t>(in.rows));
  r.message = base_text(in) + "; on GPU " + std::to_string(device) +
              (use_given ? ", from the partials already there" : ", the host partials uploaded");
  return r;
}

}  // namespace

MergeRun run_cuda_merge(const MergeInput& in) {
  MergeRun r;
  r.id = "cuda.merge";
  if (std::string why = device_check(); !why.empty()) {
    r.status = status_of_reason(why);
    r.message = why;
    return r;
  }
  if (in.parts.empty() || in.parts.size() > static_cast<size_t>(kMaxMergeParts) || in.dv <= 0) {
    r.status = Status::kUnsupported;
    r.message = "cuda.merge takes 1 to " + std::to_string(kMaxMergeParts) + " partials of at least one value";
    return r;
  }
  try {
    MergeRun m = merge_on(in);
    m.id = r.id;
    return m;
  } catch (const std::exception& e) {
    cudaGetLastError();
    r.status = Status::kError;
    r.message = e.what();
    return r;
  }
}

std::vector<Merger> cuda_mergers() {
  return {{.id = "cuda.merge",
           .summary = "attnscope's merge on the GPU: merge_partials' fold (partials in order 0, 1, ..., portable exp2 / "
                      "log2, fma per value, one rounding to the dtype), bit-identical to the host; reads LSE in the "
                      "case's merge base",
           .gpu = true,
           .run = run_cuda_merge}};
}

}  // namespace attnscope::cuda
