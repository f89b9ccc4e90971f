// A session: one case, its plan, the results of its backends and their comparisons. The CLI runs
// one synchronously; the GUI's runner builds one in stages on a worker thread and publishes each
// stage as an immutable snapshot.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/backend.h"
#include "attnscope/compare.h"
#include "attnscope/plan.h"
#include "case_json.h"
#include "environment.h"
#include "partition_run.h"

namespace attnscope {

// Replay of a repro case: does this run reproduce what the case recorded? One check per recorded
// digest (does the backend give the same bits), one for the recorded plan (the same tile, chunk,
// items and split) and one per recorded verdict (the same comparison, verdict and numbers), whether
// or not it could be checked here.
enum class ReplayState { kIdentical, kDiffers, kNotChecked };
enum class ReplayKind { kDigest, kPlan, kVerdict };
// "bit-identical" (a digest; "equal" for a plan or a verdict), "DIFFERS", "NOT CHECKED"
const char* replay_state_name(ReplayState s, ReplayKind k = ReplayKind::kDigest);
const char* replay_kind_name(ReplayKind k);  // "digest", "plan", "verdict"

struct ReplayCheck {
  ReplayKind kind = ReplayKind::kDigest;
  std::string backend;        // kDigest: the backend; kPlan: "plan"; kVerdict: the comparison's label
  std::string recorded, now;  // digests, or the plan / verdict as text; `now` empty when not checked
  ReplayState state = ReplayState::kNotChecked;
  std::string why;  // kNotChecked: not compiled / no CUDA device / backend not in this run / ...
  bool match() const { return state == ReplayState::kIdentical; }
};

// What a run checked, summed up once for the CLI's last line and exit code, its JSON, and the
// GUI's status bar: FAILED (a comparison failed, a backend errored, a recorded digest, plan or
// verdict differs), else NOT CHECKED (some recorded digest, verdict or comparison could not be
// checked here), else ok.
struct RunSummary {
  enum class State { kOk, kFailed, kNotChecked } state = State::kOk;
  int backend_errors = 0;
  int comparisons_failed = 0, comparisons_skipped = 0, comparisons = 0;
  int digests_identical = 0, digests_differ = 0, digests_unchecked = 0;
  int records_equal = 0, records_differ = 0, records_unchecked = 0;  // the recorded plan and verdicts
  int graph_checks = 0, graph_failed = 0, graph_skipped = 0;         // /cuda_graph replays (Result::graph)
  int exit_code() const { return state == State::kFailed ? 1 : state == State::kNotChecked ? 3 : 0; }
  const char* state_name() const;  // "ok", "FAILED", "NOT CHECKED"
  std::string line() const;        // "ok: ...", "FAILED: ...", "NOT CHECKED: ..."
};

// The results of a session, each held by a shared pointer: copying a session (a GUI snapshot per
// stage) shares the tensors instead of copying tens of MB. Iterates as `const Result&`.
class ResultList {
 public:
  using Ptr = std::shared_ptr<const Result>;
  struct Iter {
    std::vector<Ptr>::const_iterator it;
    const Result& operator*() const { return **it; }
    const Result* operator->() const { return it->get(); }
    Iter& operator++() {
      ++it;
      return *this;
    }
    bool operator!=(const Iter& o) const { return it != o.it; }
    bool operator==(const Iter& o) const { return it == o.it; }
  };
  void push_back(Result r) { v_.push_back(std::make_shared<const Result>(std::move(r))); }
  void push_back(Ptr r) { v_.push_back(std::move(r)); }  // shared, not copied (the live run's cached results)
  const Ptr& ptr(size_t i) const { return v_[i]; }
  size_t size() const { return v_.size(); }
  bool empty() const { return v_.empty(); }
  const Result& operator[](size_t i) const { return *v_[i]; }
  const Result& at(size_t i) const { return *v_.at(i); }
  Iter begin() const { return {v_.begin()}; }
  Iter end() const { return {v_.end()}; }

