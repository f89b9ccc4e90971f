// Result statuses and row sampling.
#include "attnscope/result.h"

namespace attnscope {

const char* status_name(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kUnsupported:
      return "unsupported";
    case Status::kNotCompiled:
      return "not compiled";
    case Status::kNoDevice:
      return "no device";
    case Status::kError:
      return "error";
    case Status::kCancelled:
      return "cancelled";
  }
  return "?";
}

Status status_of_reason(const std::string& why) {
  if (why.rfind("not compiled", 0) == 0) return Status::kNotCompiled;
  if (why.rfind("no CUDA device", 0) == 0) return Status::kNoDevice;
  return Status::kUnsupported;
}

std::vector<int> sampled_rows(int q_len, int n) {
  std::vector<int> rows;
  if (n >= q_len) {
    for (int i = 0; i < q_len; ++i) rows.push_back(i);
    return rows;
  }
  if (n == 1) return {q_len - 1};
  for (int i = 0; i < n; ++i) {
    const int q = static_cast<int>((static_cast<int64_t>(i) * (q_len - 1)) / (n - 1));
    if (rows.empty() || rows.back() != q) rows.push_back(q);
  }
  return rows;
}

std::vector<uint8_t> row_selection(const CaseSpec& c, std::optional<int> n) {
  std::vector<uint8_t> sel(static_cast<size_t>(c.total_q()), n ? 0 : 1);
  if (!n) return sel;
  int64_t off = 0;
  for (const auto& r : c.requests) {
    for (int q : sampled_rows(r.q_len, *n)) sel[off + q] = 1;
    off += r.q_len;
  }
  return sel;
}

}  // namespace attnscope
