// The registry: every question about backend ids answered from the families' descriptors, and the
// helpers that run any backend (expressions, check, exceptions as statuses).
#include "attnscope/registry.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "attnscope/fp8.h"
#include "attnscope/mask_expr.h"
#include "attnscope/sparse_gather.h"

namespace attnscope {

namespace {

// The family whose written ids (BackendFamily::id_prefix) `id` is one of, well-formed.
const BackendFamily* pattern_family(const std::string& id) {
  for (const auto& f : backend_families())
    if (!f.id_prefix.empty() && id.rfind(f.id_prefix, 0) == 0 && f.parse_id && f.parse_id(id).empty()) return &f;
  return nullptr;
}

// Descriptors of written ids, made on first use; a map's nodes stay put, so the pointers handed out
// stay valid (the GUI's runner and the CLI ask from different threads).
std::mutex written_mu;
std::map<std::string, BackendInfo>& written_infos() {
  static std::map<std::string, BackendInfo> m;
  return m;
}

struct UserCodePolicy {
  std::mutex mu;
  bool all = false;
  std::set<std::string> files;
  std::atomic<double> timeout{kDefaultUserCodeTimeout};
};
UserCodePolicy& user_code_policy() {
  static UserCodePolicy p;
  return p;
}

}  // namespace

const BackendFamily* family_of(const std::string& id) {
  for (const auto& f : backend_families())
    for (const auto& b : f.backends)
      if (b.id == id) return &f;
  return pattern_family(id);
}

const BackendInfo* backend_info(const std::string& id) {
  for (const auto& f : backend_families())
    for (const auto& b : f.backends)
      if (b.id == id) return &b;
  const BackendFamily* f = pattern_family(id);
  if (!f) return nullptr;
  std::lock_guard<std::mutex> l(written_mu);
  auto it = written_infos().find(id);
  if (it == written_infos().end()) {
    BackendInfo b = f->pattern;
    b.id = id;
    it = written_infos().emplace(id, std::move(b)).first;
  }
  return &it->second;
}

std::string user_code_file(const std::string& id) {
  const BackendFamily* f = family_of(id);
  return f && f->user_code_file ? f->user_code_file(id) : "";
}

void allow_all_user_code(bool on) {
  std::lock_guard<std::mutex> l(user_code_policy().mu);
  user_code_policy().all = on;
}

void allow_user_code_file(const std::string& path) {
  std::lock_guard<std::mutex> l(user_code_policy().mu);
  user_code_policy().files.insert(path);
}

bool user_code_allowed(const std::string& id) {
  const std::string file = user_code_file(id);
  if (file.empty()) return true;
  std::lock_guard<std::mutex> l(user_code_policy().mu);
  return user_code_policy().all || user_code_policy().files.count(file) > 0;
}

std::vector<std::string> user_code_needing_permission(const std::vector<std::string>& ids) {
  std::vector<std::string> v;
  for (const auto& id : ids)
    if (!user_code_allowed(id)) v.push_back(id);
  return v;
}

void set_user_code_timeout(double seconds) { user_code_policy().timeout = seconds; }
double user_code_timeout() { return user_code_policy().timeout; }

const std::vector<std::string>& known_backends() {
  static const std::vector<std::string> ids = [] {
    std::vector<std::string> v;
    for (const auto& f : backend_families())
      for (const auto& b : f.backends) v.push_back(b.id);
    return v;
  }();
  return ids;
}

bool is_known_backend(const std::string& id) { return backend_info(id) != nullptr; }

std::string known_backends_text() {
  std::string s;
  for (const auto& k : known_backends()) s += (s.empty() ? "" : ", ") + k;
  for (const auto& f : backend_families())
    if (!f.id_prefix.empty()) s += (s.empty() ? "" : ", ") + f.pattern.id;
  return s;
}

const BackendIds& registry_ids() {
  static const BackendIds ids{&is_known_backend, &known_backends_text};
  return ids;
}

bool is_gpu_backend(const std::string& id) {
  const BackendInfo* b = backend_info(id);
  return b && b->gpu;
}

std::vector<std::string> default_bench_backends() {
  std::vector<std::string> v;
  for (const auto& f : backend_families())
    for (const auto& b : f.backends)
      if (b.bench_default) v.push_back(b.id);
  return v;
}

std::vector<std::string> backends_with_role(Role r) {
  std::vector<std::string> v;
  for (const auto& f : backend_families())
    for (const auto& b : f.backends)
      if (b.role == r) v.push_back(b.id);
  return v;
}

std::string backend_for_role(Role r) {
  const auto v = backends_with_role(r);
  return v.empty() ? "" : v.front();
}

bool cuda_compiled() {
  for (const auto& f : backend_families())
    for (const auto& b : f.backends)
      if (b.gpu && f.compiled) return true;
  return false;
}

std::unique_ptr<Backend> make_backend(const std::string& id) {
  const BackendFamily* f = family_of(id);
  if (!f) return nullptr;
  if (!f->compiled || !f->make) return make_not_compiled_backend(id, f->name + " family: " + f->note);
  return f->make(id);
}

namespace {

// "a, b and c" from the ids whose support `pick` accepts (the refusal messages name who runs it).
template <class Pick>
std::string who_runs(Pick pick) {
  std::vector<std::string> v;
  for (const auto& f : backend_families())
    for (const auto& b : f.backends)
      if (pick(b)) v.push_back(b.id);
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : i + 1 == v.size() ? " and " : ", ") + v[i];
  return s.empty() ? "no backend of this build" : s;
}

// "" when b takes the case's sinks and trees (from its descriptor), else the refusal naming who does.
std::string shapes_for(const BackendInfo& b, const CaseSpec& c) {
  if (c.is_mla()) {
    const unsigned form = c.mla_absorbed() ? kMlaAbsorbed : kMlaNonAbsorbed;
    const std::string what =
        c.mla_absorbed() ? "MLA's absorbed form (/mla/absorbed true)" : "MLA's non-absorbed form (/mla/absorbed false)";
    if (!(b.mla & form))
      return b.id + " does not take " + what + "; " + who_runs([form](const BackendInfo& i) { return (i.mla & form) != 0; }) +
             " do";
  }
  if (c.is_sparse() && b.sparse == SparseRun::kNo)
    return b.id + " does not take DeepSeek sparse attention (/sparse: the indexer's top-k selection); " +
           who_runs([](const BackendInfo& i) { return i.sparse != SparseRun::kNo; }) + " do";
  if (c.has_sinks() && !b.sinks)
    return b.id + " does not take attention sinks (/attention/sinks); " + who_runs([](const BackendInfo& i) { return i.sinks; }) +
           " do";
  if (c.has_trees() && !b.trees) {
    size_t r = 0;
    while (c.requests[r].tree_parents.empty()) ++r;
    return b.id + " does not take speculative-decoding trees (/requests/" + std::to_string(r) + "/tree_parents); " +
           who_runs([](const BackendInfo& i) { return i.trees; }) + " do";
  }
  return "";
}

// "" when `id` runs no user code or the user allowed its file, else the refusal with the way to allow it.
std::string permission_for(const std::string& id) {
  if (user_code_allowed(id)) return "";
  return "refused: " + id + " runs the code in " + user_code_file(id) +
         ", which came with the case; it runs only with your permission (attnscope-cli --allow-python; the GUI asks once "
         "per file)";
}

}  // namespace

