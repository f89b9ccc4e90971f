// Running a case: plan, workload, backends, comparisons, replay check.
#include "session.h"

#include "attnscope/registry.h"
#include "attnscope/compare.h"

namespace attnscope {

namespace {
constexpr int64_t kMaxHostWorkloadBytes = int64_t{12} << 30;  // refuse CPU runs past 12 GiB of inputs
}

const Result* Session::result(const std::string& id) const {
  for (const auto& r : results)
    if (r.backend == id) return &r;
  return nullptr;
}

bool Session::failed() const { return summary().state == RunSummary::State::kFailed; }

const char* replay_state_name(ReplayState s) {
  switch (s) {
    case ReplayState::kIdentical:
      return "bit-identical";
    case ReplayState::kDiffers:
      return "DIFFERS";
    case ReplayState::kNotChecked:
      return "NOT CHECKED";
  }
  return "";
}

RunSummary Session::summary() const {
  RunSummary m;
  for (const auto& r : results) m.backend_errors += r.status == Status::kError;
  for (const auto& d : diffs) {
    ++m.comparisons;
    m.comparisons_skipped += d.verdict.skipped;
    m.comparisons_failed += !d.verdict.pass && !d.verdict.skipped;
  }
  for (const auto& rp : replay) {
    m.digests_identical += rp.state == ReplayState::kIdentical;
    m.digests_differ += rp.state == ReplayState::kDiffers;
    m.digests_unchecked += rp.state == ReplayState::kNotChecked;
  }
  if (m.backend_errors || m.comparisons_failed || m.digests_differ)
    m.state = RunSummary::State::kFailed;
  else if (m.digests_unchecked || m.comparisons_skipped)
    m.state = RunSummary::State::kNotChecked;
  return m;
}

const char* RunSummary::state_name() const {
  return state == State::kFailed ? "FAILED" : state == State::kNotChecked ? "NOT CHECKED" : "ok";
}

std::string RunSummary::line() const {
  const int digests = digests_identical + digests_differ + digests_unchecked;
  std::string s = state_name();
  std::string parts;
  auto add = [&parts](const std::string& p) { parts += (parts.empty() ? "" : ", ") + p; };
  if (backend_errors) add(std::to_string(backend_errors) + " backend error(s)");
  if (comparisons)
    add(std::to_string(comparisons - comparisons_failed - comparisons_skipped) + " of " + std::to_string(comparisons) +
        " comparisons pass" + (comparisons_failed ? ", " + std::to_string(comparisons_failed) + " fail" : "") +
        (comparisons_skipped ? ", " + std::to_string(comparisons_skipped) + " not checked" : ""));
  if (digests)
    add(std::to_string(digests_identical) + " of " + std::to_string(digests) + " recorded digests bit-identical" +
        (digests_differ ? ", " + std::to_string(digests_differ) + " differ" : "") +
        (digests_unchecked ? ", " + std::to_string(digests_unchecked) + " not checked" : ""));
  return parts.empty() ? s : s + ": " + parts;
}

Result run_one(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& ro) {
  auto b = make_backend(id);
  if (!b) {
    Result r;
    r.backend = id;
    r.status = Status::kError;
    r.message = "unknown backend";
    return r;
  }
  return run_backend(*b, c, p, w, ro);
}

std::shared_ptr<Session> begin_session(const CaseFile& f, const SessionOptions& opt) {
  auto s = std::make_shared<Session>();
  s->file = f;
  s->plan = plan_case(s->file.spec);
  s->env = capture_environment();
  s->sample_rows = opt.sample_rows ? opt.sample_rows : s->file.spec.sample_rows;
  return s;
}

std::vector<std::string> session_backends(const Session& s, const SessionOptions& opt) {
  return opt.backends ? *opt.backends : s.spec().backends;
}

void run_session_backends(Session& s, const SessionOptions& opt, const std::function<void(const Session&)>& on_result) {
  const CaseSpec& c = s.spec();
  const std::vector<std::string> ids = session_backends(s, opt);
  auto progress = [&](const std::string& stage, double x) {
    if (opt.progress) opt.progress(stage, x);
  };
  bool need_host = false;
  for (const auto& id : ids) need_host |= !is_gpu_backend(id);  // GPU backends generate their inputs on the device
  const int64_t bytes = workload_bytes(c, s.plan.pages);
  const bool host_ok = bytes <= kMaxHostWorkloadBytes;
  Workload w;
  if (need_host && host_ok) {
    progress("inputs", 0);
    w = make_workload(c, s.plan.pages);
  }
  for (const auto& id : ids) {
    if (opt.cancel && opt.cancel->load()) break;
    if (!is_gpu_backend(id) && !host_ok) {
      Result r;
      r.backend = id;
      r.status = Status::kUnsupported;
      r.message = "host inputs would need " + std::to_string(bytes >> 20) + " MiB, more than the " +
                  std::to_string(kMaxHostWorkloadBytes >> 20) + " MiB CPU limit; use a GPU backend or fewer tokens";
      s.results.push_back(r);
    } else {
      RunOptions ro;
      ro.cancel = opt.cancel;
      ro.sample_rows = s.sample_rows;
      ro.bench_reps = opt.bench_reps;
      ro.threads = opt.threads;
      ro.progress = [&, id](double x) { progress(id, x); };
      progress(id, 0);
      s.results.push_back(run_one(id, c, s.plan, w, ro));
    }
    if (on_result) on_result(s);
  }
}

void finish_session(Session& s) {
  const CaseSpec& c = s.spec();
  s.diffs.clear();
  for (const auto& k : c.comparisons) {
    const Result* a = s.result(k.backend);
    const Result* b = s.result(k.baseline);
    const Result* l = s.result(k.lowp);
    if (!a || !b) {
      DiffReport d;
      d.backend = k.backend;
      d.baseline = k.baseline;
      d.verdict.rule = rule_name(k.rule);
      d.verdict.skipped = true;
      d.verdict.detail = "not compared: " + std::string(!a ? k.backend : k.baseline) + " was not run";
      s.diffs.push_back(d);
      continue;
    }
    s.diffs.push_back(compare_results(c, *a, *b, k, l));
  }
  // One check per recorded digest (validate_recorded has checked their shape): a digest whose
  // backend did not run, or could not, is NOT CHECKED with the reason, never left out.
  s.replay.clear();
  if (s.file.recorded.is_object() && s.file.recorded.contains("digests")) {
    for (auto it = s.file.recorded["digests"].begin(); it != s.file.recorded["digests"].end(); ++it) {
      ReplayCheck rc;
      rc.backend = it.key();
      rc.recorded = it.value().get<std::string>();
      const Result* r = s.result(rc.backend);
      if (!r) {
        rc.why = "backend not in this run";
      } else if (!r->ok()) {
        rc.why = r->status == Status::kNotCompiled ? "not compiled"
                 : r->status == Status::kNoDevice  ? "no CUDA device"
                                                   : std::string(status_name(r->status));
        if (!r->message.empty()) rc.why += ": " + r->message;
      } else {
        rc.now = result_digest(*r);
        rc.state = rc.recorded == rc.now ? ReplayState::kIdentical : ReplayState::kDiffers;
      }
      s.replay.push_back(rc);
    }
  }
}

std::shared_ptr<Session> run_session(const CaseFile& f, const SessionOptions& opt) {
  auto s = begin_session(f, opt);
  run_session_backends(*s, opt, nullptr);
  finish_session(*s);
  return s;
}

}  // namespace attnscope
