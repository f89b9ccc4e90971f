// The backends floor: the Backend interface, the family descriptor each family folder fills in, and
// the registry that answers every question about ids from those descriptors (docs/architecture.md).
// A backend gets the same CaseSpec, Plan and Workload as every other and returns a Result; it never
// aborts: unsupported configurations and errors are statuses with a reason.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/plan.h"
#include "attnscope/result.h"
#include "attnscope/workload.h"

namespace attnscope {

struct RunOptions {
  std::optional<int> sample_rows;             // references: N sampled query rows per request
  const std::atomic<bool>* cancel = nullptr;  // set by the caller to stop early
  std::function<void(double)> progress;       // fraction done in [0, 1], from any thread
  int bench_reps = 0;                         // GPU backends: timed repetitions (0 = one run)
  int threads = 0;                            // CPU backends: worker threads (0 = every hardware thread)
  // GPU backends: keep O and LSE on the device too (Result::device), so comparisons run there
  // (device_compare.h); bounded by set_device_copy_budget
  bool keep_device_copy = false;
  // The content key of the device inputs (the GUI's live run sets it): GPU backends given the same key
  // share one device workload, generated once; empty: each generates its own (the CLI).
  std::string inputs_key;
  // A partitioned case (/parallel): the GPUs its ranks run on, rank k on GPU k % n (0 = every visible
  // GPU; 1 = one after another on the current GPU, "virtual")
  int partition_gpus = 0;
  // A /sparse case's gathered form (sparse_gather.h) is being run: the case and plan the inputs are
  // generated from (the original ones); the backend's own case and plan address them through slots.
  const CaseSpec* inputs_case = nullptr;
  const Plan* inputs_plan = nullptr;
};

// What a backend does with attention.mask_mod / score_mod (run_backend refuses the rest before
// check()). kFull: evaluates them (a mask_mod through RowMask's bits); kLowered (score_mod only):
// runs the forms lower_score_mod recognises, as its built-in soft_cap / alibi; kNone: refuses.
enum class Expressions { kNone, kLowered, kFull };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string id() const = 0;
  virtual std::string describe() const = 0;
  // Empty when the configuration is supported, else the reason.
  virtual std::string check(const CaseSpec& c) const = 0;
  virtual Result run(const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& opt) = 0;
};

// The part a backend plays in the case format's defaults (a case without /backends runs the
// reference, the low-precision baseline and the plan twin; twice_lowp compares against kLowp).
enum class Role { kNone, kReference, kLowp, kPlanTwin };

constexpr unsigned fp8_bit(ScaleGranularity g) { return 1u << static_cast<unsigned>(g); }
constexpr unsigned kFp8AnyScales = 7u;  // tensor, head and token
constexpr unsigned kMlaAbsorbed = 1u, kMlaNonAbsorbed = 2u, kMlaBoth = 3u;

// How a backend runs a /sparse case. kPlan: the case as it is, reading the plan's selection (its mask
// bits: every key visited, dense cost; or Plan::sparse's index rows, as an engine adapter translates
// them). kGathered: its gathered form (sparse_gather.h): run_backend hands it one request per query row
// over a page table of page size 1 holding the kept tokens' slots, the device inputs from the original
// case. kGatheredElsePlan: the gathered form where the case has one, else kPlan.
enum class SparseRun { kNo, kPlan, kGathered, kGatheredElsePlan };

// One backend as its family describes it. Everything that lists ids, or asks what a backend takes,
// reads these: validation, refusal messages, the CLI's help and tables, the GUI's lists.
struct BackendInfo {
  std::string id;       // "<family>.<name>"
  std::string summary;  // one line: what it computes
  std::string takes;    // dtypes, head dims, masks, storage, planner, in words
  Expressions mask_mod = Expressions::kNone;
  Expressions score_mod = Expressions::kNone;
  bool gpu = false;            // runs on a CUDA device (device inputs, CUDA-event timing)
  bool bench_default = false;  // timed by `bench` and the GUI's button by default
  bool library_plan = false;   // runs its library's own plan (Plan::library), not the model's
  Role role = Role::kNone;
  // FP8 (docs/conventions.md section 10): the scale granularities taken with an FP8 KV cache, as bits
  // fp8_bit(ScaleGranularity) (0: refuses an FP8 cache), and whether it runs FP8 attention (Q in FP8).
  unsigned fp8_kv_scales = 0;
  bool fp8_attention = false;
  // Repro scripts (export_script) of a backend whose family has no script writer of its own run
  // PyTorch's SDPA; this pins SDPA to the SDPBackend member that is this backend's library ("" =
  // PyTorch chooses), and the note says why in the script (comment lines, split at '\n').
  std::string script_sdpa_backend;
  std::string script_sdpa_note;
  // Attention sinks (/attention/sinks) and speculative-decoding trees (/requests/i/tree_parents),
  // docs/conventions.md section 12. False: the registry refuses the case, naming who takes it.
  bool sinks = false;
  bool trees = false;
  // MLA (/mla, docs/conventions.md section 13): the forms it runs, bits kMlaAbsorbed / kMlaNonAbsorbed
  // (0: refuses MLA cases).
  unsigned mla = 0;
  // DeepSeek Sparse Attention (/sparse, model/include/attnscope/sparse.h). kNo: the registry refuses a
  // /sparse case, naming who takes it.
  SparseRun sparse = SparseRun::kNo;
  // The base of the LSE its library returns (Result::lse is always natural log, converted once): a merge
  // of its partials (/parallel, partition.h) reads them in this base unless the case says otherwise.
  LseBase lse_base = LseBase::kE;
};

