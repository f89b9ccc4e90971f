// The GUI's run of a case: run_session's stages (inputs, each backend, the FP8 ideals, the
// comparisons) through the content cache (stage_cache.h), so an edit re-runs only the stages it
// invalidates; the previous edit's results are shown, marked stale, until this edit's replace them.
// A case whose full host reference is over a budget runs the references on sampled rows first, then
// every row (sample_first). The CLI's `run` never comes here: it stays one pass (session.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "session.h"
#include "stage_cache.h"

namespace attnscope {

// Past this many multiply-adds (sample_first's cost) a full fp64 host reference takes most of a second
// or more on a desktop CPU, beyond what an edit's first results may wait (docs/gui.md has the figures).
constexpr int64_t kFullReferenceBudget = int64_t{1} << 32;
// The same for the GPU's fp64 reference (cuda.reference samples rows too): it makes about 2e11
// multiply-adds a second on an H200, so past 2^34 its full run is over the 100 ms an edit may wait.
constexpr int64_t kGpuReferenceBudget = int64_t{1} << 34;
// The rows per request of the sampled pass: the spread `/reference/sample_rows` gives (first and last
// row of each request included), enough to show every request's error while the rest is computed.
constexpr int kSampleFirstRows = 16;

struct SampleFirst {
  int rows_per_request = 0;
  int64_t rows = 0, total_rows = 0;  // query rows the sampled pass computes, of the case's
  int64_t cost = 0;                  // the full reference's multiply-adds
};
// The sampled pass a live run of `c` (running `ids`, with every row asked for) makes first, or null:
// only where a row-sampling backend runs (samples_rows, or an FP8 case's host ideals), the full
// reference costs more than `budget` (the sum over requests of q_len x kv_len x qo heads x (head dim qk
// + vo): the fp64 row loop's multiply-adds, masks not counted, so a bound), and sampling leaves rows out.
// `gpu_budget` is the bound where the only row-sampling backend is on the GPU (0: never sampled first).
std::optional<SampleFirst> sample_first(const CaseSpec& c, const std::vector<std::string>& ids, int64_t budget,
                                        int64_t gpu_budget = kGpuReferenceBudget);
// "sampled 16 rows per request (64 of 4194304 query rows) ..." for a session showing sampled results
// (Session::shows_sampled), else "".
std::string sampled_note(const Session& s);

struct LiveOptions {
  SessionOptions session;                                       // cancel: stop inside a stage (its result is then dropped)
  StageCache* cache = nullptr;                                  // null: nothing reused
  const std::atomic<bool>* superseded = nullptr;                // a newer edit waits: stop at the next stage boundary
  std::shared_ptr<const Session> previous;                      // its results are shown (stale) until replaced
  std::shared_ptr<const Plan> plan;                             // planned already (the GUI plans in the frame of the edit)
  std::function<void(std::shared_ptr<const Session>)> publish;  // after each stage (not the finished session: returned)
  int64_t full_reference_budget = kFullReferenceBudget;         // sample_first's; 0: always every row at once
  // The sampled pass is finished (its session: sampled results and comparisons), handed here instead
  // of to `publish`; the full pass follows when it returns. The runner lets a newer edit supersede the
  // run from here on, even one it would otherwise let finish.
  std::function<void(std::shared_ptr<const Session>)> sampled_done;
};

// Runs `f` live. Returns the finished session, or null when it was superseded or cancelled (then
// nothing it did not finish was published or cached).
std::shared_ptr<const Session> run_live(const CaseFile& f, const LiveOptions& o);

// Where `older` has the shape of `s` (requests, heads, head dims: every view then indexes them alike):
// `older`'s results of the backends in `ids` (in that order), its comparisons and its FP8 ideals, put
// into `s` marked stale (and sampled where they were). Else `s` is left as it is and false returned.
// The one place a previous session's results enter a new one (the live run and the GUI's frame).
bool carry_stale(Session& s, const Session& older, const std::vector<std::string>& ids);
// `planned` (a session of the newest edit, plan only) showing `older`'s results as carry_stale does,
// for planned's backends.
std::shared_ptr<const Session> with_stale_results(const Session& planned, const Session& older);

// The key of one comparison: its spec and the keys of the results it reads (backend id -> its key; a
// backend not run counts as absent), and for an FP8 case the key of the ideals it reads ("" otherwise).
std::string compare_key(const ComparisonSpec& k, const std::map<std::string, std::string>& backend_keys,
                        const std::string& fp8_key);

}  // namespace attnscope
