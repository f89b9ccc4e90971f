// Running a case: plan, workload, backends, comparisons, replay check.
#include "session.h"

#include <algorithm>

#include "attnscope/compare.h"
#include "attnscope/device_compare.h"
#include "attnscope/partition.h"
#include "attnscope/registry.h"
#include "attnscope/sha256.h"
#include "cuda_graph_run.h"
#include "partition_run.h"
#include "stage_cache.h"

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

const char* replay_state_name(ReplayState s, ReplayKind k) {
  switch (s) {
    case ReplayState::kIdentical:
      return k == ReplayKind::kDigest ? "bit-identical" : "equal";
    case ReplayState::kDiffers:
      return "DIFFERS";
    case ReplayState::kNotChecked:
      return "NOT CHECKED";
  }
  return "";
}

const char* replay_kind_name(ReplayKind k) {
  return k == ReplayKind::kDigest ? "digest" : k == ReplayKind::kPlan ? "plan" : "verdict";
}

RunSummary Session::summary() const {
  RunSummary m;
  for (const auto& r : results) {
    m.backend_errors += r.status == Status::kError;
    if (r.graph)
      for (const auto& k : r.graph->checks) {
        ++m.graph_checks;
        m.graph_failed += !k.pass && !k.skipped;
        m.graph_skipped += k.skipped;
      }
  }
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
  for (const auto& rp : replay_records) {
    m.records_equal += rp.state == ReplayState::kIdentical;
    m.records_differ += rp.state == ReplayState::kDiffers;
    m.records_unchecked += rp.state == ReplayState::kNotChecked;
  }
  if (m.backend_errors || m.comparisons_failed || m.digests_differ || m.records_differ || m.graph_failed)
    m.state = RunSummary::State::kFailed;
  else if (m.digests_unchecked || m.records_unchecked || m.comparisons_skipped || m.graph_skipped)
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
  if (graph_checks)
    add(std::to_string(graph_checks - graph_failed - graph_skipped) + " of " + std::to_string(graph_checks) +
        " CUDA-graph checks pass" + (graph_failed ? ", " + std::to_string(graph_failed) + " fail" : "") +
        (graph_skipped ? ", " + std::to_string(graph_skipped) + " not checked" : ""));
  const int records = records_equal + records_differ + records_unchecked;
  if (records)
    add(std::to_string(records_equal) + " of " + std::to_string(records) + " recorded plan and verdicts equal" +
        (records_differ ? ", " + std::to_string(records_differ) + " differ" : "") +
        (records_unchecked ? ", " + std::to_string(records_unchecked) + " not checked" : ""));
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

HostInputs host_inputs_needed(const Session& s, const std::vector<std::string>& ids) {
  HostInputs h;
  h.needed = s.spec().fp8_kv();                                // an FP8 case's two ideals are computed on the host
  for (const auto& id : ids) h.needed |= !is_gpu_backend(id);  // GPU backends generate their inputs on the device
  h.bytes = workload_bytes(s.spec(), s.plan.pages);
  h.fits = h.bytes <= kMaxHostWorkloadBytes;
  return h;
}

// A /parallel case: every backend runs over the partitions and its result is their merge, except the
// low-precision baseline (the naive twice_lowp yardstick, unpartitioned) and the references, whose
// answer stays the unpartitioned one with their partials beside it (the Merge view's per-partial errors).
Result run_backend_partitioned(const Session& s, const std::string& id, const Workload& w, const RunOptions& ro) {
  const BackendInfo* info = backend_info(id);
  const Role role = info ? info->role : Role::kNone;
  if (role == Role::kLowp) return run_one(id, s.spec(), s.plan, w, ro);
  if (role != Role::kReference) return run_partitioned(id, s.spec(), ro, !is_gpu_backend(id));
  Result whole = run_one(id, s.spec(), s.plan, w, ro);
  if (!whole.ok()) return whole;
  Result r = run_partitioned(id, s.spec(), ro, !is_gpu_backend(id), &whole);
  if (r.ok()) return r;
  whole.message += (whole.message.empty() ? "" : "; ") + std::string("its partials were not computed: ") + r.message;
  return whole;
}

Result run_backend_stage(const Session& s, const std::string& id, const Workload& w, const HostInputs& h,
                         const SessionOptions& opt) {
  if (!is_gpu_backend(id) && !h.fits) {
    Result r;
    r.backend = id;
    r.status = Status::kUnsupported;
    r.message = "host inputs would need " + std::to_string(h.bytes >> 20) + " MiB, more than the " +
                std::to_string(kMaxHostWorkloadBytes >> 20) + " MiB CPU limit; use a GPU backend or fewer tokens";
    return r;
  }
  RunOptions ro;
  ro.cancel = opt.cancel;
  ro.sample_rows = s.sample_rows;
  ro.bench_reps = opt.bench_reps;
  ro.threads = opt.threads;
  ro.keep_device_copy = opt.device_copies;
  ro.partition_gpus = opt.partition_gpus;
  if (opt.share_device_inputs && is_gpu_backend(id)) ro.inputs_key = device_inputs_key(s.spec());  // only GPU backends read it
  ro.progress = [&opt, id](double x) {
    if (opt.progress) opt.progress(id, x);
  };
  if (opt.progress) opt.progress(id, 0);
  if (is_partitioned(s.spec())) return run_backend_partitioned(s, id, w, ro);
  Result r = run_one(id, s.spec(), s.plan, w, ro);
  attach_graph_replay(id, s.spec(), s.plan, &r);  // /cuda_graph only
  return r;
}

// The two ideals of an FP8 case (cpu.reference over the original and over the dequantised values)
// and the quantisation error between them.
void fp8_ideals(Session& s, const Workload& w, bool host_ok, const SessionOptions& opt) {
  const CaseSpec& c = s.spec();
  if (!host_ok) {
    s.fp8_note = "the two ideals need host inputs, which are over the CPU limit: only kernel errors are shown";
    return;
  }
  RunOptions ro;
  ro.cancel = opt.cancel;
  ro.sample_rows = s.sample_rows;
  ro.threads = opt.threads;
  // a CPU reference: GPU backends make their own inputs on the device and would not read the originals
  std::string ref;
  for (const auto& id : backends_with_role(Role::kReference))
    if (ref.empty() && !is_gpu_backend(id)) ref = id;
  if (opt.progress) opt.progress("original ideal", 0);
  Result orig = run_one(ref, c, s.plan, original_inputs(w), ro);
  orig.backend = ref + " (original values)";
  if (opt.progress) opt.progress("dequantised ideal", 0);
  const Result* listed = s.result(ref);  // the case's own run of it is the dequantised ideal
  Result deq = listed && listed->ok() ? *listed : run_one(ref, c, s.plan, w, ro);
  deq.backend = ref + " (dequantised)";
  if (orig.ok() && deq.ok())
    s.quantisation = diff_only(c, deq, orig);
  else
    s.fp8_note = "the ideals did not run: " + (orig.ok() ? deq.message : orig.message);
  s.original_ideal = std::make_shared<const Result>(std::move(orig));
  s.dequantised_ideal = std::make_shared<const Result>(std::move(deq));
}

void run_session_backends(Session& s, const SessionOptions& opt, const std::function<void(const Session&)>& on_result) {
  const CaseSpec& c = s.spec();
  const std::vector<std::string> ids = session_backends(s, opt);
  const HostInputs h = host_inputs_needed(s, ids);
  Workload w;
  if (h.needed && h.fits) {
    if (opt.progress) opt.progress("inputs", 0);
    w = make_workload(c, s.plan.pages);
  }
  for (const auto& id : ids) {
    if (opt.cancel && opt.cancel->load()) break;
    s.results.push_back(run_backend_stage(s, id, w, h, opt));
    if (on_result) on_result(s);
  }
  if (c.fp8_kv() && !(opt.cancel && opt.cancel->load())) fp8_ideals(s, w, h.fits, opt);
}

namespace {

// One check per recorded digest (validate_recorded has checked their shape): a digest whose
// backend did not run, or could not, is NOT CHECKED with the reason, never left out.
// "" when the code file a backend ran (/recorded/sources) has the recorded sha256 here, else why not.
std::string source_change(const std::string& id, const nlohmann::json& sources) {
  if (!sources.is_object() || !sources.contains(id)) return "";
  const std::string file = user_code_file(id), was = sources[id]["sha256"].get<std::string>();
  std::string why;
  const std::string now = file_sha256(file, &why);
  if (now.empty()) return "its code file is missing here (" + why + "); the repro recorded sha256 " + was;
  if (now != was) return "its code file " + file + " changed since the repro was recorded (sha256 " + was + ", now " + now + ")";
  return "";
}

void replay_digests(Session& s, const nlohmann::json& digests, const nlohmann::json& sources) {
  for (auto it = digests.begin(); it != digests.end(); ++it) {
    ReplayCheck rc;
    rc.backend = it.key();
    rc.recorded = it.value().get<std::string>();
    const Result* r = s.result(rc.backend);
    const std::string changed = source_change(rc.backend, sources);
    if (!changed.empty()) {
      rc.why = changed;
    } else if (!r) {
      rc.why = "backend not in this run";
    } else if (!r->ok()) {
      const std::string st = r->status == Status::kNotCompiled ? "not compiled"
                             : r->status == Status::kNoDevice  ? "no CUDA device"
                                                               : std::string(status_name(r->status));
      // the message often starts with the same words ("no CUDA device: ..."): said once
      rc.why = r->message.rfind(st, 0) == 0 ? r->message : r->message.empty() ? st : st + ": " + r->message;
    } else {
      rc.now = result_digest(*r);
      rc.state = rc.recorded == rc.now ? ReplayState::kIdentical : ReplayState::kDiffers;
    }
    s.replay.push_back(rc);
  }
}

// The recorded plan's figures against this run's plan (the plan is a pure function of the case).
void replay_plan(Session& s, const nlohmann::json& rec) {
  const SplitPlan& sp = s.plan.split;
  const std::pair<const char*, nlohmann::json> now[] = {
      {"cta_tile_q", sp.cta_tile_q}, {"chunk_pages", sp.chunk_pages}, {"num_items", sp.num_items}, {"split_kv", sp.split_kv}};
  ReplayCheck rc;
  rc.kind = ReplayKind::kPlan;
  rc.backend = "plan";
  std::string differ;
  for (const auto& [key, value] : now) {
    const std::string sep = rc.now.empty() ? "" : ", ";
    rc.recorded += sep + key + " " + rec.at(key).dump();
    rc.now += sep + key + " " + value.dump();
    if (rec.at(key) != value)
      differ += (differ.empty() ? "" : ", ") + std::string(key) + " recorded " + rec.at(key).dump() + ", now " + value.dump();
  }
  rc.state = differ.empty() ? ReplayState::kIdentical : ReplayState::kDiffers;
  rc.why = differ;
  s.replay_records.push_back(rc);
}

std::string verdict_text(bool pass, bool skipped, const std::string& rule, const std::string& detail) {
  return std::string(pass ? "PASS" : skipped ? "SKIP" : "FAIL") + ", " + rule + ": " + detail;
}

// Each recorded verdict against the same comparison of this run (the case's comparisons, in order):
// the same pass / skip, rule and numbers. A side that compared nothing leaves it NOT CHECKED.
void replay_verdicts(Session& s, const nlohmann::json& verdicts) {
  const auto& ks = s.spec().comparisons;
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const nlohmann::json& v = verdicts[i];
    ReplayCheck rc;
    rc.kind = ReplayKind::kVerdict;
    rc.recorded = verdict_text(v["pass"].get<bool>(), v["skipped"].get<bool>(), v["rule"].get<std::string>(),
                               v["detail"].get<std::string>());
    const std::string pair = v["backend"].get<std::string>() + " vs " + v["baseline"].get<std::string>();
    if (i >= s.diffs.size() || i >= ks.size()) {
      rc.backend = pair;
      rc.state = ReplayState::kDiffers;
      rc.why = "the case has " + std::to_string(ks.size()) + " comparisons, none for recorded verdict " + std::to_string(i);
      s.replay_records.push_back(rc);
      continue;
    }
    const DiffReport& d = s.diffs[i];
    const Verdict& now = d.verdict;
    rc.backend = comparison_label(ks[i]);
    rc.now = verdict_text(now.pass, now.skipped, now.rule, now.detail);
    if (pair != d.backend + " vs " + d.baseline) {
      rc.state = ReplayState::kDiffers;
      rc.why = "recorded verdict " + std::to_string(i) + " is of " + pair + ", the case's comparison " + std::to_string(i) +
               " of " + d.backend + " vs " + d.baseline;
    } else if (now.skipped) {
      rc.now.clear();
      rc.why = "not compared here: " + now.detail;
    } else if (v["skipped"].get<bool>()) {
      rc.why = "recorded as not compared (" + v["detail"].get<std::string>() + "): nothing to check it against";
    } else {
      rc.state = rc.recorded == rc.now ? ReplayState::kIdentical : ReplayState::kDiffers;
    }
    s.replay_records.push_back(rc);
  }
}

// Everything /recorded claims is checked or reported NOT CHECKED; library_plans is a record of what
// FlashInfer answered on the recording machine (its device), not a claim about this one.
void replay_recorded(Session& s) {
  s.replay.clear();
  s.replay_records.clear();
  const nlohmann::json& rec = s.file.recorded;
  if (!rec.is_object()) return;
  if (rec.contains("digests")) replay_digests(s, rec["digests"], rec.value("sources", nlohmann::json()));
  if (rec.contains("plan")) replay_plan(s, rec["plan"]);
  if (rec.contains("verdicts")) replay_verdicts(s, rec["verdicts"]);
}

}  // namespace

