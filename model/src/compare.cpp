// Comparison statistics and verdicts.
#include "attnscope/compare.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace attnscope {

namespace {

// Maps float bits (in dtype t) to an integer line where adjacent values differ by 1.
int64_t ordered(DType t, float x) {
  const uint32_t b = dtype_bits(t, x);
  const int width = t == DType::kFp32 ? 32 : 16;
  const uint32_t sign = 1u << (width - 1);
  const int64_t mag = static_cast<int64_t>(b & (sign - 1));
  return (b & sign) ? -mag : mag;
}

std::string fmt(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

struct Acc {
  double sum_abs = 0, sum_sq_err = 0, sum_sq_ref = 0;
  bool loose = true, tight = true;
};

void accumulate(DiffStats& s, Acc& acc, DType t, float a, float b, int64_t index) {
  ++s.count;
  const bool fa = std::isfinite(a), fb = std::isfinite(b);
  if (std::isnan(a))
    ++s.nan_a;
  else if (std::isinf(a))
    ++s.inf_a;
  if (std::isnan(b))
    ++s.nan_b;
  else if (std::isinf(b))
    ++s.inf_b;
  if (!fa || !fb) {
    // equal infinities (LSE -inf of a fully masked row on both sides) agree exactly
    const bool same_inf = std::isinf(a) && std::isinf(b) && (a > 0) == (b > 0);
    if (same_inf) {
      ++s.bit_identical;
    } else {
      ++s.nonfinite_mismatch;
      acc.loose = acc.tight = false;
    }
    return;
  }
  const double e = std::fabs(static_cast<double>(a) - b);
  if (e > s.max_abs || s.worst_index < 0) {
    if (e >= s.max_abs) s.worst_index = index;
    s.max_abs = std::max(s.max_abs, e);
  }
  acc.sum_abs += e;
  acc.sum_sq_err += e * e;
  acc.sum_sq_ref += static_cast<double>(b) * b;
  if (e > 1e-3 + 1e-2 * std::fabs(b)) acc.loose = false;
  if (e > 1e-4 + 1e-3 * std::fabs(b)) acc.tight = false;
  if (dtype_bits(t, a) == dtype_bits(t, b)) ++s.bit_identical;
  s.max_ulp = std::max<uint64_t>(s.max_ulp, ulp_distance(t, a, b));
}

void finish(DiffStats& s, const Acc& acc) {
  const int64_t finite = s.count - s.nonfinite_mismatch;
  s.mean_abs = finite > 0 ? acc.sum_abs / finite : 0;
  s.rel_l2 = acc.sum_sq_ref > 0 ? std::sqrt(acc.sum_sq_err / acc.sum_sq_ref) : (acc.sum_sq_err > 0 ? INFINITY : 0);
  s.nmse = acc.sum_sq_ref > 0 ? acc.sum_sq_err / acc.sum_sq_ref : (acc.sum_sq_err > 0 ? INFINITY : 0);
  s.allclose_loose = acc.loose;
  s.allclose_tight = acc.tight;
}

}  // namespace

uint64_t ulp_distance(DType t, float a, float b) {
  if (!std::isfinite(a) || !std::isfinite(b)) return a == b ? 0 : std::numeric_limits<uint64_t>::max();
  const int64_t d = ordered(t, a) - ordered(t, b);
  return static_cast<uint64_t>(d < 0 ? -d : d);
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

DiffReport compare_results(const CaseSpec& c, const Result& a, const Result& b, const ComparisonSpec& k, const Result* lowp) {
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
  const int Hq = c.num_qo_heads, Dv = c.head_dim_vo;
  const int64_t T = c.total_q();
  rep.error_map.assign(static_cast<size_t>(T) * Hq, std::numeric_limits<float>::quiet_NaN());
  Acc oa, la;
  for (int64_t t = 0; t < T; ++t) {
    if (!a.row_ok(t) || !b.row_ok(t)) continue;
    for (int h = 0; h < Hq; ++h) {
      const int64_t row = t * Hq + h;
      float worst = 0;
      for (int d = 0; d < Dv; ++d) {
        const int64_t i = row * Dv + d;
        accumulate(rep.o, oa, c.dtype, a.o[i], b.o[i], i);
        const float e = std::fabs(a.o[i] - b.o[i]);
        worst = std::isnan(e) ? INFINITY : std::max(worst, e);
      }
      rep.error_map[row] = worst;
      if (!a.lse.empty() && !b.lse.empty())  // a backend may return O alone (python: functions)
        accumulate(rep.lse, la, DType::kFp32, a.lse[row], b.lse[row], row);
      ++rep.rows_compared;
    }
  }
  finish(rep.o, oa);
  finish(rep.lse, la);

  Verdict& v = rep.verdict;
  const bool finite_ok = rep.o.nonfinite_mismatch == 0 && rep.lse.nonfinite_mismatch == 0;
  const std::string nf =
      finite_ok ? "" : "; " + std::to_string(rep.o.nonfinite_mismatch + rep.lse.nonfinite_mismatch) + " NaN/Inf mismatches";
  switch (k.rule) {
    case CompareRule::kAllclose: {
      v.rule = "allclose(rtol=" + fmt(k.rtol) + ", atol=" + fmt(k.atol) + ")";
      int64_t bad = 0;
      for (int64_t t = 0; t < T; ++t) {
        if (!a.row_ok(t) || !b.row_ok(t)) continue;
        for (int64_t i = t * Hq * Dv; i < (t + 1) * Hq * Dv; ++i)
          if (!(std::fabs(a.o[i] - b.o[i]) <= k.atol + k.rtol * std::fabs(b.o[i]))) ++bad;
      }
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
          compare_results(c, *lowp, b, ComparisonSpec{k.lowp, k.baseline, CompareRule::kMaxAbs, 0, INFINITY, ""}, nullptr);
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
      int64_t raw = 0;
      for (int64_t t = 0; t < T; ++t) {
        if (!a.row_ok(t) || !b.row_ok(t)) continue;
        for (int64_t i = t * Hq * Dv; i < (t + 1) * Hq * Dv; ++i) raw += f32_bits(a.o[i]) != f32_bits(b.o[i]);
        if (!a.lse.empty() && !b.lse.empty())
          for (int64_t i = t * Hq; i < (t + 1) * Hq; ++i) raw += f32_bits(a.lse[i]) != f32_bits(b.lse[i]);
      }
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
  return rep;
}

DiffReport diff_only(const CaseSpec& c, const Result& a, const Result& b) {
  return compare_results(c, a, b, ComparisonSpec{a.backend, b.backend, CompareRule::kMaxAbs, 0, INFINITY, ""}, nullptr);
}

std::string comparison_label(const ComparisonSpec& k) { return k.backend + " vs " + k.baseline + " (" + rule_name(k.rule) + ")"; }

}  // namespace attnscope
