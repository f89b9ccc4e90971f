// Partitioned runs (partition_run.h): one backend over each partition, the partials placed in the whole
// case's rows, merged.
#include "partition_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "attnscope/collective.h"
#include "attnscope/device.h"
#include "attnscope/merge.h"
#include "attnscope/partition.h"
#include "attnscope/registry.h"
#include "session.h"

namespace attnscope {

namespace {

// Token offset of each request's queries in c.
std::vector<int64_t> q_offsets(const CaseSpec& c) {
  std::vector<int64_t> off(c.requests.size() + 1, 0);
  for (size_t r = 0; r < c.requests.size(); ++r) off[r + 1] = off[r] + c.requests[r].q_len;
  return off;
}

// Partition `part`'s result placed in the whole case's rows: rows of requests it does not hold get
// O = 0 and LSE = -inf (the partial of no key).
void place_rows(const CaseSpec& c, const Partition& part, const Result& pr, PartitionPart* out) {
  const int H = c.num_qo_heads, Dv = c.head_dim_vo;
  const std::vector<int64_t> whole = q_offsets(c), sub = q_offsets(part.sub);
  out->o.assign(static_cast<size_t>(c.total_q()) * H * Dv, 0.0f);
  out->lse.assign(static_cast<size_t>(c.total_q()) * H, -INFINITY);
  if (!pr.ok()) return;
  for (size_t i = 0; i < part.requests.size(); ++i) {
    const int r = part.requests[i];
    const int64_t n = c.requests[r].q_len;
    std::copy_n(pr.o.begin() + sub[i] * H * Dv, n * H * Dv, out->o.begin() + whole[r] * H * Dv);
    std::copy_n(pr.lse.begin() + sub[i] * H, n * H, out->lse.begin() + whole[r] * H);
  }
}

Result failed_part(const std::string& id, const Partition& part, const Result& pr) {
  Result r;
  r.backend = id;
  r.status = pr.status;
  // not compiled / no device say so alone: no partition could run
  const bool everywhere = pr.status == Status::kNotCompiled || pr.status == Status::kNoDevice;
  r.message = everywhere ? pr.message : part.label + ": " + pr.message;
  return r;
}

}  // namespace

namespace {

// How many GPUs the partitions of backend `id` run on at once: 1 for a CPU backend, a single
// partition or GPU, or when asked; else the visible GPUs (or fewer, as asked), at most one per partition.
int gpus_for(const std::string& id, const RunOptions& ro, size_t parts) {
  if (!is_gpu_backend(id) || parts < 2 || ro.partition_gpus == 1) return 1;
  std::string why;
  int n = static_cast<int>(query_devices(&why).size());
  if (ro.partition_gpus > 0) n = std::min(n, ro.partition_gpus);
  return std::max(1, std::min(n, static_cast<int>(parts)));
}

// One partition's run on the calling thread's current device: its own plan, its own inputs.
Result run_part(const std::string& id, const Partition& part, const RunOptions& ro, bool host_inputs, size_t k, size_t n) {
  Result pr;
  pr.backend = id;
  if (part.sub.requests.empty()) return pr;  // holds no key: O = 0, LSE = -inf
  const Plan plan = plan_case(part.sub);
  const Workload w = host_inputs ? make_workload(part.sub, plan.pages) : Workload{};
  RunOptions pro = ro;
  pro.inputs_key.clear();  // a partition's inputs are its own
  pro.keep_device_copy = false;
  pro.progress = [&ro, k, n](double x) {
    if (ro.progress) ro.progress((static_cast<double>(k) + x) / static_cast<double>(n));
  };
  return run_one(id, part.sub, plan, w, pro);
}

// Every partition's result: one after another, or partition k on GPU k % gpus, one thread per GPU.
std::vector<Result> run_parts(const std::string& id, const std::vector<Partition>& parts, const RunOptions& ro, bool host_inputs,
                              int gpus) {
  std::vector<Result> out(parts.size());
  if (gpus <= 1) {
    for (size_t k = 0; k < parts.size(); ++k) {
      if (ro.cancel && ro.cancel->load()) break;
      out[k] = run_part(id, parts[k], ro, host_inputs, k, parts.size());
      if (!out[k].ok()) break;
    }
    return out;
  }
  std::vector<std::thread> threads;
  for (int g = 0; g < gpus; ++g)
    threads.emplace_back([&, g] {
      std::string why;
      for (size_t k = g; k < parts.size(); k += gpus) {
        if (!set_current_device(g, &why)) {
          out[k].backend = id;
          out[k].status = Status::kError;
          out[k].message = why;
          continue;
        }
        out[k] = run_part(id, parts[k], ro, host_inputs, k, parts.size());
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

// The partials of ranks that ran on several GPUs, gathered onto GPU 0 through NCCL (collective.h): each
// rank's rows staged on its GPU, sent, and checked on arrival to be the bits that left. Where no
// collective can run, the report says why and the partials stay as each run downloaded them. Returns
// an error message when the gathered bits differ.
std::string gather_across_gpus(PartitionReport& rep, int64_t rows, int dv, MergeInput* in) {
  if (const std::string why = gather_unavailable(static_cast<int>(rep.parts.size())); !why.empty()) {
    rep.collective += " (no collective: " + why + ")";
    return "";
  }
  std::vector<RankPartial> ranks;
  for (const auto& p : rep.parts) ranks.push_back({p.o.data(), p.lse.data(), nullptr});
  const GatheredPartials g = gather_partials(ranks, rows, dv, true, rep.gpus);
  if (g.status != Status::kOk) {
    rep.collective += " (the collective failed: " + g.message + ")";
    return "";
  }
  for (size_t k = 0; k < rep.parts.size(); ++k)
    if (std::memcmp(g.o[k].data(), rep.parts[k].o.data(), g.o[k].size() * 4) != 0 ||
        std::memcmp(g.lse[k].data(), rep.parts[k].lse.data(), g.lse[k].size() * 4) != 0)
      return rep.parts[k].label + ": the partial gathered through NCCL differs from the one its GPU computed";
  rep.collective = g.message;
  rep.collective_ms = g.collective_ms;
  in->on_device = g.on_gpu0;  // cuda.merge merges the gathered buffers where they arrived
  return "";
}

}  // namespace

Result run_partitioned(const std::string& id, const CaseSpec& c, const RunOptions& ro, bool host_inputs, const Result* whole) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Partition> parts = make_partitions(c);
  const BackendInfo* info = backend_info(id);
  auto rep = std::make_shared<PartitionReport>();
  rep->kind = c.parallel->context ? "context" : "cascade";
  rep->native = info ? info->lse_base : LseBase::kE;
  rep->read = c.parallel->merge_base_of(id, rep->native);
  rep->gpus = gpus_for(id, ro, parts.size());
  rep->collective = !is_gpu_backend(id) ? "virtual: on the host"
                    : rep->gpus > 1     ? "on " + std::to_string(rep->gpus) + " GPUs at once, partition k on GPU k % " +
                                          std::to_string(rep->gpus) + "; partials downloaded by each run"
                                    : "virtual: the partitions one after another on one GPU";
  Result out;
  out.backend = id;
  const std::vector<Result> prs = run_parts(id, parts, ro, host_inputs, rep->gpus);
  if (ro.cancel && ro.cancel->load()) {
    out.status = Status::kCancelled;
    return out;
  }
  std::vector<double> busy(rep->gpus, 0.0);
  for (size_t k = 0; k < parts.size(); ++k) {
    const Result& pr = prs[k];
    if (!pr.ok()) return failed_part(id, parts[k], pr);
    PartitionPart pp;
    pp.label = parts[k].label;
    pp.keys = parts[k].keys;
    pp.status = pr.status;
    pp.message = pr.message;
    pp.timing = pr.timing;
    pp.device = rep->gpus > 1 ? static_cast<int>(k % rep->gpus) : -1;
    place_rows(c, parts[k], pr, &pp);
    if (!pr.row_valid.empty()) out.row_valid = row_selection(c, ro.sample_rows);
    busy[k % rep->gpus] += pr.timing.device_ms;
    out.timing.reps = std::max(out.timing.reps, pr.timing.reps);
    rep->parts.push_back(std::move(pp));
  }
  rep->kernels_ms = *std::max_element(busy.begin(), busy.end());
  out.timing.device_ms = rep->kernels_ms;
  MergeInput in;
  for (const auto& p : rep->parts) in.parts.push_back({p.o.data(), p.lse.data()});
  in.rows = c.total_q() * c.num_qo_heads;
  in.dv = c.head_dim_vo;
  in.dtype = c.dtype;
  in.native = rep->native;
  in.read = rep->read;
  in.qo_heads = c.num_qo_heads;  // the libraries' merges are given the rows as [tokens, heads]
  if (rep->gpus > 1) {
    const std::string bad = gather_across_gpus(*rep, in.rows, in.dv, &in);
    if (!bad.empty()) {
      out.status = Status::kError;
      out.message = bad;
      return out;
    }
  }
  const auto m0 = std::chrono::steady_clock::now();
  merge_partials(in.parts, in.rows, in.dv, in.dtype, in.native, in.read, &out.o, &out.lse);
  rep->merge_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - m0).count();
  rep->merges = run_merges(in);
  for (auto& m : rep->merges) m.o.clear(), m.lse.clear();  // compared (vs_attnscope); the result holds the merge
  if (whole) {                                             // a reference: its answer stays the unpartitioned one
    out.o = whole->o;
    out.lse = whole->lse;
    out.row_valid = whole->row_valid;
    out.message = whole->message;
  }
  out.partition = rep;
  out.timing.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

MergeBaseCheck check_merge_bases(const CaseSpec& c, const Result& r, const Result& truth) {
  MergeBaseCheck chk;
  chk.backend = r.backend;
  if (!r.partition || r.partition->parts.empty()) return chk;
  std::vector<PartialRows> parts;
  for (const auto& p : r.partition->parts) parts.push_back({p.o.data(), p.lse.data()});
  const int64_t rows = c.total_q() * c.num_qo_heads;
  const int dv = c.head_dim_vo;
  auto err = [&](LseBase read) {
    std::vector<float> o, lse;
    merge_partials(parts, rows, dv, c.dtype, r.partition->native, read, &o, &lse);
    double m = 0;
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t t = row / c.num_qo_heads;
      if (!r.row_ok(t) || !truth.row_ok(t)) continue;
      for (int d = 0; d < dv; ++d) {
        const double e = std::fabs(static_cast<double>(o[row * dv + d]) - truth.o[row * dv + d]);
        m = std::isnan(e) ? INFINITY : std::max(m, e);
      }
    }
    return m;
  };
  chk.err_e = err(LseBase::kE);
  chk.err_2 = err(LseBase::k2);
  const std::string own = std::string("its descriptor says ") + lse_base_name(r.partition->native);
  if (chk.err_e == chk.err_2)
    chk.verdict = "both bases merge alike (" + own + ")";
  else
    chk.verdict = std::string("base ") + (chk.err_2 < chk.err_e ? "2" : "e") + " (" + own + ")";
  return chk;
}

}  // namespace attnscope
