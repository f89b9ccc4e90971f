// Backend registry and the helpers every backend shares.
#include <chrono>
#include <exception>

#include "attnscope/backend.h"

namespace attnscope {

const char* status_name(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kUnsupported:
      return "unsupported";
    case Status::kNotCompiled:
      return "not compiled";
    case Status::kError:
      return "error";
    case Status::kCancelled:
      return "cancelled";
  }
  return "?";
}

const std::vector<std::string>& known_backends() {
  static const std::vector<std::string> ids = {"cpu.reference", "cpu.lowp",   "cpu.tiled",        "cuda.reference",
                                               "cuda.naive",    "cuda.flash", "cuda.flash_padded"};
  return ids;
}

bool is_known_backend(const std::string& id) {
  for (const auto& k : known_backends())
    if (k == id) return true;
  return false;
}

std::string known_backends_text() {
  std::string s;
  for (const auto& k : known_backends()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

std::unique_ptr<Backend> make_backend(const std::string& id) {
  if (id == "cpu.reference") return make_cpu_reference();
  if (id == "cpu.lowp") return make_cpu_lowp();
  if (id == "cpu.tiled") return make_cpu_tiled();
  if (id.rfind("cuda.", 0) == 0 && is_known_backend(id)) return make_cuda_backend(id);
  return nullptr;
}

Result run_backend(Backend& b, const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& opt) {
  Result r;
  r.backend = b.id();
  try {
    const std::string why = b.check(c);
    if (!why.empty()) {
      r.status = (why.rfind("not compiled", 0) == 0) ? Status::kNotCompiled : Status::kUnsupported;
      r.message = why;
      return r;
    }
    const auto t0 = std::chrono::steady_clock::now();
    r = b.run(c, p, w, opt);
    r.timing.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (opt.cancel && opt.cancel->load() && r.ok()) {
      r.status = Status::kCancelled;
      r.message = "cancelled";
    }
  } catch (const std::exception& e) {
    r.status = Status::kError;
    r.message = e.what();
    r.o.clear();
    r.lse.clear();
  }
  return r;
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
