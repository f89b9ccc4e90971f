// Backend interface, results and the registry. A backend gets the same CaseSpec, Plan and
// Workload as every other and returns a Result; it never aborts: unsupported configurations and
// errors are statuses with a reason.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/plan.h"
#include "attnscope/workload.h"

namespace attnscope {

// kNoDevice: compiled, but no usable CUDA device here (a GPU backend on a CPU-only machine).
enum class Status { kOk, kUnsupported, kNotCompiled, kNoDevice, kError, kCancelled };
const char* status_name(Status s);

struct Timing {
  double host_ms = 0;    // wall time of run() on the host
  double device_ms = 0;  // median kernel time with CUDA events (GPU backends), else 0
  double device_ms_min = 0, device_ms_max = 0;
  int reps = 0;
};

struct Result {
  std::string backend;
  Status status = Status::kOk;
  std::string message;             // reason when not ok; notes otherwise (e.g. "sampled 8 rows/request")
  std::vector<float> o;            // [total_q, qo_heads, head_dim_vo], values in the case dtype
  std::vector<float> lse;          // [total_q, qo_heads], natural log; -inf for a fully masked row
  std::vector<uint8_t> row_valid;  // [total_q], 1 = computed; empty = every row computed
  Timing timing;
  bool ok() const { return status == Status::kOk; }
  bool row_ok(int64_t t) const { return row_valid.empty() || row_valid[t] != 0; }
};

struct RunOptions {
  std::optional<int> sample_rows;             // references: N sampled query rows per request
  const std::atomic<bool>* cancel = nullptr;  // set by the caller to stop early
  std::function<void(double)> progress;       // fraction done in [0, 1], from any thread
  int bench_reps = 0;                         // GPU backends: timed repetitions (0 = one run)
  int threads = 0;                            // CPU backends: worker threads (0 = every hardware thread)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string id() const = 0;
  virtual std::string describe() const = 0;
  // Empty when the configuration is supported, else the reason.
  virtual std::string check(const CaseSpec& c) const = 0;
  // What the backend does with attention.mask_mod / score_mod (run_backend refuses the rest before
  // check()). kFull: evaluates them (a mask_mod through RowMask's bits); kLowered (score_mod only):
  // runs the forms lower_score_mod recognises, as its built-in soft_cap / alibi; kNone: refuses.
  enum class Expressions { kNone, kLowered, kFull };
  virtual Expressions mask_mod_support() const { return Expressions::kNone; }
  virtual Expressions score_mod_support() const { return Expressions::kNone; }
  virtual Result run(const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& opt) = 0;
};

// A family of backends: attnscope's own CPU or CUDA kernels, or one real library (FlashInfer,
// cuDNN). Every family is optional at build time; one that is not compiled still lists its ids,
// and its backends report "not compiled: <why>", so a case naming them stays valid everywhere.
struct BackendFamily {
  std::string name;              // "cpu", "cuda", "flashinfer", "cudnn"
  std::vector<std::string> ids;  // its backend ids, in display order
  bool compiled = false;         // built into this binary
  std::string note;              // when compiled: version / source of the code; else why not
  std::unique_ptr<Backend> (*make)(const std::string& id) = nullptr;  // id is one of `ids`
};

// The registry: cpu, cuda, flashinfer, cudnn, in that order.
const std::vector<BackendFamily>& backend_families();
// nullptr for an unknown id.
const BackendFamily* family_of(const std::string& id);
// Runs on a GPU: every family but cpu (the benchmark times these with CUDA events).
bool is_gpu_backend(const std::string& id);
// What `bench` and the GUI's benchmark button time by default: cuda.flash and every real-library
// backend (cuda.reference and cuda.naive are correctness baselines, too slow to be worth timing).
std::vector<std::string> default_bench_backends();
// Every backend id the case format accepts, in a stable order (the families' ids in order).
const std::vector<std::string>& known_backends();
bool is_known_backend(const std::string& id);
std::string known_backends_text();
// nullptr only for an unknown id. Ids of families not compiled give a backend that says why.
std::unique_ptr<Backend> make_backend(const std::string& id);
// A backend that only reports "not compiled: <why>" (families absent from this build).
std::unique_ptr<Backend> make_not_compiled_backend(const std::string& id, const std::string& why);
// The case as backend b runs it: "" and *out = c (or c with a recognised score_mod lowered to
// soft_cap / alibi), or the reason b cannot run its mask_mod / score_mod.
std::string expressions_for(const Backend& b, const CaseSpec& c, CaseSpec* out);
// expressions_for, check(), then run() with every exception turned into a status (never throws).
Result run_backend(Backend& b, const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& opt);
// The status a check() reason stands for: "not compiled..." -> kNotCompiled, "no CUDA device..."
// -> kNoDevice, anything else -> kUnsupported.
Status status_of_reason(const std::string& why);

// Query rows of a request computed under sampling: n evenly spaced rows, first and last included.
std::vector<int> sampled_rows(int q_len, int n);
// [total_q] row mask for a case under sampling (all ones without sampling).
std::vector<uint8_t> row_selection(const CaseSpec& c, std::optional<int> sample_rows);

// One entry per family, each defined in its directory (cpu/, cuda/ or cuda_stub/, peers/...).
BackendFamily cpu_family();
BackendFamily cuda_family();
BackendFamily flashinfer_family();
BackendFamily cudnn_family();
std::unique_ptr<Backend> make_cpu_reference();
std::unique_ptr<Backend> make_cpu_lowp();
std::unique_ptr<Backend> make_cpu_tiled();
bool cuda_compiled();  // the cuda family is compiled (shorthand used by tests and the environment)

}  // namespace attnscope
