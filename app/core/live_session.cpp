#include "live_session.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "attnscope/registry.h"
#include "attnscope/sha256.h"
#include "cuda_graph_run.h"

namespace attnscope {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

int64_t result_bytes(const Result& r) {
  int64_t b = static_cast<int64_t>((r.o.size() + r.lse.size()) * sizeof(float) + r.row_valid.size() + r.message.size());
  if (r.graph) b += static_cast<int64_t>((r.graph->o.size() + r.graph->lse.size()) * sizeof(float));
  return b + 1024;
}

int64_t workload_size(const Workload& w) {
  const size_t floats = w.q.size() + w.k_pool.size() + w.v_pool.size() + w.k_scale.size() + w.v_scale.size() + w.k_orig.size() +
                        w.v_orig.size() + w.q_orig.size();
  return static_cast<int64_t>(floats * sizeof(float) + w.q_indptr.size() * sizeof(int64_t));
}

int64_t diff_bytes(const DiffReport& d) { return static_cast<int64_t>(d.error_map.size() * sizeof(float)) + 4096; }

// Results of the previous edit can stand in for this one's (stale) only where every view indexes
// them the same way: the same requests, heads and head dims.
bool same_shape(const CaseSpec& a, const CaseSpec& b) {
  if (a.requests.size() != b.requests.size() || a.num_qo_heads != b.num_qo_heads || a.head_dim_vo != b.head_dim_vo ||
      a.head_dim_qk != b.head_dim_qk || a.num_kv_heads != b.num_kv_heads)
    return false;
  for (size_t r = 0; r < a.requests.size(); ++r)
    if (a.requests[r].q_len != b.requests[r].q_len || a.requests[r].kv_len != b.requests[r].kv_len) return false;
  return true;
}

struct Fp8Ideals {
  ResultList::Ptr original, dequantised;
  std::optional<DiffReport> quantisation;
  std::string note;
};

// The CPU reference the FP8 ideals are computed with (fp8_ideals, session.cpp).
std::string host_reference() {
  for (const auto& id : backends_with_role(Role::kReference))
    if (!is_gpu_backend(id)) return id;
  return "";
}

// One live run: the results made so far (fresh) and the previous edit's (stale), shown in the
// case's backend order. Where sample_first says so, a sampled pass (the row-sampling backends on
// kSampleFirstRows rows per request, their ideals and comparisons), then the full pass, which
// re-runs only what the rows change.
class LiveRun {
 public:
  LiveRun(const CaseFile& f, const LiveOptions& o) : o_(o), opt_(o.session) {
    s_.file = f;
    s_.sample_rows = opt_.sample_rows ? opt_.sample_rows : f.spec.sample_rows;
    opt_.share_device_inputs = true;
    opt_.device_copies = true;  // comparisons where the data is (GPU backends keep O and LSE there too)
    ids_ = session_backends(s_, opt_);
    if (!s_.sample_rows) first_ = sample_first(s_.spec(), ids_, o.full_reference_budget);
  }

  std::shared_ptr<const Session> run() {
    if (!plan_and_environment() || stopped()) return nullptr;
    publish();
    const HostInputs h = host_inputs_needed(s_, ids_);
    std::shared_ptr<const Workload> w = std::make_shared<const Workload>();
    if (h.needed && h.fits && !(w = inputs())) return nullptr;
    if (first_ && h.fits && !full_in_cache() && !sampled_pass(*w, h)) return nullptr;
    if (!pass(*w, h)) return nullptr;
    if (!s_.shows_sampled()) s_.sampled_rows = 0;
    return std::make_shared<const Session>(s_);
  }

 private:
  struct Shown {
    ResultList::Ptr result;
    bool stale = false, sampled = false;
    std::string key;  // its backend_key (empty: the previous edit's)
  };

  bool stopped() const { return (o_.superseded && o_.superseded->load()) || (opt_.cancel && opt_.cancel->load()); }
  bool cancelled() const { return opt_.cancel && opt_.cancel->load(); }

