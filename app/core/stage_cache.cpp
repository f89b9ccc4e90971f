#include "stage_cache.h"

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
  // make_workload reads shapes, dtype, /kv_cache, /data, /fp8_attention and /mla; never these
  for (const char* k : {"attention", "split", "cuda_graph", "reference", "kernels", "engine"}) j.erase(k);
  return sha256_hex("inputs\n" + j.dump());
}

bool plan_independent(const std::string& id) {
  const BackendInfo* b = backend_info(id);
  return b && (b->role == Role::kReference || b->role == Role::kLowp);
}

std::string backend_key(const CaseSpec& c, const std::string& id, std::optional<int> sample_rows) {
  nlohmann::ordered_json j = stage_json(c);
  j.erase("reference");  // the rows actually sampled are below (the runner may override the case's)
  if (plan_independent(id)) j.erase("split");
  j["stage"] = {{"backend", id}, {"sample_rows", sample_rows ? nlohmann::ordered_json(*sample_rows) : nullptr}};
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
