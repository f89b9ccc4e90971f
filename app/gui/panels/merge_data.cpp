// The Merge panel's numbers (merge_panel.h), built from the session alone: no window, no drawing.
#include <algorithm>
#include <cmath>

#include "attnscope/partition.h"
#include "attnscope/registry.h"
#include "merge_panel.h"

namespace attnscope::gui {

const char* const kNotPartitionedLine =
    "No /parallel in this case (/parallel splits each request's keys over context-parallel ranks or cascade levels and "
    "merges the partials by LSE): docs/partitions.md";

namespace {

// Token offset of request r's first query.
int64_t first_token(const CaseSpec& c, int r) {
  int64_t t = 0;
  for (int i = 0; i < r; ++i) t += c.requests[i].q_len;
  return t;
}

double max_abs_diff(const float* a, const float* b, int n) {
  double m = 0;
  for (int d = 0; d < n; ++d) {
    const double e = std::fabs(static_cast<double>(a[d]) - b[d]);
    m = std::isnan(e) ? INFINITY : std::max(m, e);  // a NaN is the largest error, never hidden by max()
  }
  return m;
}

// A row's shares of the attention mass, exp(lse_k - LSE) with LSE the partials' summed mass in natural
// log (the right merge's LSE), and the weights the merge gave them: merge_input_lse2 reads each LSE in
// the base the merge assumed, exactly as merge_partials does. An empty partial (-inf) gets 0 in both.
void shares_and_weights(MergeRowBackend* b, const PartitionReport& p) {
  double m = -INFINITY, m2 = -INFINITY;
  std::vector<double> l2(b->parts.size());
  for (size_t k = 0; k < b->parts.size(); ++k) {
    m = std::max(m, static_cast<double>(b->parts[k].lse));
    l2[k] = merge_input_lse2(b->parts[k].lse, p.native, p.read);
    m2 = std::max(m2, l2[k]);
  }
  b->lse_mass = m;
  if (m == -INFINITY) return;  // no key in any partition: every share and weight 0
  double sum = 0, sum2 = 0;
  for (size_t k = 0; k < b->parts.size(); ++k) {
    sum += std::exp(b->parts[k].lse - m);
    sum2 += std::exp2(l2[k] - m2);
  }
  b->lse_mass = m + std::log(sum);
  for (size_t k = 0; k < b->parts.size(); ++k) {
    MergePartial& q = b->parts[k];
    q.share = std::exp(q.lse - b->lse_mass);
    q.weight = std::exp2(l2[k] - m2) / sum2;
    q.weight_differs = std::fabs(q.weight - q.share) > 1e-3;  // float rounding is ~1e-7; a wrong base, percents
  }
}

}  // namespace

std::vector<int64_t> keys_in(const CaseSpec& c, int /*r*/, int64_t k0, int64_t k1) {
  if (!c.parallel || k1 <= k0) return {};
  if (c.parallel->context) {
    const int n = c.parallel->context->ranks, i = c.parallel->context->interleave;
    std::vector<int64_t> out(n);
    for (int rank = 0; rank < n; ++rank) out[rank] = shard_size(k1, n, rank, i) - shard_size(k0, n, rank, i);
    return out;
  }
  if (c.parallel->cascade) {
    const int64_t p = c.parallel->cascade->shared_prefix;
    const int64_t prefix = std::max<int64_t>(0, std::min(k1, p) - k0);
    return {prefix, k1 - k0 - prefix};
  }
  return {};
}

MergeLayout build_merge_layout(const CaseSpec& c) {
  MergeLayout L;
  if (!is_partitioned(c)) return L;
  L.partitioned = true;
  if (c.parallel->context) {
    const auto& x = *c.parallel->context;
    L.title = "Context parallel: " + std::to_string(x.ranks) + " ranks, interleave " + std::to_string(x.interleave) +
              ": rank r owns key p iff floor(p / " + std::to_string(x.interleave) + ") mod " + std::to_string(x.ranks) +
              " = r. Each rank runs its own shard; the partials merge by LSE in rank order.";
  } else {
    L.title = "Cascade: a shared prefix of " + std::to_string(c.parallel->cascade->shared_prefix) +
              " keys (level 0, not causal), then each request's own keys (level 1, the case's mask); merged by LSE, "
              "level 0 first.";
  }
  const std::vector<Partition> parts = make_partitions(c);
  L.keys.assign(c.requests.size(), std::vector<int64_t>(parts.size(), 0));
  for (size_t k = 0; k < parts.size(); ++k) {
    L.labels.push_back(parts[k].label);
    for (size_t r = 0; r < c.requests.size() && r < parts[k].keys.size(); ++r) L.keys[r][k] = parts[k].keys[r];
  }
  return L;
}

MergeRowItems build_merge_row(const Session& s, int request, int query, int head) {
  const CaseSpec& c = s.spec();
  MergeRowItems it;
  it.request = request;
  it.query = query;
  it.head = head;
  it.token = first_token(c, request) + query;
  const int H = c.num_qo_heads, Dv = c.head_dim_vo;
  const int64_t row = it.token * H + head;
  const Result* ref = s.result(backend_for_role(Role::kReference));
  if (ref && !ref->ok()) ref = nullptr;
  it.reference = ref ? ref->backend : "";
  it.reference_computed = ref && ref->row_ok(it.token);
  const PartitionReport* refp = ref && ref->partition ? ref->partition.get() : nullptr;
  const std::vector<int64_t> keys = keys_in(c, request, 0, c.requests[request].kv_len);
  for (const Result& r : s.results) {
    if (!r.ok() || !r.partition) continue;
    const PartitionReport& p = *r.partition;
    MergeRowBackend b;
    b.backend = r.backend;
    b.reference = &r == ref;
    b.stale = s.is_stale(r.backend);
    b.sampled = s.is_sampled(r.backend);
    b.computed = r.row_ok(it.token);
    for (size_t k = 0; k < p.parts.size(); ++k) {
      const PartitionPart& part = p.parts[k];
      MergePartial q;
      q.keys = k < keys.size() ? keys[k] : 0;
      q.lse = static_cast<size_t>(row) < part.lse.size() ? part.lse[row] : -INFINITY;
      // the reference's partial over the same keys: the same partition of the same case
      const bool comparable = refp && !b.reference && it.reference_computed && b.computed && refp->parts.size() == p.parts.size();
      if (comparable && static_cast<size_t>(row + 1) * Dv <= part.o.size() &&
          static_cast<size_t>(row + 1) * Dv <= refp->parts[k].o.size())
        q.err = max_abs_diff(part.o.data() + row * Dv, refp->parts[k].o.data() + row * Dv, Dv);
      b.parts.push_back(q);
    }
    shares_and_weights(&b, p);
    b.lse_result = static_cast<size_t>(row) < r.lse.size() ? r.lse[row] : NAN;
    const double tol = 1e-3 * std::max(1.0, std::fabs(b.lse_mass));
    b.lse_differs = std::isfinite(b.lse_mass) != std::isfinite(b.lse_result) ||
                    (std::isfinite(b.lse_mass) && !(std::fabs(b.lse_result - b.lse_mass) <= tol));
    if (ref && !b.reference && it.reference_computed && b.computed)
      b.merged_err = max_abs_diff(r.o.data() + row * Dv, ref->o.data() + row * Dv, Dv);
    it.backends.push_back(std::move(b));
  }
  return it;
}

RowPick worst_merged_row(const Session& s) {
  const CaseSpec& c = s.spec();
  RowPick best;
  const Result* ref = s.result(backend_for_role(Role::kReference));
  if (!ref || !ref->ok()) return best;
  const int H = c.num_qo_heads, Dv = c.head_dim_vo;
  const int64_t T = c.total_q();
  for (const Result& r : s.results) {
    if (!r.ok() || !r.partition || &r == ref || r.o.size() != ref->o.size()) continue;
    int64_t t = 0;
    for (int q = 0; q < static_cast<int>(c.requests.size()); ++q)
      for (int i = 0; i < c.requests[q].q_len && t < T; ++i, ++t) {
        if (!r.row_ok(t) || !ref->row_ok(t)) continue;
        for (int h = 0; h < H; ++h) {
          const int64_t at = (t * H + h) * Dv;
          const double e = max_abs_diff(r.o.data() + at, ref->o.data() + at, Dv);
          if (e > best.err) best = RowPick{q, i, h, e, r.backend};
        }
      }
  }
  return best;
}

namespace {

MergeBaseRow base_row(const Session& s, const Result& r) {
  const PartitionReport& p = *r.partition;
  MergeBaseRow b;
  b.backend = r.backend;
  b.native = lse_base_name(p.native);
  b.read = lse_base_name(p.read);
  b.mismatch = p.read != p.native;
  for (const MergeBaseCheck& m : s.merge_checks) {
    if (m.backend != r.backend) continue;
    b.checked = true;
    b.err_e = m.err_e;
    b.err_2 = m.err_2;
    b.verdict = m.verdict;
    const LseBase better = m.err_2 < m.err_e ? LseBase::k2 : LseBase::kE;
    b.check_disagrees = m.err_e != m.err_2 && better != p.native;
  }
  b.stale = s.diffs_stale || s.is_stale(r.backend);  // the checks are made with the comparisons
  b.sampled = s.diffs_sampled;
  return b;
}

MergeTimingRow timing_row(const Session& s, const Result& r) {
  const PartitionReport& p = *r.partition;
  MergeTimingRow t;
  t.backend = r.backend;
  t.stale = s.is_stale(r.backend);
  t.sampled = s.is_sampled(r.backend);
  for (const auto& part : p.parts) t.device = t.device || part.timing.device_ms > 0;
  // the kernels' time: CUDA events where measured, else the host's (the CLI's `run` prints the same)
  for (const auto& part : p.parts) t.part_ms.push_back(t.device ? part.timing.device_ms : part.timing.host_ms);
  t.merge_ms = p.merge_ms;
  t.collective = p.collective;
  t.collective_ms = p.collective_ms;
  t.merges = p.merges;
  for (auto& m : t.merges) m.o.clear(), m.lse.clear();
  return t;
}

}  // namespace

MergeItems build_merge_items(const Session& s) {
  MergeItems it;
  it.layout = build_merge_layout(s.spec());
  it.reference = backend_for_role(Role::kReference);
  if (!it.layout.partitioned) return it;
  for (const std::string& id : s.spec().backends) {
    const Result* r = s.result(id);
    if (!r) {
      it.unpartitioned.push_back(id + ": not run yet");
      continue;
    }
    if (!r->ok()) {
      it.unpartitioned.push_back(id + ": " + status_name(r->status) +
                                 (r->status == Status::kError ? " (" + r->message + ")" : std::string()));
      continue;
    }
    if (!r->partition) {
      const BackendInfo* info = backend_info(id);
      it.unpartitioned.push_back(id + (info && info->role == Role::kLowp
                                           ? ": runs the whole case (the 2x rule's low-precision baseline)"
                                           : ": runs the whole case (" + r->message + ")"));
      continue;
    }
    it.bases.push_back(base_row(s, *r));
    MergeTimingRow t = timing_row(s, *r);
    double total = t.merge_ms + t.collective_ms;
    for (double ms : t.part_ms) total += ms;
    it.max_ms = std::max(it.max_ms, total);
    it.timings.push_back(std::move(t));
  }
  return it;
}

}  // namespace attnscope::gui