  template <class T>
  std::shared_ptr<const T> cached(const std::string& key) {
    return o_.cache ? o_.cache->get_as<T>(key) : nullptr;
  }
  void keep(const std::string& key, std::shared_ptr<const void> v, int64_t bytes) {
    if (o_.cache) o_.cache->put(key, std::move(v), bytes);
  }
  void count(const std::function<void(StageCounts&)>& f) {
    if (o_.cache) o_.cache->count(f);
  }
  // A stage's name in Session::stages: the sampled pass's stages of sampled rows say so.
  std::string stage(const std::string& name, bool rows_matter = true) const {
    return sampling_ && rows_matter ? name + " (sampled)" : name;
  }

  bool plan_and_environment() {
    const auto t0 = Clock::now();
    s_.plan = o_.plan ? *o_.plan : plan_case(s_.spec());
    if (!o_.plan) s_.stages.push_back({"plan", ms_since(t0), false});
    auto env = cached<Environment>("environment");  // the machine does not change under a session
    if (!env) {
      env = std::make_shared<const Environment>(capture_environment());
      keep("environment", env, 4096);
    }
    s_.env = *env;
    // the previous edit's results stay on screen, marked stale, until replaced
    if (o_.previous && carry_stale(s_, *o_.previous, ids_))
      for (size_t i = 0; i < s_.results.size(); ++i) {
        const ResultList::Ptr& r = s_.results.ptr(i);
        shown_[r->backend] = {r, true, s_.is_sampled(r->backend), ""};
      }
    compose();
    return true;
  }

  // Every result the rows change is in the cache already (undo, a value flipped back): no sampled pass.
  bool full_in_cache() {
    if (!o_.cache) return false;
    for (const auto& id : ids_)
      if (samples_rows(id) && !o_.cache->get(backend_key(s_.spec(), id, s_.sample_rows, &s_.plan))) return false;
    return !s_.spec().fp8_kv() || o_.cache->get(ideals_key());
  }

  // The sampled pass: published through sampled_done (or publish), then the rows the case asks for.
  bool sampled_pass(const Workload& w, const HostInputs& h) {
    const std::optional<int> asked = s_.sample_rows;
    s_.sample_rows = first_->rows_per_request;
    s_.sampled_rows = first_->rows_per_request;
    sampling_ = true;
    if (!pass(w, h)) return false;
    sampling_ = false;
    s_.sample_rows = asked;
    for (const auto& id : ids_)  // their keys name the rows: the full pass computes them again
      if (samples_rows(id)) keys_.erase(id);
    if (stopped()) return false;
    auto done = std::make_shared<const Session>(s_);
    if (o_.sampled_done)
      o_.sampled_done(std::move(done));
    else if (o_.publish)
      o_.publish(std::move(done));
    return !stopped();
  }

  bool pass(const Workload& w, const HostInputs& h) {
    for (const auto& id : ids_) {
      if (stopped()) return false;
      if (!backend(id, w, h)) return false;
    }
    if (s_.spec().fp8_kv() && !ideals(w, h.fits)) return false;
    if (stopped()) return false;
    compare();
    return true;
  }

  std::shared_ptr<const Workload> inputs() {
    const auto t0 = Clock::now();
    const std::string key = inputs_key(s_.spec());
    if (auto w = cached<Workload>(key)) {
      count([](StageCounts& n) { ++n.inputs_reused; });
      s_.stages.push_back({"inputs", ms_since(t0), true});
      return w;
    }
    if (opt_.progress) opt_.progress("inputs", 0);
    auto w = std::make_shared<const Workload>(make_workload(s_.spec(), s_.plan.pages));
    if (cancelled()) return nullptr;
    keep(key, w, workload_size(*w));
    count([](StageCounts& n) { ++n.inputs_made; });
    s_.stages.push_back({"inputs", ms_since(t0), false});
    return w;
  }

  bool backend(const std::string& id, const Workload& w, const HostInputs& h) {
    const auto t0 = Clock::now();
    const std::string& key = key_of(id);
    auto was = shown_.find(id);
    if (was != shown_.end() && !was->second.stale && was->second.key == key)
      return true;  // this run's (rows do not matter to it)
    const bool sampled = sampling_ && samples_rows(id);
    if (auto r = cached<Result>(key)) {
      count([&id](StageCounts& n) { ++n.backend_reused[id]; });
      shown_[id] = {r, false, sampled, key};
      s_.stages.push_back({stage(id, sampled), ms_since(t0), true});
    } else {
      auto made = std::make_shared<const Result>(run_backend_stage(s_, id, w, h, opt_));
      if (cancelled()) return false;  // a result cut short is neither shown nor kept
      keep(key, made, result_bytes(*made));
      count([&id](StageCounts& n) { ++n.backend_runs[id]; });
      shown_[id] = {made, false, sampled, key};
      s_.stages.push_back({stage(id, sampled), ms_since(t0), false});
    }
    compose();
    publish();
    return true;
  }

