#include "stage_cache.h"

#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "attnscope/sha256.h"
#include "case_json.h"

namespace attnscope {

namespace {

// The case as JSON without the fields no stage reads (names) and those that select stages rather
// than feed them (the backend list, the comparisons).
nlohmann::ordered_json stage_json(const CaseSpec& c) {
  nlohmann::ordered_json j = case_to_json(c);
  for (const char* k : {"name", "description", "backends", "comparisons"}) j.erase(k);
  return j;
}

}  // namespace

std::string inputs_key(const CaseSpec& c) {
  nlohmann::ordered_json j = stage_json(c);
  // make_workload reads shapes, dtype, /kv_cache, /data, /fp8_attention and /mla; never these (/sparse is the
  // plan's mask: the indexer's inputs are its own streams)
  for (const char* k : {"attention", "split", "cuda_graph", "reference", "kernels", "engine", "sparse"}) j.erase(k);
  return sha256_hex("inputs\n" + j.dump());
}

std::string device_inputs_key(const CaseSpec& c) {
  nlohmann::ordered_json j = stage_json(c);
  for (const char* k : {"split", "cuda_graph", "reference", "kernels", "engine"}) j.erase(k);
  return sha256_hex("device inputs\n" + j.dump());
}

bool plan_independent(const std::string& id) {
  const BackendInfo* b = backend_info(id);
  return b && (b->role == Role::kReference || b->role == Role::kLowp);
}

// Every reference computes only the sampled rows (the GPU's fp64 one too); of the low-precision
// baselines only the host's does (the GPU's computes every row).
bool samples_rows(const std::string& id) {
  const BackendInfo* b = backend_info(id);
  return b && (b->role == Role::kReference || (b->role == Role::kLowp && !is_gpu_backend(id)));
}

namespace {

// What the plan's CPU twin executes of a split plan: its tiles, chunks, items and merge layout. A
// /split edit that leaves these as they were (another SM count giving the same chunks) is no new run.
std::string executed_split(const SplitPlan& sp, PartialPrecision partials) {
  std::string t = std::to_string(sp.cta_tile_q) + ' ' + std::to_string(sp.chunk_pages) + ' ' + std::to_string(sp.split_kv) + ' ' +
                  std::to_string(sp.window_chunks) + ' ' + std::to_string(sp.kv_warp_split) + ' ' + partials_name(partials) +
                  '\n';
  for (const WorkItem& it : sp.items)
    for (int v : {it.unit, it.q_tile, it.kv_chunk, it.row_begin, it.row_end, it.kv_begin, it.kv_end})
      t += std::to_string(v) + ' ';
  t += '\n';
  for (const auto* v : {&sp.unit_chunks, &sp.o_indptr, &sp.item_tile_indptr, &sp.item_tiles})
    for (int x : *v) t += std::to_string(x) + ' ';
  return sha256_hex(t);
}

}  // namespace

std::string backend_key(const CaseSpec& c, const std::string& id, std::optional<int> sample_rows, const Plan* plan) {
  nlohmann::ordered_json j = stage_json(c);
  j.erase("reference");  // the rows actually sampled are below (the runner may override the case's)
  const BackendInfo* b = backend_info(id);
  if (plan_independent(id)) {
    j.erase("split");
  } else if (plan && b && b->role == Role::kPlanTwin) {  // it reads the plan's decisions, not /split
    j.erase("split");
    j["executed_split"] = executed_split(plan->split, c.split.partials);
  }
  const bool sampled = sample_rows && samples_rows(id);
  j["stage"] = {{"backend", id}, {"sample_rows", sampled ? nlohmann::ordered_json(*sample_rows) : nullptr}};
  const std::string file = user_code_file(id);
  if (!file.empty()) {  // an edited code file is another result
    std::string why;
    j["stage"]["code_sha256"] = file_sha256(file, &why);
  }
  return sha256_hex("backend\n" + j.dump());
}

std::shared_ptr<const void> StageCache::get(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = at_.find(key);
  if (it == at_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

void StageCache::put(const std::string& key, std::shared_ptr<const void> value, int64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = at_.find(key); it != at_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    at_.erase(it);
  }
  if (bytes > max_bytes_) return;
  lru_.push_front({key, std::move(value), bytes});
  at_[key] = lru_.begin();
  bytes_ += bytes;
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    bytes_ -= lru_.back().bytes;
    at_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

int64_t StageCache::bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return bytes_;
}

size_t StageCache::entries() const {
  std::lock_guard<std::mutex> l(mu_);
  return lru_.size();
}

StageCounts StageCache::counts() const {
  std::lock_guard<std::mutex> l(mu_);
  return counts_;
}

void StageCache::count(const std::function<void(StageCounts&)>& f) {
  std::lock_guard<std::mutex> l(mu_);
  f(counts_);
}

}  // namespace attnscope
