// Numeric comparison of a backend's result against a baseline (docs/conventions.md section 8).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/diff_chunks.h"
#include "attnscope/result.h"

namespace attnscope {

struct DiffStats {
  int64_t count = 0;   // elements compared (both computed)
  double max_abs = 0;  // over finite pairs
  double mean_abs = 0;
  double rel_l2 = 0;          // ||a - b|| / ||b||
  double nmse = 0;            // ||a - b||^2 / ||b||^2 ... as mean squares: sum (a-b)^2 / sum b^2
  uint64_t max_ulp = 0;       // in the case dtype
  int64_t bit_identical = 0;  // a and b have the same bits in the case dtype
  int64_t nan_a = 0, inf_a = 0, nan_b = 0, inf_b = 0;
  int64_t nonfinite_mismatch = 0;  // positions where exactly one side is NaN/Inf, or infinities differ
  bool allclose_loose = false;     // rtol 1e-2, atol 1e-3
  bool allclose_tight = false;     // rtol 1e-3, atol 1e-4
  int64_t worst_index = -1;        // element of max_abs
};

struct Verdict {
  bool pass = false;
  bool skipped = false;  // not compared: a side is not compiled or does not support the case
  std::string rule;      // e.g. "allclose(rtol=0.01, atol=0.001)"
  std::string detail;    // the numbers that decided it
};

struct DiffReport {
  std::string backend, baseline;
  bool available = false;  // both results ok
  std::string unavailable_reason;
  DiffStats o;                         // on O
  DiffStats lse;                       // on LSE (natural log; -inf == -inf counts as equal)
  int64_t rows_compared = 0;           // (token, head) rows
  bool sampled = false;                // a side computed only sampled rows
  std::vector<float> error_map;        // [total_q * qo_heads] max |a - b| over head_dim; NaN where not compared
  std::optional<double> lowp_max_abs;  // twice_lowp: max|lowp - baseline|
  Verdict verdict;
  // FP8 (docs/conventions.md section 10), where the session computed the original ideal: O of the
  // backend against it (kernel and quantisation error together) and of the baseline against it (the
  // quantisation error when the baseline is a reference). The verdict above is the kernel error's.
  std::optional<DiffStats> vs_original, baseline_vs_original;
};

// The order-defined pass over O and LSE of `a` against `b` (diff_chunks.h): one partial per chunk,
// the error map, the rows compared. host_diff_pass computes it here; a device computes the same bits
// (backends/gpu/compare_device.h). rtol / atol: the rule's allclose bounds (DiffPartial::outside).
struct DiffPass {
  std::vector<DiffPartial> o, lse;  // per chunk, in chunk order; lse empty where a side has no LSE
  std::vector<float> error_map;     // [total_q * qo_heads] max |a - b| over head_dim; NaN where not compared
  int64_t rows_compared = 0;        // (token, head) rows
};
// threads: 0 = as many as the size is worth; the bits do not depend on it (chunks are independent).
DiffPass host_diff_pass(const CaseSpec& c, const Result& a, const Result& b, double rtol, double atol, int threads = 0);
// Who computes a pass (a and b are ok); compare_results uses host_diff_pass where none is given.
using DiffPassFn = std::function<DiffPass(const Result& a, const Result& b, double rtol, double atol)>;
// The chunks' partials added in chunk order.
DiffPartial fold_chunks(const std::vector<DiffPartial>& chunks);

// Statistics and verdict of `a` against baseline `b` under rule `k`. `lowp` is needed by
// twice_lowp (its max error against the same baseline sets the bound); `pass` computes the
// statistics (the lowp comparison's too), the host where empty.
DiffReport compare_results(const CaseSpec& c, const Result& a, const Result& b, const ComparisonSpec& k, const Result* lowp,
                           const DiffPassFn& pass = nullptr);

// Statistics of O and LSE of `a` against `b`, no verdict (both ok, else `available` is false).
DiffReport diff_only(const CaseSpec& c, const Result& a, const Result& b, const DiffPassFn& pass = nullptr);

// ULP distance between two values in dtype t (each rounded to t first).
uint64_t ulp_distance(DType t, float a, float b);

// FNV-1a over the bits of O and LSE: the fingerprint a repro case records.
std::string result_digest(const Result& r);

// "backend vs baseline (rule)": how every report names a comparison.
std::string comparison_label(const ComparisonSpec& k);

}  // namespace attnscope
