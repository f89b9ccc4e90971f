// Partitioned runs (partition_run.h): one backend over each partition, the partials placed in the whole
// case's rows, merged.
#include "partition_run.h"

#include <chrono>
#include <cmath>

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

Result run_partitioned(const std::string& id, const CaseSpec& c, const RunOptions& ro, bool host_inputs, const Result* whole) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Partition> parts = make_partitions(c);
  const BackendInfo* info = backend_info(id);
  auto rep = std::make_shared<PartitionReport>();
  rep->kind = c.parallel->context ? "context" : "cascade";
  rep->native = info ? info->lse_base : LseBase::kE;
  rep->read = c.parallel->merge_base_of(id, rep->native);
  rep->collective = is_gpu_backend(id) ? "virtual: the partitions one after another on one GPU" : "virtual: on the host";
  Result out;
  out.backend = id;
  std::vector<uint8_t> row_valid;
  for (size_t k = 0; k < parts.size(); ++k) {
    const Partition& part = parts[k];
    if (ro.cancel && ro.cancel->load()) {
      out.status = Status::kCancelled;
      return out;
    }
    PartitionPart pp;
    pp.label = part.label;
    pp.keys = part.keys;
    Result pr;
    pr.backend = id;
    if (!part.sub.requests.empty()) {
      const Plan plan = plan_case(part.sub);
      const Workload w = host_inputs ? make_workload(part.sub, plan.pages) : Workload{};
      RunOptions pro = ro;
      pro.inputs_key.clear();  // a partition's inputs are its own
      pro.keep_device_copy = false;
      pro.progress = [&ro, k, n = parts.size()](double x) {
        if (ro.progress) ro.progress((static_cast<double>(k) + x) / static_cast<double>(n));
      };
      pr = run_one(id, part.sub, plan, w, pro);
      if (!pr.ok()) return failed_part(id, part, pr);
    }
    pp.status = pr.status;
    pp.message = pr.message;
    pp.timing = pr.timing;
    place_rows(c, part, pr, &pp);
    if (!pr.row_valid.empty() && row_valid.empty()) row_valid = row_selection(c, ro.sample_rows);
    out.timing.device_ms += pr.timing.device_ms;
    out.timing.reps = pr.timing.reps;
    rep->parts.push_back(std::move(pp));
  }
  MergeInput in;
  for (const auto& p : rep->parts) in.parts.push_back({p.o.data(), p.lse.data()});
  in.rows = c.total_q() * c.num_qo_heads;
  in.dv = c.head_dim_vo;
  in.dtype = c.dtype;
  in.native = rep->native;
  in.read = rep->read;
  const auto m0 = std::chrono::steady_clock::now();
  merge_partials(in.parts, in.rows, in.dv, in.dtype, in.native, in.read, &out.o, &out.lse);
  rep->merge_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - m0).count();
  rep->merges = run_merges(in);
  for (auto& m : rep->merges) m.o.clear(), m.lse.clear();  // compared (vs_attnscope); the result holds the merge
  out.row_valid = row_valid;
  if (whole) {  // a reference: its answer stays the unpartitioned one
    out.o = whole->o;
    out.lse = whole->lse;
    out.row_valid = whole->row_valid;
    out.message = whole->message;
  }
  out.partition = rep;
  out.timing.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::string merge_base_note(const Result& r) {
  if (!r.partition || r.partition->read == r.partition->native) return "";
  auto base = [](LseBase b) { return b == LseBase::k2 ? std::string("base-2") : std::string("natural-log"); };
  return "merged reading " + r.backend + "'s " + base(r.partition->native) + " LSE as " +
         (r.partition->read == LseBase::k2 ? "base 2" : "natural log") + " (/parallel/merge_base \"" +
         lse_base_name(r.partition->read) + "\"; its descriptor says " + lse_base_name(r.partition->native) + ")";
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