std::string expressions_for(const BackendInfo& b, const CaseSpec& c, CaseSpec* out) {
  *out = c;
  using E = Expressions;
  if (c.attention.mask_mod && b.mask_mod == E::kNone)
    return b.id + " runs only the built-in masks, not a mask_mod (" +
           who_runs([](const BackendInfo& i) { return i.mask_mod != E::kNone; }) + " run it)";
  if (!c.attention.score_mod) return "";
  const E s = b.score_mod;
  if (s == E::kFull) return "";
  const std::string full = who_runs([](const BackendInfo& i) { return i.score_mod == E::kFull; });
  if (s == E::kNone)
    return b.id + " does not run a score_mod (" + full + " evaluate any; " +
           who_runs([](const BackendInfo& i) { return i.score_mod == E::kLowered; }) + " run " + lowered_score_forms_text() + ")";
  const auto lowered = lower_score_mod(Expr::parse(*c.attention.score_mod, Expr::Kind::kScore));
  if (!lowered)
    return b.id + " runs a score_mod only of the forms it takes as parameters (" + lowered_score_forms_text() + "), not \"" +
           *c.attention.score_mod + "\" (" + full + " evaluate any)";
  out->attention.score_mod.reset();
  out->attention.soft_cap = lowered->soft_cap;
  out->attention.alibi = lowered->alibi;
  return "";
}

std::string fp8_for(const BackendInfo& b, const CaseSpec& c) {
  if (!c.fp8_kv()) return "";
  const ScaleGranularity g = c.kv_cache.scales.granularity;
  const std::string what = std::string(fp8_name(*c.kv_cache.fp8)) + " KV cache with " + granularity_name(g) + " scales";
  if (!(b.fp8_kv_scales & fp8_bit(g))) {
    std::string takes;
    for (auto x : {ScaleGranularity::kTensor, ScaleGranularity::kHead, ScaleGranularity::kToken})
      if (b.fp8_kv_scales & fp8_bit(x)) takes += std::string(takes.empty() ? "" : ", ") + granularity_name(x);
    return b.id + " does not take an " + what + " (it takes " +
           (takes.empty() ? std::string("no FP8 cache") : "FP8 with " + takes + " scales") + "; " +
           who_runs([g](const BackendInfo& i) { return (i.fp8_kv_scales & fp8_bit(g)) != 0; }) + " do)";
  }
  if (c.fp8_attention && !b.fp8_attention)
    return b.id + " does not run FP8 attention (Q in FP8, /fp8_attention); " +
           who_runs([g](const BackendInfo& i) { return i.fp8_attention && (i.fp8_kv_scales & fp8_bit(g)); }) + " do";
  return "";
}