  // The key of the FP8 ideals: the CPU reference's result key (every field it reads, the rows sampled).
  std::string ideals_key() { return "fp8 ideals\n" + backend_key(s_.spec(), host_reference(), s_.sample_rows); }

  void set_ideals(const Fp8Ideals& f) {
    s_.original_ideal = f.original;
    s_.dequantised_ideal = f.dequantised;
    s_.quantisation = f.quantisation;
    s_.fp8_note = f.note;
    s_.ideals_stale = false;
    s_.ideals_sampled = sampling_ && f.original;
  }

  bool ideals(const Workload& w, bool host_ok) {
    const auto t0 = Clock::now();
    const std::string key = ideals_key();
    if (auto f = cached<Fp8Ideals>(key)) {
      set_ideals(*f);
      s_.stages.push_back({stage("fp8 ideals"), ms_since(t0), true});
      return true;
    }
    set_ideals({});  // fp8_ideals sets only what it computed: nothing of an earlier pass or edit stays
    fp8_ideals(s_, w, host_ok, opt_);
    if (cancelled()) return false;
    auto f = std::make_shared<Fp8Ideals>(Fp8Ideals{s_.original_ideal, s_.dequantised_ideal, s_.quantisation, s_.fp8_note});
    set_ideals(*f);
    const int64_t bytes = (f->original ? result_bytes(*f->original) : 0) + (f->dequantised ? result_bytes(*f->dequantised) : 0);
    keep(key, f, bytes);
    s_.stages.push_back({stage("fp8 ideals"), ms_since(t0), false});
    return true;
  }

  void compare() {
    const auto t0 = Clock::now();
    if (s_.ideals_stale) set_ideals({});  // compare_one reads the ideals: never the previous edit's
    check_graph_replays(s_);
    s_.diffs.clear();
    s_.diffs_stale = false;
    s_.diffs_sampled = sampling_;
    bool all_reused = true;
    const std::string fp8 = s_.spec().fp8_kv() ? ideals_key() : "";
    for (const auto& k : s_.spec().comparisons) {
      const std::string key = compare_key(k, keys_, fp8);
      if (auto d = cached<DiffReport>(key)) {
        count([](StageCounts& n) { ++n.compares_reused; });
        s_.diffs.push_back(*d);
        continue;
      }
      auto d = std::make_shared<const DiffReport>(compare_one(s_, k));
      keep(key, d, diff_bytes(*d));
      count([](StageCounts& n) { ++n.compares_made; });
      s_.diffs.push_back(*d);
      all_reused = false;
    }
    check_merges(s_);                    // over the rows both computed: a sampled pass checks its sampled rows
    if (!sampling_) check_recorded(s_);  // a recorded digest is of every row: checked on the full pass
    s_.stages.push_back({stage("compare"), ms_since(t0), all_reused && !s_.spec().comparisons.empty()});
  }

  const std::string& key_of(const std::string& id) {
    auto it = keys_.find(id);
    if (it == keys_.end()) it = keys_.emplace(id, backend_key(s_.spec(), id, s_.sample_rows, &s_.plan)).first;
    return it->second;
  }

  // The results in the case's order: this edit's where made, else the previous edit's (stale).
  void compose() {
    s_.results = ResultList();
    s_.stale.clear();
    s_.sampled.clear();
    for (const auto& id : ids_) {
      auto it = shown_.find(id);
      if (it == shown_.end()) continue;
      s_.results.push_back(it->second.result);
      if (it->second.stale) s_.stale.push_back(id);
      if (it->second.sampled) s_.sampled.push_back(id);
    }
  }

  void publish() {
    if (o_.publish && !stopped()) o_.publish(std::make_shared<const Session>(s_));
  }

