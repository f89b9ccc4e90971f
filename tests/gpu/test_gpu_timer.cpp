// cuda::time_launches and GpuEventTimer (gpu_timer.h), the one GPU timing of cuda.flash, cudnn.sdpa and
// flashinfer.*: warm-ups, then each rep timed alone; Timing's median (upper), min, max and count; an
// early stop on cancel; and no CUDA events left behind when a timed launch throws (cuda.flash's own
// loop, before the shared timer, leaked its two). Built only with the CUDA backends.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "attnscope/backend.h"
#include "attnscope/device.h"
#include "gpu_timer.h"
#include "require.h"

using namespace attnscope;
using cuda::GpuEventTimer;

namespace {

// one small device operation on the default stream, the stream the timer's events are recorded on
struct Work {
  cuda::DeviceBuffer buf{1 << 20};
  int calls = 0;
  void operator()() {
    ++calls;
    cuda::check(cudaMemsetAsync(buf.as<void>(), calls & 0xff, buf.bytes()), "cudaMemsetAsync");
  }
};

void device_sync() { cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

}  // namespace

TEST(GpuTimer, SummaryIsTheUpperMedianMinMaxAndCount) {
  Timing t;
  cuda::summarize_device_ms({3.f, 1.f, 4.f, 2.f}, &t);
  EXPECT_EQ(t.device_ms, 3.f);
  EXPECT_EQ(t.device_ms_min, 1.f);
  EXPECT_EQ(t.device_ms_max, 4.f);
  EXPECT_EQ(t.reps, 4);
  Timing none;
  none.device_ms = 7;
  cuda::summarize_device_ms({}, &none);  // no reps: Timing untouched
  EXPECT_EQ(none.device_ms, 7);
  EXPECT_EQ(none.reps, 0);
}

TEST(GpuTimer, WarmsUpThenTimesEachRep) {
  REQUIRE_DEVICE();
  Work work;
  int settled = 0;
  RunOptions opt;
  opt.bench_reps = 7;
  Timing t;
  cuda::time_launches(
      opt, [&] { work(); },
      [&] {
        ++settled;
        device_sync();
      },
      &t);
  EXPECT_EQ(work.calls, cuda::kWarmups + 7);
  EXPECT_EQ(settled, 1);
  EXPECT_EQ(t.reps, 7);
  EXPECT_GT(t.device_ms_min, 0.0);
  EXPECT_LE(t.device_ms_min, t.device_ms);
  EXPECT_LE(t.device_ms, t.device_ms_max);
  EXPECT_EQ(GpuEventTimer::live_count().load(), 0);
}

TEST(GpuTimer, NoRepsMeansNoLaunchAndNoTiming) {
  REQUIRE_DEVICE();
  Work work;
  Timing t;
  cuda::time_launches(
      RunOptions{}, [&] { work(); }, [] { FAIL() << "settled without reps"; }, &t);
  EXPECT_EQ(work.calls, 0);
  EXPECT_EQ(t.reps, 0);
  EXPECT_EQ(t.device_ms, 0.0);
}

TEST(GpuTimer, CancelStopsTheReps) {
  REQUIRE_DEVICE();
  Work work;
  std::atomic<bool> cancel{false};
  RunOptions opt;
  opt.bench_reps = 10;
  opt.cancel = &cancel;
  Timing t;
  cuda::time_launches(
      opt,
      [&] {
        work();
        if (work.calls == cuda::kWarmups + 2) cancel = true;  // after the second timed rep
      },
      device_sync, &t);
  EXPECT_EQ(work.calls, cuda::kWarmups + 2);
  EXPECT_EQ(t.reps, 2);
}

TEST(GpuTimer, ALaunchThatThrowsLeavesNoEventsAndNoTiming) {
  REQUIRE_DEVICE();
  const int before = GpuEventTimer::live_count().load();
  Work work;
  RunOptions opt;
  opt.bench_reps = 5;
  Timing t;
  EXPECT_THROW(cuda::time_launches(
                   opt,
                   [&] {
                     work();
                     if (work.calls == cuda::kWarmups + 3) throw cuda::CudaError("kernel x: a launch failed");
                   },
                   device_sync, &t),
               cuda::CudaError);
  EXPECT_EQ(GpuEventTimer::live_count().load(), before);
  EXPECT_EQ(t.reps, 0);
  device_sync();  // the device is still usable
}
