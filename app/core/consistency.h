// Decode versus prefill (docs/conventions.md section 11): the last n tokens of every request computed
// once as one prefill (q_len = n) and again as n decode steps with the cache growing by one key per
// step, per backend; O of the prefill's query i against O of step i, position by position. The
// picture of an FP8 decode path that leaves the prefill path from some key on (vLLM #54035).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/backend.h"
#include "attnscope/case_spec.h"

namespace attnscope {

// The derived cases: the same attention, planner, storage and data (explicit per-request seeds, FP8
// scales given as the prefill's), only the requests' lengths and query offsets differ.
struct ConsistencyCases {
  int n = 0;
  CaseSpec prefill;             // requests (q_len n, kv_len L_r)
  std::vector<CaseSpec> steps;  // [n] step i: requests (q_len 1, kv_len L_r - n + 1 + i, q_offset + i)
};

// Throws CaseError naming --last or the case path and the rule: n outside [1, min kv_len], a mask
// under which a prefill query sees a key its decode step does not have (or not the same keys), a
// score_mod that reads q_len / kv_len, a prefix_len past the first step's cache.
ConsistencyCases consistency_cases(const CaseSpec& c, int n);

enum class ConsistencyVerdict {
  kBitIdentical,  // every compared row has the same bits
  kDiffers,       // some row differs (a backend that does not promise bit identity)
  kFailed,        // some row differs, and the backend computes each row independently of the batch
  kNotRun,        // a run was not ok: status and reason, no number
};
const char* verdict_name(ConsistencyVerdict v);  // "bit-identical", "differs", "FAILED", "not run"

struct BackendConsistency {
  std::string backend;
  bool promises_bits = false;  // computes every row independently of the batch (cpu.reference, cpu.lowp)
  ConsistencyVerdict verdict = ConsistencyVerdict::kNotRun;
  Status status = Status::kOk;  // kNotRun: the first run that was not ok ...
  std::string reason;           // ... its message
  std::string run;              // ... and which run ("prefill", "decode step 5")
  // per position i in [0, n): over requests, qo heads and dims
  std::vector<double> max_abs;          // max |prefill - decode| over pairs where both are finite
  std::vector<int64_t> nonfinite;       // pairs where one side is NaN / Inf and the other is not the same infinity
  std::vector<int64_t> rows_identical;  // (request, head) rows whose every value has the same bits (in the case dtype)
  int64_t rows_per_position = 0;
  int first_diff = -1;     // first position with a row that is not bit-identical
  int first_request = -1;  // a request differing there,
  int first_key = -1;      // and its query's absolute position (the key it adds in its decode step)
  // [requests] the first key (absolute position) whose row differs, -1 where none does: a decode path
  // that leaves the prefill path from one key on shows that key in every request that reaches it
  std::vector<int> first_key_by_request;
  double max_diff = 0;  // max of max_abs
  int max_diff_position = -1;
  int64_t identical_rows() const;
  int64_t nonfinite_total() const;
  std::string verdict_text() const;  // "bit-identical", "differs from position P, max |diff| X", the status
};

struct ConsistencyReport {
  std::string case_name;
  int n = 0;
  std::vector<int> kv_lens;  // the case's, per request
  int num_qo_heads = 0, head_dim_vo = 0;
  std::string dtype;    // the case dtype (O's)
  std::string kv_note;  // "" or the FP8 settings with the scales given to every derived case
  bool cancelled = false;
  std::vector<BackendConsistency> backends;
  // 1: a backend errored or one that promises bit identity differs; 3: a backend could not run here
  // (or the run was cancelled); 0 otherwise, a difference of another backend included.
  int exit_code() const;
  std::string summary_line() const;  // "ok: ...", "FAILED: ...", "NOT CHECKED: ..."
};

// Runs one backend on one derived case (step: -1 the prefill, else the decode step); the default is
// the registry's (run_one).
using ConsistencyRunFn = std::function<Result(const std::string& id, int step, const CaseSpec& c, const Plan& p,
                                              const Workload& w, const RunOptions& ro)>;

struct ConsistencyOptions {
  std::vector<std::string> backends;  // empty: the case's
  int threads = 0;                    // CPU backends' threads (0 = all)
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(const std::string& stage, double fraction)> progress;
  ConsistencyRunFn run;  // empty: run_one
};

// A backend entry "P>D" (e.g. "flashinfer.prefill>flashinfer.decode") runs the prefill on P and the
// decode steps on D, as an engine does; a plain id runs both. {prefill id, decode id}.
std::pair<std::string, std::string> consistency_pair(const std::string& entry);

// Throws CaseError as consistency_cases. Backend failures are results, never exceptions.
ConsistencyReport check_consistency(const CaseSpec& c, int n, const ConsistencyOptions& opt = {});

}  // namespace attnscope
