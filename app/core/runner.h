// The GUI's background runner: a new case cancels the stale run; the worker plans, runs each
// backend and compares, publishing an immutable snapshot after every stage. The GUI thread only
// reads the latest snapshot; it never waits on the worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "session.h"

namespace attnscope {

struct Snapshot {
  uint64_t generation = 0;                 // which submit() this belongs to
  std::shared_ptr<const Session> session;  // null until the plan is ready
  bool done = false;                       // every stage finished (or failed)
  std::string error;                       // the case was invalid or a stage threw
};

class Runner {
 public:
  Runner();
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Starts a new run of `f` (cancelling the current one); returns its generation.
  uint64_t submit(const CaseFile& f, const SessionOptions& opt = {});
  std::shared_ptr<const Snapshot> latest() const;
  // What the worker is doing now ("<backend> 42%"), for the status bar.
  std::string activity() const;
  bool busy() const { return busy_.load(); }
  // Hands an old snapshot to the worker to destroy: a session's results are tens of MB, and freeing
  // them on the GUI thread costs a frame.
  void retire(std::shared_ptr<const void> old);

 private:
  void loop();
  void publish(std::shared_ptr<const Snapshot> s);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::pair<CaseFile, SessionOptions>> pending_;
  std::vector<std::shared_ptr<const void>> retired_;
  uint64_t pending_gen_ = 0;
  std::shared_ptr<const Snapshot> latest_;
  std::string activity_;
  std::atomic<bool> cancel_{false};
  std::atomic<bool> busy_{false};
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace attnscope
