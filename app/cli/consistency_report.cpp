#include "consistency_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace attnscope::cli {

namespace {

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

}  // namespace

std::string position_line(const BackendConsistency& b, int cols) {
  const int n = static_cast<int>(b.max_abs.size());
  if (n == 0) return "";
  cols = std::max(1, std::min(cols, n));
  std::string s;
  for (int c = 0; c < cols; ++c) {
    const int p0 = static_cast<int>(static_cast<int64_t>(c) * n / cols),
              p1 = static_cast<int>(static_cast<int64_t>(c + 1) * n / cols);
    double m = 0;
    bool differ = false, nonfinite = false;
    for (int p = p0; p < p1; ++p) {
      m = std::max(m, b.max_abs[p]);
      differ |= b.rows_identical[p] < b.rows_per_position;
      nonfinite |= b.nonfinite[p] > 0;
    }
    if (nonfinite) {
      s += '!';
    } else if (!differ) {
      s += '.';
    } else if (!(m > 0)) {
      s += '0';
    } else {
      const int decade = 10 + static_cast<int>(std::floor(std::log10(m)));  // 1e-3 -> 7, 0.1 -> 9
      s += static_cast<char>('0' + std::clamp(decade, 1, 9));
    }
  }
  return s;
}

void print_consistency(std::ostream& o, const ConsistencyReport& r) {
  const auto [kmin, kmax] = std::minmax_element(r.kv_lens.begin(), r.kv_lens.end());
  const std::string kv = r.kv_lens.empty() ? "-"
                         : *kmin == *kmax  ? std::to_string(*kmin)
                                           : std::to_string(*kmin) + ".." + std::to_string(*kmax);
  o << "consistency of " << (r.case_name.empty() ? "(unnamed)" : r.case_name) << ": the last " << r.n << " tokens of "
    << r.kv_lens.size() << " requests (kv_len " << kv << ") as one prefill (q_len " << r.n << ") and as " << r.n
    << " decode steps, O of " << r.num_qo_heads << " qo heads x " << r.head_dim_vo << " dims in " << r.dtype
    << (r.kv_note.empty() ? "" : "; " + r.kv_note) << "\n\n";
  size_t wb = 9;
  for (const auto& b : r.backends) wb = std::max(wb, b.backend.size() + 2);
  o << pad("backend", wb) << "verdict\n";
  for (const auto& b : r.backends) {
    std::string t = b.verdict_text();
    if (b.verdict == ConsistencyVerdict::kDiffers || b.verdict == ConsistencyVerdict::kFailed)
      t += "; " + std::to_string(b.identical_rows()) + " of " + std::to_string(b.rows_per_position * r.n) + " rows bit-identical";
    else if (b.verdict == ConsistencyVerdict::kBitIdentical)
      t += " (" + std::to_string(b.identical_rows()) + " rows" + (b.promises_bits ? ", as promised" : "") + ")";
    o << pad(b.backend, wb) << t << "\n";
  }
  const int cols = std::min(r.n, 64);
  const int per = (r.n + cols - 1) / std::max(cols, 1);
  bool any = false;
  for (const auto& b : r.backends) any |= !b.max_abs.empty();
  if (any) {
    o << "\nper position 0.." << r.n - 1 << (per > 1 ? " (" + std::to_string(per) + " positions a column)" : "")
      << ": . bit-identical, 1-9 the decade of max |diff| (d: from 1e(d-10), 7 = 1e-3.., 9 = 0.1 and more), 0 bits "
         "differ at |diff| 0, ! NaN/Inf mismatch\n";
    for (const auto& b : r.backends)
      if (!b.max_abs.empty()) o << pad(b.backend, wb) << position_line(b, cols) << "\n";
  }
  o << "\n" << r.summary_line() << "\n";
}

nlohmann::ordered_json consistency_to_json(const ConsistencyReport& r) {
  nlohmann::ordered_json j;
  j["case"] = r.case_name;
  j["last"] = r.n;
  j["kv_lens"] = r.kv_lens;
  j["num_qo_heads"] = r.num_qo_heads;
  j["head_dim_vo"] = r.head_dim_vo;
  j["dtype"] = r.dtype;
  j["kv_note"] = r.kv_note;
  j["cancelled"] = r.cancelled;
  nlohmann::ordered_json bs = nlohmann::ordered_json::array();
  for (const auto& b : r.backends) {
    nlohmann::ordered_json x;
    x["backend"] = b.backend;
    x["verdict"] = verdict_name(b.verdict);
    x["text"] = b.verdict_text();
    x["promises_bit_identity"] = b.promises_bits;
    if (b.verdict == ConsistencyVerdict::kNotRun) {
      x["status"] = status_name(b.status);
      x["reason"] = b.reason;
      x["run"] = b.run;
    } else {
      x["status"] = "ok";
      x["first_differing_position"] = b.first_diff >= 0 ? nlohmann::ordered_json(b.first_diff) : nlohmann::ordered_json(nullptr);
      if (b.first_diff >= 0) {
        x["first_differing_request"] = b.first_request;
        x["first_differing_key"] = b.first_key;
        x["first_differing_key_by_request"] = b.first_key_by_request;  // -1: none
      }
      x["max_abs_diff"] = b.max_diff;
      x["rows_per_position"] = b.rows_per_position;
      x["identical_rows"] = b.identical_rows();
      x["max_abs_per_position"] = b.max_abs;
      x["identical_rows_per_position"] = b.rows_identical;
      x["nonfinite_mismatches_per_position"] = b.nonfinite;
    }
    bs.push_back(x);
  }
  j["backends"] = bs;
  j["exit_code"] = r.exit_code();
  j["summary"] = r.summary_line();
  return j;
}

}  // namespace attnscope::cli
