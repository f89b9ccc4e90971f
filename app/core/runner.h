// The GUI's background runner: the worker runs each case live (live_session.h: only the stages an
// edit invalidates, the rest from its content cache), publishing an immutable snapshot after every
// stage. A newer case supersedes the run in flight: at once (inside a CPU stage, at its next block of
// rows) unless that run itself superseded another, which then finishes (or ends its sampled pass, the
// full reference after it being the background's), so a drag still shows results, never more than
// one run behind. Nothing queues: only the newest case waits. The GUI
// thread only reads the latest snapshot; it never waits on the worker.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "live_session.h"
#include "session.h"
#include "stage_cache.h"

namespace attnscope {

struct Snapshot {
  uint64_t generation = 0;                                                        // which submit() this belongs to
  std::shared_ptr<const Session> session;                                         // null until the plan is ready
  bool done = false;                                                              // every stage finished (or failed)
  std::string error;                                                              // the case was invalid or a stage threw
  std::chrono::steady_clock::time_point made = std::chrono::steady_clock::now();  // when published
  // The newest finished run whose results this snapshot shows (its own generation once done; while a
  // run is under way, the run before it that finished: its results stand in, marked stale).
  uint64_t finished_gen = 0;
  // As finished_gen, counting a run whose sampled pass finished (live_session.h, sample_first): its
  // sampled results are on screen while the full reference is computed.
  uint64_t first_gen = 0;
  bool sampled = false;  // this snapshot is the one that ends its run's sampled pass
};

class Runner {
 public:
  Runner();
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Starts a new run of `f` (superseding the current one); returns its generation. `planned`: the
  // GUI's session of `f` planned in the frame of the edit (its plan is used, its results are shown
  // stale until replaced), or null.
  uint64_t submit(const CaseFile& f, const SessionOptions& opt = {}, std::shared_ptr<const Session> planned = nullptr);
  std::shared_ptr<const Snapshot> latest() const;
  // What the worker is doing now ("<backend> 42%"), for the status bar.
  std::string activity() const;
  bool busy() const { return busy_.load(); }
  // Hands an old snapshot to the worker to destroy: a session's results are tens of MB, and freeing
  // them on the GUI thread costs a frame.
  void retire(std::shared_ptr<const void> old);
  // Called on the worker after each snapshot is published (the GUI's: wake its event loop).
  void set_wake(std::function<void()> f);
  // The live run's budget for a full reference (LiveOptions::full_reference_budget), from the next run on.
  void set_full_reference_budget(int64_t b) { budget_ = b; }
  StageCounts counts() const { return cache_.counts(); }
  int64_t cache_bytes() const { return cache_.bytes(); }

 private:
  void loop();
  void publish(std::shared_ptr<const Snapshot> s);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Job {
    CaseFile file;
    SessionOptions opt;
    std::shared_ptr<const Session> planned;
  };
  std::optional<Job> pending_;
  StageCache cache_;
  std::shared_ptr<const Session> last_done_;  // the worker's: the latest finished session or sampled pass (stale stand-ins)
  uint64_t last_done_gen_ = 0, last_first_gen_ = 0;
  bool protected_ = false;  // the run in flight superseded another: it finishes (up to its sampled pass)
  std::vector<std::shared_ptr<const void>> retired_;
  uint64_t pending_gen_ = 0;
  std::shared_ptr<const Snapshot> latest_;
  std::string activity_;
  std::function<void()> wake_;
  std::atomic<bool> cancel_{false}, superseded_{false};
  std::atomic<bool> busy_{false};
  std::atomic<int64_t> budget_{kFullReferenceBudget};
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace attnscope
