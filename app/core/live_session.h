// The GUI's run of a case: run_session's stages (inputs, each backend, the FP8 ideals, the
// comparisons) through the content cache (stage_cache.h), so an edit re-runs only the stages it
// invalidates; the previous edit's results are shown, marked stale, until this edit's replace them.
// The CLI's `run` never comes here: it stays one pass (session.h).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>

#include "session.h"
#include "stage_cache.h"

namespace attnscope {

struct LiveOptions {
  SessionOptions session;                                       // cancel: stop inside a stage (its result is then dropped)
  StageCache* cache = nullptr;                                  // null: nothing reused
  const std::atomic<bool>* superseded = nullptr;                // a newer edit waits: stop at the next stage boundary
  std::shared_ptr<const Session> previous;                      // its results are shown (stale) until replaced
  std::shared_ptr<const Plan> plan;                             // planned already (the GUI plans in the frame of the edit)
  std::function<void(std::shared_ptr<const Session>)> publish;  // after each stage (not the finished session: returned)
};

// Runs `f` live. Returns the finished session, or null when it was superseded or cancelled (then
// nothing it did not finish was published or cached).
std::shared_ptr<const Session> run_live(const CaseFile& f, const LiveOptions& o);

// `planned` (a session of the newest edit, plan only) showing `older`'s results and comparisons, all
// marked stale, where the two cases have the same shape (requests, heads, head dims: every view then
// indexes them alike); else `planned` as it is.
std::shared_ptr<const Session> with_stale_results(const Session& planned, const Session& older);

// The key of one comparison: its spec and the keys of the results it reads (backend id -> its key; a
// backend not run counts as absent).
std::string compare_key(const ComparisonSpec& k, const std::map<std::string, std::string>& backend_keys,
                        const std::string& fp8_key);

}  // namespace attnscope
