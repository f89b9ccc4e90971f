// Page table from the allocation policy.
#include "attnscope/paging.h"

#include <algorithm>
#include <list>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>

#include "attnscope/rng.h"

namespace attnscope {

static PageTable build_page_table(const CaseSpec& c) {
  PageTable pt;
  pt.page_size = c.effective_page_size();
  const int ps = pt.page_size;
  const bool ragged = c.kv_cache.storage == KvStorage::kRagged;
  const int base = (!ragged && c.kv_cache.null_page) ? 1 : 0;

  const int n = static_cast<int>(c.requests.size());
  pt.indptr.assign(n + 1, 0);
  pt.last_page_len.assign(n, 0);
  for (int r = 0; r < n; ++r) {
    const int kv = c.requests[r].kv_len;
    const int pages = (kv + ps - 1) / ps;
    pt.indptr[r + 1] = pt.indptr[r] + pages;
    pt.last_page_len[r] = pages > 0 ? kv - (pages - 1) * ps : 0;
  }
  const int used = pt.indptr[n];

  // The physical ids handed out, in the order keys consume them.
  std::vector<int> ids;
  SplitMix64 rng(c.kv_cache.allocation_seed ^ 0x5eed0fa9e5ull);
  switch (ragged ? PageAlloc::kContiguous : c.kv_cache.allocation) {
    case PageAlloc::kContiguous:
      pt.num_pages = base + used;
      ids.resize(used);
      std::iota(ids.begin(), ids.end(), base);
      break;
    case PageAlloc::kShuffled:
      pt.num_pages = base + used;
      ids.resize(used);
      std::iota(ids.begin(), ids.end(), base);
      shuffle(ids, rng);
      break;
    case PageAlloc::kFragmented: {
      // A pool twice the size: used pages land scattered with unused ones between them, as in a
      // cache that has served and freed other requests.
      pt.num_pages = base + 2 * used;
      std::vector<int> pool(2 * used);
      std::iota(pool.begin(), pool.end(), base);
      shuffle(pool, rng);
      ids.assign(pool.begin(), pool.begin() + used);
      break;
    }
  }
  pt.indices = ids;
  pt.owner.assign(pt.num_pages, kPageUnused);
  if (base == 1) pt.owner[0] = kPageNull;
  for (int r = 0; r < n; ++r)
    for (int i = pt.indptr[r]; i < pt.indptr[r + 1]; ++i) pt.owner[pt.indices[i]] = r;
  return pt;
}

PageTable make_page_table(const CaseSpec& c) {
  // A pure function of the fields below, and a fragmented pool of a million pages takes ~100 ms to
  // shuffle: the last two large tables are kept, so a live edit of anything else (the mask, the data,
  // the planner) plans in the frame.
  int64_t keys = 0;
  for (const auto& r : c.requests) keys += r.kv_len;
  if (keys / std::max(1, c.effective_page_size()) < (1 << 16)) return build_page_table(c);
  const KvCacheSpec& k = c.kv_cache;
  std::string key = std::to_string(c.effective_page_size()) + ' ' + storage_name(k.storage) + ' ' + alloc_name(k.allocation) +
                    ' ' + std::to_string(k.allocation_seed) + ' ' + std::to_string(k.null_page);
  for (const auto& r : c.requests) key += ' ' + std::to_string(r.kv_len);
  static std::mutex mu;
  static std::list<std::pair<std::string, std::shared_ptr<const PageTable>>> kept;  // most recent first
  {
    std::lock_guard<std::mutex> l(mu);
    for (auto it = kept.begin(); it != kept.end(); ++it)
      if (it->first == key) {
        kept.splice(kept.begin(), kept, it);
        return *kept.front().second;
      }
  }
  auto pt = std::make_shared<const PageTable>(build_page_table(c));
  std::lock_guard<std::mutex> l(mu);
  kept.emplace_front(std::move(key), pt);
  if (kept.size() > 2) kept.pop_back();
  return *pt;
}

}  // namespace attnscope