// "" unless b runs /sparse only in the gathered form (sparse_gather.h) and the case has none.
static std::string gathered_refusal(const BackendInfo& b, const CaseSpec& c, const PageTable* pages = nullptr) {
  if (!c.is_sparse() || b.sparse != SparseRun::kGathered) return "";
  const std::string no = sparse_gather_refusal(c, pages);
  return no.empty()
             ? ""
             : b.id + " runs /sparse in its gathered form (one request per query row over a page table of page size 1): " + no;
}

std::string refusal(const std::string& id, const CaseSpec& c) {
  const BackendInfo* info = backend_info(id);
  if (!info) return "unknown backend " + id;
  const BackendFamily* f = family_of(id);
  CaseSpec run_as = c;
  std::string why;
  if (!f || f->compiled) {  // as run_backend: a family absent from this build says "not compiled"
    why = permission_for(id);
    if (why.empty()) why = expressions_for(*info, c, &run_as);
    if (why.empty()) why = fp8_for(*info, c);
    if (why.empty()) why = shapes_for(*info, c);
    if (why.empty()) why = gathered_refusal(*info, c);
  }
  return why.empty() ? make_backend(id)->check(run_as) : why;
}

// The gathered form of a /sparse case for a backend that runs it so (sparse_gather.h), with the
// libraries' own plans of its units for a backend that reads them; nullopt for another case or backend, or (mask bits instead)
// where the case has no gathered form and the backend runs the mask bits then.
static std::optional<SparseGather> gathered_form(const BackendInfo& info, const CaseSpec& c, const Plan& p) {
  const bool any = info.sparse == SparseRun::kGathered || info.sparse == SparseRun::kGatheredElsePlan;
  if (!c.is_sparse() || !any || !sparse_gather_refusal(c, &p.pages).empty()) return std::nullopt;
  SparseGather g = gather_sparse(c, p);
  if (info.library_plan)
    for (const auto& f : backend_families())
      if (f.library_plan) f.library_plan(g.c, g.p.units, &g.p.library);
  return g;
}

Result run_backend(Backend& b, const CaseSpec& c_in, const Plan& p, const Workload& w, const RunOptions& opt,
                   const BackendInfo* info) {
  Result r;
  r.backend = b.id();
  try {
    const BackendInfo unknown{b.id()};
    if (!info) info = backend_info(b.id());
    if (!info) info = &unknown;
    CaseSpec c = c_in;
    std::string why;
    // a family absent from this build: check() says "not compiled", the more basic reason
    const BackendFamily* f = family_of(b.id());
    if (!f || f->compiled) why = permission_for(b.id());
    if (why.empty() && (!f || f->compiled)) why = expressions_for(*info, c_in, &c);
    if (why.empty() && (!f || f->compiled)) why = fp8_for(*info, c_in);
    if (why.empty() && (!f || f->compiled)) why = shapes_for(*info, c_in);
    if (why.empty() && (!f || f->compiled)) why = gathered_refusal(*info, c_in, &p.pages);
    const std::optional<SparseGather> g = why.empty() ? gathered_form(*info, c, p) : std::nullopt;
    if (why.empty()) why = b.check(g ? g->c : c);
    if (!why.empty()) {
      r.status = status_of_reason(why);
      r.message = why;
      return r;
    }
    const auto t0 = std::chrono::steady_clock::now();
    RunOptions o = opt;
    // a backend that lowered an expression may read other inputs than the key's: its own workload
    if (c_in.attention.mask_mod || c_in.attention.score_mod) o.inputs_key.clear();
    if (g) {
      o.inputs_case = &c;
      o.inputs_plan = &p;
    }
    r = g ? b.run(g->c, g->p, w, o) : b.run(c, p, w, o);
    r.timing.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (g && r.ok())
      r.message += std::string(r.message.empty() ? "" : "; ") + "/sparse gathered: " + std::to_string(g->c.requests.size()) +
                   " query rows as requests over " + std::to_string(g->kept) +
                   " kept tokens, a page table of page size 1 holding their slots in the case's pool";
    else if (c_in.is_sparse() && info->sparse == SparseRun::kGatheredElsePlan && r.ok())
      r.message += std::string(r.message.empty() ? "" : "; ") +
                   "/sparse through the plan's mask bits (no gathered form: " + sparse_gather_refusal(c, &p.pages) + ")";
    if (opt.cancel && opt.cancel->load() && r.ok()) {
      r.status = Status::kCancelled;
      r.message = "cancelled";
      r.device.reset();  // never compared: its device memory goes at once
    }
  } catch (const std::exception& e) {
    r.status = Status::kError;
    r.message = e.what();
    r.o.clear();
    r.lse.clear();
    r.device.reset();
  }
  return r;
}

Plan plan_case(const CaseSpec& c) {
  Plan p = make_plan(c);
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& f : backend_families())
    if (f.library_plan) f.library_plan(c, p.units, &p.library);
  p.plan_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

}  // namespace attnscope