 private:
  std::vector<Ptr> v_;
};

struct Session {
  CaseFile file;  // spec + what the file recorded
  Plan plan;
  ResultList results;                       // in the order of the case's backends
  std::vector<DiffReport> diffs;            // in the order of the case's comparisons
  std::vector<ReplayCheck> replay;          // one per recorded digest
  std::vector<ReplayCheck> replay_records;  // the recorded plan, then one per recorded verdict
  Environment env;
  std::optional<int> sample_rows;  // what the references were limited to
  // FP8 cases (docs/conventions.md section 10): cpu.reference over the values before quantisation
  // (the original ideal) and over the stored values times their scales (the dequantised ideal), and
  // the quantisation error between them. Null / empty without FP8 or without host inputs (then
  // `fp8_note` says why).
  ResultList::Ptr original_ideal, dequantised_ideal;
  std::optional<DiffReport> quantisation;
  std::string fp8_note;
  // The live run (stage_cache.h): results shown from the previous edit until this one's replace them
  // (backend ids), whether the comparisons are still the previous edit's, and each stage's time.
  std::vector<std::string> stale;
  bool diffs_stale = false;
  bool ideals_stale = false;  // the FP8 ideals shown are the previous edit's too (compare never reads them)
  // The live run's sampled pass (live_session.h, sample_first_rows): results of `sampled_rows` query
  // rows per request although the case asks for every row, shown until the full ones replace them
  // (backend ids), and whether the comparisons and the FP8 ideals shown are that pass's.
  std::vector<std::string> sampled;
  bool diffs_sampled = false, ideals_sampled = false;
  int sampled_rows = 0;
  struct StageTime {
    std::string stage;  // "plan", "inputs", a backend id, "compare", "fp8 ideals"
    double ms = 0;
    bool reused = false;  // taken from the cache
  };
  std::vector<StageTime> stages;
  // A /parallel case: for each partitioned backend, which LSE base merges its partials into the
  // reference's answer (partition_run.h); empty otherwise
  std::vector<MergeBaseCheck> merge_checks;

  const CaseSpec& spec() const { return file.spec; }
  bool is_stale(const std::string& id) const;
  bool is_sampled(const std::string& id) const { return std::find(sampled.begin(), sampled.end(), id) != sampled.end(); }
  bool shows_sampled() const { return !sampled.empty() || diffs_sampled || ideals_sampled; }
  const Result* result(const std::string& id) const;
  bool failed() const;  // a comparison failed, a backend errored, or a replay did not match
  RunSummary summary() const;
};

struct SessionOptions {
  std::optional<std::vector<std::string>> backends;  // overrides the case's list
  std::optional<int> sample_rows;                    // overrides the case's reference.sample_rows
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(const std::string& stage, double fraction)> progress;
  int bench_reps = 0;
  int threads = 0;  // CPU backends' threads (0 = all)
  // GPU backends keep their O and LSE on the device too, so comparisons of two of them run there
  // (device_compare.h); the live run sets it, the CLI's one pass needs no device memory held for it
  bool device_copies = false;
  // GPU backends share one device workload per inputs (RunOptions::inputs_key): the GUI's live run
  bool share_device_inputs = false;
  int partition_gpus = 0;  // RunOptions::partition_gpus: the GPUs a /parallel case's ranks run on (0 = all)
};

// Plans, generates the workload, runs every backend, compares, checks recorded digests.
// Throws CaseError for an invalid case; backend failures are recorded in the results.
std::shared_ptr<Session> run_session(const CaseFile& f, const SessionOptions& opt = {});

// The same in stages (the GUI runner publishes a snapshot after each):
// plan + environment; then each backend in order (on_result after each); then comparisons + replay.
std::shared_ptr<Session> begin_session(const CaseFile& f, const SessionOptions& opt);
void run_session_backends(Session& s, const SessionOptions& opt, const std::function<void(const Session&)>& on_result);
void finish_session(Session& s);
// finish_session's parts: one comparison of the case (k of spec().comparisons) over the session's
// results, and the replay check of what the case recorded.
DiffReport compare_one(const Session& s, const ComparisonSpec& k);
void check_recorded(Session& s);
// A /parallel case's base check of every partitioned backend against the reference (merge_checks):
// run with the comparisons, by the CLI's pass and by the live run (the GUI's Merge tab shows it).
void check_merges(Session& s);

// run_session_backends' parts, shared with the live run (live_session.h): the backends to run, the
// host inputs they need, one backend's stage (its run and /cuda_graph replay, or why it cannot run
// on the host), and an FP8 case's two ideals.
std::vector<std::string> session_backends(const Session& s, const SessionOptions& opt);
struct HostInputs {
  bool needed = false;  // a CPU backend runs, or the case is FP8
  bool fits = true;     // under the CPU limit on host inputs
  int64_t bytes = 0;
};
HostInputs host_inputs_needed(const Session& s, const std::vector<std::string>& ids);
Result run_backend_stage(const Session& s, const std::string& id, const Workload& w, const HostInputs& h,
                         const SessionOptions& opt);
void fp8_ideals(Session& s, const Workload& w, bool host_ok, const SessionOptions& opt);

// The "real rows" check of every captured CUDA-graph replay (real_rows_check, cuda_graph_run.h) added
// to its result's checks; drops the replay's rows afterwards (session_graph.cpp).
void check_graph_replays(Session& s);

// Runs backends in order, only the ones this stage needs (shared by the CLI and the GUI runner).
Result run_one(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& ro);

}  // namespace attnscope
