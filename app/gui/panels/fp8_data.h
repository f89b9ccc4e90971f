// What the FP8 views draw: app/core's Fp8Data (fp8_stats.h), built once per case on a worker thread
// (Fp8Cache): the session does not keep its inputs, so the views regenerate them.
#pragma once

#include <atomic>
#include <memory>

#include "fp8_stats.h"
#include "session.h"

namespace attnscope::gui {

// the numbers themselves are app/core's (fp8_stats.h), shared with the CLI's `fp8` line
using attnscope::build_fp8_data;
using attnscope::Fp8Data;
using attnscope::Fp8TensorData;

// Builds a case's Fp8Data once, off the GUI thread; every FP8 view reads the same one.
class Fp8Cache {
 public:
  // The data of s's case: null while it is being built, and for a case without an FP8 cache.
  std::shared_ptr<const Fp8Data> get(const Session& s);
  bool busy() const { return job_ && !job_->done.load(std::memory_order_acquire); }

 private:
  struct Job {
    std::atomic<bool> done{false};
    std::shared_ptr<const Fp8Data> data;
  };
  std::shared_ptr<Job> job_;
  CaseSpec key_;  // the case job_ is for
};

// The one cache the Pages, Diff and Mask views share.
Fp8Cache& fp8_cache();

}  // namespace attnscope::gui
