// Seeded partials of a partitioned run for the merge tests (tests/cpu/test_merge.cpp, tests/gpu/test_merge.cpp,
// tests/gpu/test_nccl_gather.cpp): P partials of `rows` rows, O in the dtype's values (never all zeros),
// LSE in natural log, and some rows where a partial holds no key (LSE -inf, O = 0), including rows where
// every partial is empty.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "attnscope/merge.h"
#include "attnscope/rng.h"

namespace attnscope::testing {

struct MergePartials {
  std::vector<std::vector<float>> o, lse;  // [P][rows * dv], [P][rows]
  int64_t rows = 0;
  int dv = 0;
  DType dtype = DType::kBf16;
  std::vector<int64_t> empty_rows;  // rows where every partial is empty

  // The host form merge_partials and the mergers read.
  MergeInput input(LseBase native, LseBase read, int device = 0) const {
    MergeInput in;
    for (size_t k = 0; k < o.size(); ++k) in.parts.push_back({o[k].data(), lse[k].data()});
    in.rows = rows;
    in.dv = dv;
    in.dtype = dtype;
    in.native = native;
    in.read = read;
    in.device = device;
    return in;
  }
};

// A uniform value in [lo, hi) from g.
inline float uniform(SplitMix64& g, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(static_cast<double>(g.next() >> 11) * 0x1.0p-53);
}

// P partials: LSE in [-4, 12) (so weights spread over orders of magnitude), O in [-2, 2) rounded to
// the dtype; about 1 row in 8 has one partial empty, and rows 3 and rows - 2 have all of them empty.
inline MergePartials make_merge_partials(uint64_t seed, int P, int64_t rows, int dv, DType dt) {
  SplitMix64 g(seed * 7919 + 17);
  MergePartials m;
  m.rows = rows;
  m.dv = dv;
  m.dtype = dt;
  m.o.assign(P, std::vector<float>(static_cast<size_t>(rows) * dv));
  m.lse.assign(P, std::vector<float>(static_cast<size_t>(rows)));
  for (int k = 0; k < P; ++k)
    for (int64_t r = 0; r < rows; ++r) {
      m.lse[k][r] = uniform(g, -4.f, 12.f);
      for (int d = 0; d < dv; ++d) {
        float v = round_to(dt, uniform(g, -2.f, 2.f));
        if (v == 0.f) v = round_to(dt, 0.5f);  // never a zero value: a dropped partial must show
        m.o[k][r * dv + d] = v;
      }
    }
  auto empty = [&](int k, int64_t r) {
    m.lse[k][r] = -INFINITY;
    for (int d = 0; d < dv; ++d) m.o[k][r * dv + d] = 0.f;
  };
  for (int64_t r = 0; r < rows; ++r)
    if (g.range(0, 7) == 0) empty(g.range(0, P - 1), r);
  for (int64_t r : {int64_t{3}, rows - 2})
    if (r >= 0 && r < rows) {
      for (int k = 0; k < P; ++k) empty(k, r);
      m.empty_rows.push_back(r);
    }
  return m;
}

}  // namespace attnscope::testing
