// Work spread over the machine's cores for the input generators, whose every element is a pure
// function of its index: each index runs once, on whichever core takes it, so the bits do not depend
// on the number of cores.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

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

}  // namespace attnscope
