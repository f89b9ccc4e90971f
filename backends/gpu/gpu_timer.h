// The GPU timing of every CUDA backend: one pair of CUDA events (destroyed by the destructor, also
// when a timed launch throws) and the one protocol that fills a Result's Timing with it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "attnscope/backend.h"
#include "cuda_util.h"

namespace attnscope::cuda {

// Two events on the default stream around the launches between start() and stop().
class GpuEventTimer {
 public:
  GpuEventTimer() {
    check(cudaEventCreate(&start_), "cudaEventCreate");
    if (cudaError_t e = cudaEventCreate(&stop_); e != cudaSuccess) {
      cudaEventDestroy(start_);
      check(e, "cudaEventCreate");
    }
    live_count().fetch_add(1);
  }
  ~GpuEventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    live_count().fetch_sub(1);
  }
  GpuEventTimer(const GpuEventTimer&) = delete;
  GpuEventTimer& operator=(const GpuEventTimer&) = delete;

  void start() { check(cudaEventRecord(start_), "cudaEventRecord"); }
  // Milliseconds since start(), after the launches in between have finished.
  float stop() {
    check(cudaEventRecord(stop_), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms;
  }

  // How many timers hold events now (the GPU tests check that none is left after a throw).
  static std::atomic<int>& live_count() {
    static std::atomic<int> n{0};
    return n;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// The median of n launches of an instantiated CUDA graph on `stream`, each between two events.
inline double graph_launch_median_ms(cudaGraphExec_t exec, cudaStream_t stream, int n) {
  cudaEvent_t a = nullptr, b = nullptr;
  check(cudaEventCreate(&a), "cudaEventCreate");
  if (cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
    cudaEventDestroy(a);
    check(e, "cudaEventCreate");
  }
  std::vector<float> ms;
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < n && e == cudaSuccess; ++i) {
    float x = 0;
    if ((e = cudaEventRecord(a, stream)) != cudaSuccess || (e = cudaGraphLaunch(exec, stream)) != cudaSuccess ||
        (e = cudaEventRecord(b, stream)) != cudaSuccess || (e = cudaEventSynchronize(b)) != cudaSuccess ||
        (e = cudaEventElapsedTime(&x, a, b)) != cudaSuccess)
      break;
    ms.push_back(x);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  check(e, "timed graph replays");
  if (ms.empty()) return 0;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Timing's summary of per-launch times: median (the upper one of an even count), min, max, count.
inline void summarize_device_ms(std::vector<float> ms, Timing* t) {
  if (ms.empty()) return;
  std::sort(ms.begin(), ms.end());
  t->device_ms = ms[ms.size() / 2];
  t->device_ms_min = ms.front();
  t->device_ms_max = ms.back();
  t->reps = static_cast<int>(ms.size());
}

// The protocol of every GPU backend: kWarmups untimed calls of once(), then opt.bench_reps calls,
// each alone between the timer's events (the launches only: the caller plans before), stopping early
// when opt.cancel is set; then settle() (the loop's pending errors: a sync and check); the times go to
// *t. Nothing when opt.bench_reps <= 0. An exception from once() or settle() leaves *t untouched.
inline constexpr int kWarmups = 3;
template <class Once, class Settle>
void time_launches(const RunOptions& opt, Once&& once, Settle&& settle, Timing* t) {
  if (opt.bench_reps <= 0) return;
  GpuEventTimer timer;
  for (int i = 0; i < kWarmups; ++i) once();
  std::vector<float> ms;
  for (int i = 0; i < opt.bench_reps; ++i) {
    if (opt.cancel && opt.cancel->load()) break;
    timer.start();
    once();
    ms.push_back(timer.stop());
  }
  settle();
  summarize_device_ms(std::move(ms), t);
}

}  // namespace attnscope::cuda
