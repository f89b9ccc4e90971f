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
    case Status::kNoDevice:
      return "no device";
    case Status::kError:
      return "error";
    case Status::kCancelled:
      return "cancelled";
  }
  return "?";
}

BackendFamily cpu_family() {
  BackendFamily f;
  f.name = "cpu";
  f.ids = {"cpu.reference", "cpu.lowp", "cpu.tiled"};
  f.compiled = true;
  f.note = "attnscope's CPU backends";
  f.make = [](const std::string& id) -> std::unique_ptr<Backend> {
    if (id == "cpu.reference") return make_cpu_reference();
    if (id == "cpu.lowp") return make_cpu_lowp();
    return make_cpu_tiled();
  };
  return f;
}

const std::vector<BackendFamily>& backend_families() {
  static const std::vector<BackendFamily> families = {cpu_family(), cuda_family(), flashinfer_family(), cudnn_family()};
  return families;
}

const BackendFamily* family_of(const std::string& id) {
  for (const auto& f : backend_families())
    for (const auto& k : f.ids)
      if (k == id) return &f;
  return nullptr;
}

const std::vector<std::string>& known_backends() {
  static const std::vector<std::string> ids = [] {
    std::vector<std::string> v;
    for (const auto& f : backend_families()) v.insert(v.end(), f.ids.begin(), f.ids.end());
    return v;
  }();
  return ids;
}

bool is_known_backend(const std::string& id) { return family_of(id) != nullptr; }

bool is_gpu_backend(const std::string& id) {
  const BackendFamily* f = family_of(id);
  return f && f->name != "cpu";
}

std::vector<std::string> default_bench_backends() {
  std::vector<std::string> v = {"cuda.flash"};
  for (const auto& f : backend_families())
    if (f.name != "cpu" && f.name != "cuda") v.insert(v.end(), f.ids.begin(), f.ids.end());
  return v;
}

std::string known_backends_text() {
  std::string s;
  for (const auto& k : known_backends()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

std::unique_ptr<Backend> make_backend(const std::string& id) {
  const BackendFamily* f = family_of(id);
  if (!f) return nullptr;
  return f->make(id);
}

namespace {

class NotCompiled final : public Backend {
 public:
  NotCompiled(std::string id, std::string why) : id_(std::move(id)), why_("not compiled: " + std::move(why)) {}
  std::string id() const override { return id_; }
  std::string describe() const override { return why_; }
  std::string check(const CaseSpec&) const override { return why_; }
  Result run(const CaseSpec&, const Plan&, const Workload&, const RunOptions&) override {
    Result r;
    r.backend = id_;
    r.status = Status::kNotCompiled;
    r.message = why_;
    return r;
  }

 private:
  std::string id_, why_;
};

}  // namespace

std::unique_ptr<Backend> make_not_compiled_backend(const std::string& id, const std::string& why) {
  return std::make_unique<NotCompiled>(id, why);
}

bool cuda_compiled() {
  const BackendFamily* f = family_of("cuda.flash");
  return f && f->compiled;
}

Status status_of_reason(const std::string& why) {
  if (why.rfind("not compiled", 0) == 0) return Status::kNotCompiled;
  if (why.rfind("no CUDA device", 0) == 0) return Status::kNoDevice;
  return Status::kUnsupported;
}

std::string expressions_for(const Backend& b, const CaseSpec& c, CaseSpec* out) {
  *out = c;
  using E = Backend::Expressions;
  // a family absent from this build: check() says "not compiled", the more basic reason
  if (const BackendFamily* f = family_of(b.id()); f && !f->compiled) return "";
  if (c.attention.mask_mod && b.mask_mod_support() == E::kNone)
    return b.id() +
           " runs only the built-in masks, not a mask_mod (the cpu backends, cuda.reference, cuda.naive, "
           "cuda.flash and flashinfer.prefill run it)";
  if (!c.attention.score_mod) return "";
  const E s = b.score_mod_support();
  if (s == E::kFull) return "";
  if (s == E::kNone)
    return b.id() +
           " does not run a score_mod (the cpu backends, cuda.reference, cuda.naive and cuda.flash evaluate any; "
           "the FlashInfer backends run " +
           lowered_score_forms_text() + ")";
  const auto lowered = s == E::kLowered ? lower_score_mod(Expr::parse(*c.attention.score_mod, Expr::Kind::kScore)) : std::nullopt;
  if (!lowered)
    return b.id() + " runs a score_mod only of the forms it takes as parameters (" + lowered_score_forms_text() + "), not \"" +
           *c.attention.score_mod + "\" (the cpu backends, cuda.reference, cuda.naive and cuda.flash evaluate any)";
  out->attention.score_mod.reset();
  out->attention.soft_cap = lowered->soft_cap;
  out->attention.alibi = lowered->alibi;
  return "";
}

Result run_backend(Backend& b, const CaseSpec& c_in, const Plan& p, const Workload& w, const RunOptions& opt) {
  Result r;
  r.backend = b.id();
  try {
    CaseSpec c;
    std::string why = expressions_for(b, c_in, &c);
    if (why.empty()) why = b.check(c);
    if (!why.empty()) {
      r.status = status_of_reason(why);
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
