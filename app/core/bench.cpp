// attnscope-cli bench.
#include "bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "attnscope/device.h"
#include "attnscope/partition.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "attnscope/workload.h"
#include "cuda_graph_run.h"
#include "partition_run.h"

namespace attnscope {

WorkCounts work_counts(const CaseSpec& c, const Plan& p) {
  WorkCounts w;
  const int eb = dtype_bytes(c.dtype);
  w.allowed_pairs = allowed_pairs(c, p);
  w.flops = 2.0 * static_cast<double>(w.allowed_pairs) * c.num_qo_heads * (c.head_dim_qk + c.head_dim_vo);
  // an FP8 cache moves one byte per element (plus its per-token scales, K and V); FP8 attention's Q too
  const double kv_eb = c.fp8_kv() ? 1.0 : eb, q_eb = c.fp8_attention ? 1.0 : eb;
  const double rows = static_cast<double>(c.total_kv()) * c.num_kv_heads;
  const bool token_scales = c.fp8_kv() && c.kv_cache.scales.granularity == ScaleGranularity::kToken;
  w.kv_bytes = rows * (c.head_dim_qk + c.head_dim_vo) * kv_eb + (token_scales ? rows * 2 * 4 : 0.0);
  if (c.mla_absorbed()) w.kv_bytes = static_cast<double>(c.total_kv()) * c.kv_bytes_per_token(eb);  // the latent, read once
  // /sparse: each query row gathers its kept latent rows (one head's allowed pairs), as the engines' kernels do
  if (c.is_sparse()) w.kv_bytes = static_cast<double>(w.allowed_pairs) * c.kv_bytes_per_token(eb);
  w.bytes = w.kv_bytes + static_cast<double>(c.total_q()) * c.num_qo_heads * (c.head_dim_qk * q_eb + c.head_dim_vo * eb);
  return w;
}

namespace {

// A /parallel case's step: the busiest GPU's partitions (each the median of its reps), the collective,
// and attnscope's merge on the device where it ran (cuda.merge), with the parts named in the note.
void partition_step(const PartitionReport& rep, BenchRow* row) {
  double merge = 0;
  std::string merge_id = "none on the device";
  for (const MergeRun& m : rep.merges)
    if (m.status == Status::kOk && m.device_ms > 0 && m.vs_attnscope == "bit-identical") {
      merge = m.device_ms;
      merge_id = m.id;
      break;
    }
  row->median_ms = rep.kernels_ms + rep.collective_ms + merge;
  row->min_ms = row->max_ms = 0;  // a sum of medians has no min / max of its own
  char b[256];
  std::snprintf(b, sizeof b, "%zu %s on %d GPU%s: kernels %.4f ms (busiest GPU), collective %.4f ms, merge %.4f ms (%s)",
                rep.parts.size(), rep.kind == "context" ? "ranks" : "levels", rep.gpus, rep.gpus > 1 ? "s" : "", rep.kernels_ms,
                rep.collective_ms, merge, merge_id.c_str());
  row->note = b;
}

}  // namespace

BenchReport run_bench(const CaseSpec& c, const std::vector<std::string>& backends, int reps, int gpus) {
  BenchReport r;
  r.case_name = c.name;
  const Plan p = plan_case(c);
  // plan time: median of a few plans (the first one pays for allocations)
  std::vector<double> us;
  for (int i = 0; i < 5; ++i) us.push_back(plan_case(c).plan_us);
  std::sort(us.begin(), us.end());
  r.plan_us = us[us.size() / 2];
  std::string why;
  const auto devs = query_devices(&why);
  r.device = devs.empty() ? why : devs[0].name;
  r.device_found = !devs.empty();
  r.copy_gbps = devs.empty() ? 0 : measure_copy_bandwidth_gbps(&why);
  const WorkCounts w = work_counts(c, p);
  r.allowed_pairs = w.allowed_pairs;
  r.flops = w.flops;
  r.kv_bytes = w.kv_bytes;
  r.bytes = w.bytes;
  // GPU backends generate their inputs on the device; the others read the host workload, made once
  std::optional<Workload> host;
  for (const auto& id : backends) {
    BenchRow row;
    row.backend = id;
    auto b = make_backend(id);
    RunOptions o;
    o.bench_reps = reps;
    const BackendInfo* info = backend_info(id);
    if ((!info || !info->gpu) && !host) host = make_workload(c, p.pages);
    o.partition_gpus = gpus;
    const Result res = is_partitioned(c) ? run_partitioned(id, c, o, !(info && info->gpu))
                                         : run_backend(*b, c, p, info && info->gpu ? Workload{} : *host, o);
    if (!res.ok()) {
      // the message may start with the status already ("not compiled: ..."): said once
      const std::string st = status_name(res.status);
      row.status = res.message.rfind(st, 0) == 0 ? res.message : st + ": " + res.message;
    } else if (res.timing.reps == 0) {
      row.status = "no device timing (this backend is not timed with events; host " + std::to_string(res.timing.host_ms) + " ms)";
    } else {
      row.status = "ok";
      row.note = res.message;
      row.median_ms = res.timing.device_ms;
      row.min_ms = res.timing.device_ms_min;
      row.max_ms = res.timing.device_ms_max;
      row.reps = res.timing.reps;
      if (res.partition) partition_step(*res.partition, &row);
      const double s = row.median_ms * 1e-3;
      row.tflops = r.flops / s / 1e12;
      row.gbps = r.bytes / s / 1e9;
      row.kv_gbps = r.kv_bytes / s / 1e9;
      row.copy_share = r.copy_gbps > 0 ? row.gbps / r.copy_gbps : 0;
      if (c.cuda_graph) {  // /cuda_graph: the captured graph's replay time beside this median
        Result g = res;
        attach_graph_replay(id, c, p, &g);
        if (g.graph && g.graph->replay_reps > 0) row.note += "; " + graph_time_text(*g.graph);
      }
    }
    r.rows.push_back(row);
  }
  return r;
}

nlohmann::ordered_json bench_to_json(const BenchReport& r) {
  nlohmann::ordered_json j;
  j["schema"] = "attnscope/bench@1";
  j["case"] = r.case_name;
  j["device"] = r.device;
  j["copy_gbps"] = r.copy_gbps;
  j["plan_us"] = r.plan_us;
  j["allowed_pairs_per_head"] = r.allowed_pairs;
  j["flops"] = r.flops;
  j["bytes"] = r.bytes;
  j["kv_bytes"] = r.kv_bytes;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& x : r.rows)
    rows.push_back({{"backend", x.backend},
                    {"status", x.status},
                    {"note", x.note},
                    {"median_ms", x.median_ms},
                    {"min_ms", x.min_ms},
                    {"max_ms", x.max_ms},
                    {"reps", x.reps},
                    {"tflops", x.tflops},
                    {"gbps", x.gbps},
                    {"kv_gbps", x.kv_gbps},
                    {"copy_share", x.copy_share}});
  j["rows"] = rows;
  return j;
}

}  // namespace attnscope
