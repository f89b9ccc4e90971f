// The GUI's live run as a graph of stages (generated inputs, each backend's result, the FP8 ideals,
// the comparisons), each keyed by a hash of exactly the case fields it reads: an edit re-runs the
// stages whose key changed and takes the rest from a content cache, bounded in bytes (least recently
// used first out), so undo / redo and flipping back to a recent value re-run nothing.
// docs/architecture.md, "The live run".
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "attnscope/case_spec.h"

namespace attnscope {

struct Plan;  // attnscope/plan.h

// The content keys (sha256 of the case fields each stage reads, as canonical JSON).
// inputs: the generator's fields (shapes, dtype, cache layout and allocation, data, FP8 scales, MLA);
// not the mask, the planner, the backends, the comparisons or the names.
std::string inputs_key(const CaseSpec& c);
// The device inputs' key (cuda::device_workload): the inputs and what the device workload also
// uploads, the masks of /attention.
std::string device_inputs_key(const CaseSpec& c);
// A backend's result: every field but the names, the backend list and the comparisons; the planner
// (/split) only for a backend that runs a plan (plan_independent() false), and for the plan's CPU twin
// (Role::kPlanTwin, given `plan`) what it executes of the split plan rather than /split itself; the
// sampled rows; the sha256 of the code file a user-code backend runs.
std::string backend_key(const CaseSpec& c, const std::string& id, std::optional<int> sample_rows, const Plan* plan = nullptr);
// True for the backends whose result does not depend on /split: the references and the low-precision
// baseline (their roles), which compute every row from the inputs and the mask alone.
bool plan_independent(const std::string& id);

// How often each stage ran (a cache miss) or was reused (a hit) since the cache was made: the tests'
// counters, and the live report's.
struct StageCounts {
  int inputs_made = 0, inputs_reused = 0;
  std::map<std::string, int> backend_runs, backend_reused;  // per backend id
  int compares_made = 0, compares_reused = 0;
};

class StageCache {
 public:
  explicit StageCache(int64_t max_bytes = int64_t{512} << 20) : max_bytes_(max_bytes) {}

  // The value stored under `key`, or null (and counted as a miss by the caller).
  std::shared_ptr<const void> get(const std::string& key);
  // Stores `value` (costing `bytes`), then drops the least recently used entries past the bound. An
  // entry larger than the whole bound is not kept.
  void put(const std::string& key, std::shared_ptr<const void> value, int64_t bytes);
  template <class T>
  std::shared_ptr<const T> get_as(const std::string& key) {
    return std::static_pointer_cast<const T>(get(key));
  }

  int64_t bytes() const;
  int64_t max_bytes() const { return max_bytes_; }
  size_t entries() const;
  StageCounts counts() const;
  void count(const std::function<void(StageCounts&)>& f);

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const void> value;
    int64_t bytes;
  };
  mutable std::mutex mu_;
  int64_t max_bytes_, bytes_ = 0;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> at_;
  StageCounts counts_;
};

}  // namespace attnscope