bool Session::is_stale(const std::string& id) const { return std::find(stale.begin(), stale.end(), id) != stale.end(); }

DiffReport compare_one(const Session& s, const ComparisonSpec& k) {
  const CaseSpec& c = s.spec();
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
    return d;
  }
  // on the device where both sides are there (the same bits as the host's), else on the host
  const DiffPassFn pass = diff_pass_where_the_data_is(c);
  DiffReport d = compare_results(c, *a, *b, k, l, pass);
  if (s.original_ideal && s.original_ideal->ok() && d.available) {
    d.vs_original = diff_only(c, *a, *s.original_ideal, pass).o;
    d.baseline_vs_original = diff_only(c, *b, *s.original_ideal, pass).o;
  }
  return d;
}

void check_recorded(Session& s) { replay_recorded(s); }

void finish_session(Session& s) {
  check_graph_replays(s);
  s.diffs.clear();
  for (const auto& k : s.spec().comparisons) s.diffs.push_back(compare_one(s, k));
  check_merges(s);
  replay_recorded(s);
}

void check_merges(Session& s) {
  s.merge_checks.clear();
  const Result* truth = s.result(backend_for_role(Role::kReference));
  for (const Result& r : s.results)
    if (truth && truth->ok() && r.ok() && r.partition && &r != truth)
      s.merge_checks.push_back(check_merge_bases(s.spec(), r, *truth));
}

std::shared_ptr<Session> run_session(const CaseFile& f, const SessionOptions& opt) {
  auto s = begin_session(f, opt);
  run_session_backends(*s, opt, nullptr);
  finish_session(*s);
  return s;
}

}  // namespace attnscope