  const LiveOptions& o_;
  SessionOptions opt_;
  Session s_;
  std::vector<std::string> ids_;
  std::optional<SampleFirst> first_;
  bool sampling_ = false;                    // the sampled pass is under way
  std::map<std::string, Shown> shown_;       // by backend id
  std::map<std::string, std::string> keys_;  // id -> backend_key, of the backends run
};

}  // namespace

std::string compare_key(const ComparisonSpec& k, const std::map<std::string, std::string>& backend_keys,
                        const std::string& fp8_key) {
  CaseSpec one;  // the comparison alone, as the case format writes it (its place in the list does not matter)
  one.comparisons = {k};
  std::string text = "compare\n" + fp8_key + "\n" + case_to_json(one)["comparisons"].dump();
  for (const std::string* id : {&k.backend, &k.baseline, &k.lowp}) {
    auto it = backend_keys.find(*id);
    text += "\n" + (it == backend_keys.end() ? std::string("-") : it->second);
  }
  return sha256_hex(text);
}

std::optional<SampleFirst> sample_first(const CaseSpec& c, const std::vector<std::string>& ids, int64_t budget,
                                        int64_t gpu_budget) {
  bool host_rows = c.fp8_kv(), gpu_rows = false;  // an FP8 case's two ideals are the CPU reference's
  for (const auto& id : ids) (is_gpu_backend(id) ? gpu_rows : host_rows) |= samples_rows(id);
  if (!host_rows) budget = gpu_rows ? gpu_budget : 0;  // the GPU's reference alone: its own bound
  if (budget <= 0) return std::nullopt;
  SampleFirst f;
  f.rows_per_request = kSampleFirstRows;
  const int64_t per_pair = int64_t{c.num_qo_heads} * (c.head_dim_qk + c.head_dim_vo);
  for (const auto& r : c.requests) {
    f.cost += int64_t{r.q_len} * r.kv_len * per_pair;
    f.rows += std::min(r.q_len, kSampleFirstRows);
    f.total_rows += r.q_len;
  }
  if (f.cost <= budget || f.rows == f.total_rows) return std::nullopt;
  return f;
}

std::string sampled_note(const Session& s) {
  if (!s.shows_sampled()) return "";
  int64_t rows = 0;
  for (const auto& r : s.spec().requests) rows += std::min(r.q_len, s.sampled_rows);
  std::string what;
  for (const auto& id : s.sampled) what += (what.empty() ? "" : ", ") + id;
  if (s.ideals_sampled) what += what.empty() ? "the FP8 ideals" : ", the FP8 ideals";
  if (s.diffs_sampled) what += what.empty() ? "the comparisons" : ", the comparisons";
  return "sampled " + std::to_string(rows) + " of " + std::to_string(s.spec().total_q()) + " query rows (" +
         std::to_string(s.sampled_rows) + " per request): " + what + "; the full reference replaces them when it is done";
}

bool carry_stale(Session& s, const Session& older, const std::vector<std::string>& ids) {
  if (!same_shape(s.spec(), older.spec())) return false;
  s.results = ResultList();
  s.stale.clear();
  s.sampled.clear();
  for (const auto& id : ids)
    for (size_t i = 0; i < older.results.size(); ++i)
      if (older.results[i].backend == id) {
        s.results.push_back(older.results.ptr(i));
        s.stale.push_back(id);
        if (older.is_sampled(id)) s.sampled.push_back(id);
      }
  s.diffs = older.diffs;
  s.diffs_stale = !older.diffs.empty();
  s.merge_checks = older.merge_checks;  // made with the comparisons: stale with them (diffs_stale)
  s.diffs_sampled = older.diffs_sampled;
  s.original_ideal = older.original_ideal;
  s.dequantised_ideal = older.dequantised_ideal;
  s.quantisation = older.quantisation;
  s.fp8_note = older.fp8_note;
  s.ideals_stale = older.original_ideal || older.dequantised_ideal || older.quantisation;
  s.ideals_sampled = older.ideals_sampled;
  s.sampled_rows = older.sampled_rows;
  return true;
}

std::shared_ptr<const Session> with_stale_results(const Session& planned, const Session& older) {
  auto s = std::make_shared<Session>(planned);
  carry_stale(*s, older, session_backends(planned, {}));
  return s;
}

std::shared_ptr<const Session> run_live(const CaseFile& f, const LiveOptions& o) {
  LiveRun run(f, o);
  return run.run();
}

}  // namespace attnscope
