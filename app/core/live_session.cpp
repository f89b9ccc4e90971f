#include "live_session.h"

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

// One live run: the results made so far (fresh) and the previous edit's (stale), shown in the
// case's backend order.
class LiveRun {
 public:
  LiveRun(const CaseFile& f, const LiveOptions& o) : o_(o), opt_(o.session) {
    s_.file = f;
    s_.sample_rows = opt_.sample_rows ? opt_.sample_rows : f.spec.sample_rows;
    opt_.share_device_inputs = true;
    ids_ = session_backends(s_, opt_);
  }

  std::shared_ptr<const Session> run() {
    if (!plan_and_environment() || stopped()) return nullptr;
    publish();
    const HostInputs h = host_inputs_needed(s_, ids_);
    std::shared_ptr<const Workload> w = std::make_shared<const Workload>();
    if (h.needed && h.fits && !(w = inputs())) return nullptr;
    for (const auto& id : ids_) {
      if (stopped()) return nullptr;
      if (!backend(id, *w, h)) return nullptr;
      publish();
    }
    if (s_.spec().fp8_kv() && !ideals(*w, h.fits)) return nullptr;
    if (stopped()) return nullptr;
    compare();
    return std::make_shared<const Session>(s_);
  }

 private:
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
    if (o_.previous &&
        same_shape(o_.previous->spec(), s_.spec())) {  // the previous edit's results stay on screen, marked stale, until replaced
      for (const auto& id : ids_)
        for (size_t i = 0; i < o_.previous->results.size(); ++i)
          if (o_.previous->results[i].backend == id) shown_[id] = {o_.previous->results.ptr(i), true};
      s_.diffs = o_.previous->diffs;
      s_.diffs_stale = true;
    }
    compose();
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
    if (auto r = cached<Result>(key)) {
      count([&id](StageCounts& n) { ++n.backend_reused[id]; });
      shown_[id] = {r, false};
      s_.stages.push_back({id, ms_since(t0), true});
      compose();
      return true;
    }
    auto r = std::make_shared<const Result>(run_backend_stage(s_, id, w, h, opt_));
    if (cancelled()) return false;  // a result cut short is neither shown nor kept
    keep(key, r, result_bytes(*r));
    count([&id](StageCounts& n) { ++n.backend_runs[id]; });
    shown_[id] = {r, false};
    s_.stages.push_back({id, ms_since(t0), false});
    compose();
    return true;
  }

  bool ideals(const Workload& w, bool host_ok) {
    const auto t0 = Clock::now();
    std::string ref;
    for (const auto& id : backends_with_role(Role::kReference))
      if (ref.empty() && !is_gpu_backend(id)) ref = id;
    const std::string key = "fp8 ideals\n" + backend_key(s_.spec(), ref, s_.sample_rows);
    if (auto f = cached<Fp8Ideals>(key)) {
      s_.original_ideal = f->original;
      s_.dequantised_ideal = f->dequantised;
      s_.quantisation = f->quantisation;
      s_.fp8_note = f->note;
      s_.stages.push_back({"fp8 ideals", ms_since(t0), true});
      return true;
    }
    fp8_ideals(s_, w, host_ok, opt_);
    if (cancelled()) return false;
    auto f = std::make_shared<Fp8Ideals>(Fp8Ideals{s_.original_ideal, s_.dequantised_ideal, s_.quantisation, s_.fp8_note});
    const int64_t bytes = (f->original ? result_bytes(*f->original) : 0) + (f->dequantised ? result_bytes(*f->dequantised) : 0);
    keep(key, f, bytes);
    s_.stages.push_back({"fp8 ideals", ms_since(t0), false});
    return true;
  }

  void compare() {
    const auto t0 = Clock::now();
    check_graph_replays(s_);
    s_.diffs.clear();
    s_.diffs_stale = false;
    bool all_reused = true;
    const std::string fp8 = s_.spec().fp8_kv() ? inputs_key(s_.spec()) : "";
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
    check_recorded(s_);
    s_.stages.push_back({"compare", ms_since(t0), all_reused && !s_.spec().comparisons.empty()});
  }

  // The results in the case's order: this edit's where made, else the previous edit's (stale).
  const std::string& key_of(const std::string& id) {
    auto it = keys_.find(id);
    if (it == keys_.end()) it = keys_.emplace(id, backend_key(s_.spec(), id, s_.sample_rows, &s_.plan)).first;
    return it->second;
  }

  void compose() {
    s_.results = ResultList();
    s_.stale.clear();
    for (const auto& id : ids_) {
      auto it = shown_.find(id);
      if (it == shown_.end()) continue;
      s_.results.push_back(it->second.first);
      if (it->second.second) s_.stale.push_back(id);
    }
  }

  void publish() {
    if (o_.publish && !stopped()) o_.publish(std::make_shared<const Session>(s_));
  }

  const LiveOptions& o_;
  SessionOptions opt_;
  Session s_;
  std::vector<std::string> ids_;
  std::map<std::string, std::pair<ResultList::Ptr, bool>> shown_;  // id -> (result, stale)
  std::map<std::string, std::string> keys_;                        // id -> backend_key, of the backends run
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

std::shared_ptr<const Session> with_stale_results(const Session& planned, const Session& older) {
  auto s = std::make_shared<Session>(planned);
  if (!same_shape(planned.spec(), older.spec())) return s;
  s->results = older.results;
  s->diffs = older.diffs;
  s->stale.clear();
  for (const auto& r : older.results) s->stale.push_back(r.backend);
  s->diffs_stale = !older.diffs.empty();
  s->original_ideal = older.original_ideal;
  s->dequantised_ideal = older.dequantised_ideal;
  s->quantisation = older.quantisation;
  s->fp8_note = older.fp8_note;
  s->sample_rows = older.sample_rows;
  return s;
}

std::shared_ptr<const Session> run_live(const CaseFile& f, const LiveOptions& o) {
  LiveRun run(f, o);
  return run.run();
}

}  // namespace attnscope
