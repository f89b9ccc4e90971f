// Small seeded host generator for plan decisions (page shuffles) and test case generation.
// Tensor data does not use this: see workload.h for the counter-based generator.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace attnscope {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform integer in [lo, hi] (hi >= lo); the tiny modulo bias is irrelevant here.
  int range(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }
  bool coin() { return (next() >> 63) != 0; }

 private:
  uint64_t s_;
};

// Fisher-Yates with a given generator: the same seed gives the same order on every platform.
template <class T>
void shuffle(std::vector<T>& v, SplitMix64& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.next() % i);
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace attnscope
