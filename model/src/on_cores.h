// The model's work spread over the machine's cores. on_cores and key_blocks serve the input generators,
// whose every element is a pure function of its index: each index runs once, on whichever core takes it,
// so the bits do not depend on the number of cores. parallel_blocks serves per-row loops.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "attnscope/case_spec.h"

namespace attnscope {

// Runs f(i) for every i in [0, n); f must write only the elements of index i.
template <class F>
void on_cores(size_t n, F f) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) f(i);
  };
  const size_t threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

// Runs f(a, b) over [0, n) in blocks on up to 16 threads when `work` is large (a block per thread), else
// f(0, n) on the caller's: for per-row loops that are often too small to pay for threads.
template <class F>
void parallel_blocks(int n, int64_t work, F f) {
  const int threads =
      work < (int64_t{1} << 22) ? 1 : static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  if (threads == 1 || n < 2 * threads) return f(0, n);
  std::vector<std::thread> pool;
  const int per = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int a = t * per, b = std::min(n, a + per);
    if (a < b) pool.emplace_back(f, a, b);
  }
  for (auto& th : pool) th.join();
}

// The generators' tasks: every request's keys in blocks of `per`, and with `queries` first a block
// (begin -1) for the request's query rows.
struct KeyBlock {
  int r, begin, end;  // keys [begin, end) of request r; begin -1: its query rows
};
inline std::vector<KeyBlock> key_blocks(const CaseSpec& c, int per, bool queries) {
  std::vector<KeyBlock> blocks;
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    if (queries) blocks.push_back({r, -1, 0});
    for (int k = 0; k < c.requests[r].kv_len; k += per) blocks.push_back({r, k, std::min(c.requests[r].kv_len, k + per)});
  }
  return blocks;
}

}  // namespace attnscope