// Writes DIR/<name>.npy for a family's script writer: the app's writer, so that a family does not
// depend on the app's .npy code. float32 and int32 (page tables, indptrs) arrays, C order.
struct ScriptNpyWriter {
  std::function<void(const std::string& name, const std::vector<float>& data, const std::vector<int64_t>& shape)> f32;
  std::function<void(const std::string& name, const std::vector<int>& data, const std::vector<int64_t>& shape)> i32;
};

// What a family writes into a repro script (app/core/export_script.h) for one of its backends: the
// script's frame (header, inputs, reference, comparisons, main) is the app's; this is the library
// call and what it needs. Every text is Python; py_text.h has the helpers the app's parts use.
struct ScriptPart {
  std::string label;       // LIBRARY in the script, used in its printed lines
  std::string library;     // the API and version, for the header
  std::string refusal;     // the library cannot express the case: the script says so and exits 2
  std::string files_note;  // the extra .npy files, for the header's list ("" = none)
  std::string constants;   // extra constants, after the case's (only when refusal is empty)
  // `def run_library(torch, <module>, q)`, returning O and LSE (natural log); after the constants
  // and allowed() / requests() (only when refusal is empty)
  std::string run_library;
  std::string module;        // the Python module to import besides torch ("flashinfer")
  std::string module_title;  // its name in the script's messages ("FlashInfer")
  std::string package;       // its pip package; the script names `package==pin` and warns on another version
  std::string pin;
  // Writes the extra arrays run_library loads (the case, plan and workload are export's); returns
  // the number of files. Empty: none.
  std::function<int(const CaseSpec&, const Plan&, const Workload&, const ScriptNpyWriter&)> write_arrays;
};

struct Merger;  // attnscope/merge.h

// A family of backends: attnscope's own CPU or CUDA kernels, or one real library. Each family folder
// defines `BackendFamily <name>_family()` in its family.cpp, compiled in every build; a family whose
// code is not compiled still lists its backends, and they report "not compiled: <why>", so a case
// naming them stays valid everywhere.
struct BackendFamily {
  std::string name;                   // the ids' prefix
  std::vector<BackendInfo> backends;  // in display order
  bool compiled = false;              // its code is built into this binary
  std::string note;                   // when compiled: version / source of the code; else why not
  std::string pin;                    // the pinned package its code comes from ("" for attnscope's own)
  std::string mismatch;               // when compiled: the library loaded is not the one built against ("" = same)
  std::unique_ptr<Backend> (*make)(const std::string& id) = nullptr;  // id is one of `backends`
  // Optional: fills the family's entry of Plan::library (its own planner on the same units).
  void (*library_plan)(const CaseSpec& c, const std::vector<WorkUnit>& units, LibraryPlans* out) = nullptr;
  // Optional: the family's own repro-script writer for backend `id` on the case as the script
  // writes it (nullptr: the app's PyTorch SDPA / flex_attention writers). Compiled in every build,
  // so a CPU-only build exports scripts for every backend.
  ScriptPart (*script_part)(const CaseSpec& c, const Plan& p, const std::string& id) = nullptr;
  // Optional: ids the user writes rather than picks from `backends` ("python:PATH.py:FUNCTION"). An id
  // starting with id_prefix is this family's; parse_id gives "" for a well-formed one (its descriptor
  // is `pattern` with that id) or the rule it breaks. pattern.id is the form listings show.
  std::string id_prefix;
  BackendInfo pattern;
  std::string (*parse_id)(const std::string& id) = nullptr;
  // Optional: the file of code a backend id names, which a case file can come with ("" = none).
  // Such a backend runs only with the user's permission (registry.h), and repros record its sha256.
  std::string (*user_code_file)(const std::string& id) = nullptr;
  // Optional: the family's merge kernels for partials (attnscope/merge.h; compiled families only).
  std::vector<Merger> (*mergers)() = nullptr;
  // Optional: the family's own top-k selection on the GPU, run beside DeepSeek sparse attention's
  // (sparse.h select_top_k, ties to the smaller index) by `explain`: rows [n][stride] fp32 scores, row
  // i's candidates its first lengths[i]; returns [n][top_k] positions, then -1. Throws std::runtime_error
  // saying why it cannot run (not compiled, no GPU, a limit of the library). gpu_top_k_name says whose.
  std::vector<int> (*gpu_top_k)(const std::vector<float>& rows, const std::vector<int>& lengths, int stride, int top_k) = nullptr;
  std::string gpu_top_k_name;
};

// A backend that only reports "not compiled: <why>" (families absent from this build).
std::unique_ptr<Backend> make_not_compiled_backend(const std::string& id, const std::string& why);

}  // namespace attnscope
