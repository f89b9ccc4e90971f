// Comparison statistics and verdicts.
#include "attnscope/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>

#include "attnscope/partition.h"

namespace attnscope {

namespace {

std::string fmt(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

DiffStats stats_of(const DiffPartial& p) {
  DiffStats s;
  s.count = p.count;
  s.max_abs = p.max_abs;
  s.worst_index = p.worst_index;
  s.max_ulp = p.max_ulp;
  s.bit_identical = p.bit_identical;
  s.nan_a = p.nan_a;
  s.inf_a = p.inf_a;
  s.nan_b = p.nan_b;
  s.inf_b = p.inf_b;
  s.nonfinite_mismatch = p.nonfinite_mismatch;
  const int64_t finite = s.count - s.nonfinite_mismatch;
  s.mean_abs = finite > 0 ? p.sum_abs / finite : 0;
  s.rel_l2 = p.sum_sq_ref > 0 ? std::sqrt(p.sum_sq_err / p.sum_sq_ref) : (p.sum_sq_err > 0 ? INFINITY : 0);
  s.nmse = p.sum_sq_ref > 0 ? p.sum_sq_err / p.sum_sq_ref : (p.sum_sq_err > 0 ? INFINITY : 0);
  s.allclose_loose = p.loose_fail == 0;
  s.allclose_tight = p.tight_fail == 0;
  return s;
}

// Chunks [c0, c1) of n elements, `per_token` elements a token; tokens where ok[t] == 0 are skipped.
// Lane by lane (each lane's partial stays in registers; the chunk's 32 KiB stay in cache): the same
// order per lane as a warp's, so the same bits.
void chunk_range(const float* a, const float* b, int64_t n, int64_t per_token, const std::vector<uint8_t>& ok, DType t,
                 double rtol, double atol, int64_t c0, int64_t c1, DiffPartial* out) {
  DiffPartial lanes[kDiffLanes];
  for (int64_t k = c0; k < c1; ++k) {
    const int64_t lo = k * kDiffChunk, hi = std::min(n, lo + kDiffChunk);
    for (int l = 0; l < kDiffLanes; ++l) {
      DiffPartial s = empty_partial();
      if (ok.empty()) {
        for (int64_t i = lo + l; i < hi; i += kDiffLanes) diff_element(s, t, a[i], b[i], i, rtol, atol);
      } else {
        for (int64_t i = lo + l; i < hi; i += kDiffLanes)
          if (ok[i / per_token]) diff_element(s, t, a[i], b[i], i, rtol, atol);
      }
      lanes[l] = s;
    }
    fold_lanes(lanes);
    out[k] = lanes[0];
  }
}

std::vector<DiffPartial> chunks(const float* a, const float* b, int64_t n, int64_t per_token, const std::vector<uint8_t>& ok,
                                DType t, double rtol, double atol, int threads) {
  const int64_t nc = (n + kDiffChunk - 1) / kDiffChunk;
  std::vector<DiffPartial> out(nc);
  // a thread for every 64 chunks at most: below that, starting one costs more than it saves
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(threads, nc / 64));
  std::vector<std::thread> pool;
  for (int64_t w = 1; w < nt; ++w)
    pool.emplace_back(chunk_range, a, b, n, per_token, std::cref(ok), t, rtol, atol, nc * w / nt, nc * (w + 1) / nt, out.data());
  chunk_range(a, b, n, per_token, ok, t, rtol, atol, 0, nc / nt, out.data());
  for (auto& th : pool) th.join();
  return out;
}

}  // namespace

uint64_t ulp_distance(DType t, float a, float b) { return diff_ulp(t, a, b); }

DiffPartial fold_chunks(const std::vector<DiffPartial>& chunks) {
  DiffPartial s = empty_partial();
  for (const auto& p : chunks) merge_partial(s, p);
  return s;
}

DiffPass host_diff_pass(const CaseSpec& c, const Result& a, const Result& b, double rtol, double atol, int threads) {
  const int Hq = c.num_qo_heads, Dv = c.head_dim_vo;
  const int64_t T = c.total_q();
  std::vector<uint8_t> ok;  // empty: every token compared
  if (!a.row_valid.empty() || !b.row_valid.empty()) {
    ok.resize(T);
    for (int64_t t = 0; t < T; ++t) ok[t] = a.row_ok(t) && b.row_ok(t);
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  DiffPass p;
  p.o = chunks(a.o.data(), b.o.data(), T * Hq * Dv, int64_t{Hq} * Dv, ok, c.dtype, rtol, atol, threads);
  if (!a.lse.empty() && !b.lse.empty())  // a backend may return O alone (python: functions)
    p.lse = chunks(a.lse.data(), b.lse.data(), T * Hq, Hq, ok, DType::kFp32, 0, 0, threads);
  p.error_map.assign(static_cast<size_t>(T) * Hq, std::numeric_limits<float>::quiet_NaN());
  for (int64_t t = 0; t < T; ++t) {
    if (!ok.empty() && !ok[t]) continue;
    for (int64_t row = t * Hq; row < (t + 1) * Hq; ++row) {
      float worst = 0;
      for (int64_t i = row * Dv; i < (row + 1) * Dv; ++i) worst = error_cell(worst, a.o[i], b.o[i]);
      p.error_map[row] = worst;
      ++p.rows_compared;
    }
  }
  return p;
}

std::string result_digest(const Result& r) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const std::vector<float>& v) {
    for (float x : v) {
      uint32_t u = f32_bits(x);
      if (x != x) u = 0x7fc00000u;  // one NaN spelling
      for (int i = 0; i < 4; ++i) {
        h ^= (u >> (8 * i)) & 0xffu;
        h *= 1099511628211ull;
      }
    }
  };
  mix(r.o);
  mix(r.lse);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

DiffReport compare_results(const CaseSpec& c, const Result& a, const Result& b, const ComparisonSpec& k, const Result* lowp,
                           const DiffPassFn& pass) {
  DiffReport rep;
  rep.backend = a.backend;
  rep.baseline = b.backend;
  if (!a.ok() || !b.ok()) {
    const Result& bad = a.ok() ? b : a;
    rep.unavailable_reason = bad.backend + ": " + (bad.message.empty() ? std::string(status_name(bad.status)) : bad.message);
    rep.verdict.rule = rule_name(k.rule);
    rep.verdict.detail = "not compared: " + rep.unavailable_reason;
    // Not run here (not compiled, no device, unsupported) is a skip, never a pass; an error is a failure.
    auto skip = [](Status s) { return s == Status::kNotCompiled || s == Status::kNoDevice || s == Status::kUnsupported; };
    rep.verdict.skipped = skip(a.status) || skip(b.status);
    return rep;
  }
  rep.available = true;
  rep.sampled = !a.row_valid.empty() || !b.row_valid.empty();
  DiffPass p = pass ? pass(a, b, k.rtol, k.atol) : host_diff_pass(c, a, b, k.rtol, k.atol);
  const DiffPartial po = fold_chunks(p.o), pl = fold_chunks(p.lse);
  rep.o = stats_of(po);
  rep.lse = stats_of(pl);
  rep.error_map = std::move(p.error_map);
  rep.rows_compared = p.rows_compared;

  Verdict& v = rep.verdict;
  const bool finite_ok = rep.o.nonfinite_mismatch == 0 && rep.lse.nonfinite_mismatch == 0;
  const std::string nf =
      finite_ok ? "" : "; " + std::to_string(rep.o.nonfinite_mismatch + rep.lse.nonfinite_mismatch) + " NaN/Inf mismatches";
  switch (k.rule) {
    case CompareRule::kAllclose: {
      v.rule = "allclose(rtol=" + fmt(k.rtol) + ", atol=" + fmt(k.atol) + ")";
      const int64_t bad = po.outside;
      v.pass = bad == 0 && finite_ok;
      v.detail =
          std::to_string(bad) + " of " + std::to_string(rep.o.count) + " elements outside; max abs " + fmt(rep.o.max_abs) + nf;
      break;
    }
    case CompareRule::kTwiceLowp: {
      v.rule = "max|A - ref| <= 2 max|" + k.lowp + " - ref| + " + fmt(k.atol);
      if (!lowp || !lowp->ok()) {
        // Without the bound nothing was checked: NOT CHECKED (skipped), unless the low-precision run
        // itself failed with an error, which is a failure like any other.
        v.pass = false;
        v.skipped = !lowp || lowp->status != Status::kError;
        const std::string why =
            !lowp ? k.lowp + " was not run"
                  : k.lowp + ": " + (lowp->message.empty() ? std::string(status_name(lowp->status)) : lowp->message);
        v.detail = "not compared: " + why + ", so there is no bound";
        break;
      }
      const DiffReport lr =
          compare_results(c, *lowp, b, ComparisonSpec{k.lowp, k.baseline, CompareRule::kMaxAbs, 0, INFINITY, ""}, nullptr, pass);
      rep.lowp_max_abs = lr.o.max_abs;
      const double bound = 2 * lr.o.max_abs + k.atol;
      v.pass = rep.o.max_abs <= bound && finite_ok;
      v.detail = "max abs " + fmt(rep.o.max_abs) + (v.pass ? " <= " : " > ") + "bound " + fmt(bound) + " (lowp max abs " +
                 fmt(lr.o.max_abs) + ")" + nf;
      break;
    }
    case CompareRule::kBitwise: {
      v.rule = "bitwise";
      const int64_t diff = (rep.o.count - rep.o.bit_identical) + (rep.lse.count - rep.lse.bit_identical);
      // bitwise means the fp32 result bits, not only the dtype bits
      const int64_t raw = po.raw_differ + pl.raw_differ;
      v.pass = diff == 0 && raw == 0;
      v.detail = std::to_string(raw) + " of " + std::to_string(rep.o.count + rep.lse.count) + " O/LSE values differ in bits";
      break;
    }
    case CompareRule::kMaxAbs: {
      v.rule = "max abs <= " + fmt(k.atol);
      v.pass = rep.o.max_abs <= k.atol && finite_ok;
      v.detail = "max abs " + fmt(rep.o.max_abs) + nf;
      break;
    }
  }
  if (rep.sampled) v.detail += " (sampled rows)";
  if (const std::string note = merge_base_note(a); !note.empty()) v.detail += "; " + note;  // the base-mix bug named
  return rep;
}

DiffReport diff_only(const CaseSpec& c, const Result& a, const Result& b, const DiffPassFn& pass) {
  return compare_results(c, a, b, ComparisonSpec{a.backend, b.backend, CompareRule::kMaxAbs, 0, INFINITY, ""}, nullptr, pass);
}

std::string comparison_label(const ComparisonSpec& k) { return k.backend + " vs " + k.baseline + " (" + rule_name(k.rule) + ")"; }

}  // namespace attnscope
