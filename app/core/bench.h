// Benchmark of GPU backends on a case: CUDA-event timings, TFLOP/s from the allowed (q, k) pairs,
// bytes moved, share of the device's measured copy bandwidth, host plan time.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscope/plan.h"
#include "case_json.h"

namespace attnscope {

struct BenchRow {
  std::string backend;
  std::string status;  // "ok" or the reason it did not run
  std::string note;    // what the backend says of an ok run (e.g. the kernel that ran)
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int reps = 0;
  double tflops = 0;      // 2 x pairs x heads x (d_qk + d_vo) / time
  double gbps = 0;        // minimum bytes (Q, K, V of live tokens, O) / time
  double kv_gbps = 0;     // K and V bytes of live tokens / time (the decode target's unit)
  double copy_share = 0;  // gbps / measured device copy bandwidth
};

struct BenchReport {
  std::string case_name;
  std::string device;  // name of device 0, or why none
  bool device_found = false;
  double copy_gbps = 0;  // measured device-to-device copy bandwidth (read + write)
  double plan_us = 0;
  int64_t allowed_pairs = 0;  // per head
  double flops = 0, bytes = 0, kv_bytes = 0;
  std::vector<BenchRow> rows;
};

// The work a case asks for, in the units every rate of attnscope is counted in (bench, sweep,
// the Timing tab): allowed (q, k) pairs per head; FLOPs = 2 x pairs x qo heads x (d_qk + d_vo); the
// least bytes moved = K/V of the live tokens + Q and O.
struct WorkCounts {
  int64_t allowed_pairs = 0;
  double flops = 0, bytes = 0, kv_bytes = 0;
};
WorkCounts work_counts(const CaseSpec& c, const Plan& p);

// gpus: the GPUs a /parallel case's ranks run on (RunOptions::partition_gpus; 0 = every visible one)
BenchReport run_bench(const CaseSpec& c, const std::vector<std::string>& backends, int reps, int gpus = 0);
nlohmann::ordered_json bench_to_json(const BenchReport& r);

}  // namespace attnscope
