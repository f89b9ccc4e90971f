// Helpers shared by the CPU backends: a small parallel loop and K/V row access in the paged pool.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnscope/backend.h"
#include "attnscope/fp8.h"
#include "attnscope/mask.h"
#include "cpu_family.h"

namespace attnscope::cpu {

// Runs body(i) for i in [0, n) on all hardware threads; dynamic scheduling in blocks of `grain`.
// Stops handing out work once *cancel is set; reports progress after each block.
inline void parallel_for(int64_t n, int64_t grain, const RunOptions& opt, const std::function<void(int64_t)>& body) {
  const int threads = opt.threads > 0 ? opt.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<int64_t> next{0}, done{0};
  auto worker = [&]() {
    for (;;) {
      if (opt.cancel && opt.cancel->load()) return;
      const int64_t b = next.fetch_add(grain);
      if (b >= n) return;
      const int64_t e = std::min(n, b + grain);
      for (int64_t i = b; i < e; ++i) body(i);
      const int64_t d = done.fetch_add(e - b) + (e - b);
      if (opt.progress) opt.progress(static_cast<double>(d) / static_cast<double>(n));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

// q . k for n key rows, each summed over d in order as `acc += Acc(q[d]) * Acc(k[d])` from 0: the same
// bits as one row at a time. Eight rows go together: eight independent sums keep the adder busy where
// one row's sum waits on its own previous add.
template <class Acc, class Q>
inline void dot_rows(const Q* q, const float* const* rows, int n, int D, Acc* out) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    Acc a[8] = {};
    const float* k[8];
    for (int j = 0; j < 8; ++j) k[j] = rows[i + j];
    for (int d = 0; d < D; ++d) {
      const Acc x = static_cast<Acc>(q[d]);
      for (int j = 0; j < 8; ++j) a[j] += x * static_cast<Acc>(k[j][d]);
    }
    for (int j = 0; j < 8; ++j) out[i + j] = a[j];
  }
  for (; i < n; ++i) {
    Acc a = 0;
    for (int d = 0; d < D; ++d) a += static_cast<Acc>(q[d]) * static_cast<Acc>(rows[i][d]);
    out[i] = a;
  }
}

// The dot products of L heads' Q (qt: [d][L], one lane per head) with each of n K rows, in T:
// a[j * L + i] = sum over d in order of qt[d][i] * k_j[d], each lane accumulated as one head alone
// (dot_rows) would, while one K element meets every lane in one vector step. Floats go through
// explicit vectors of the machine's width (GCC otherwise vectorises over d with shuffles, 10x slower);
// doubles vectorise well as plain loops (and slower as explicit vectors): measured, not guessed.
template <class T, int L>
void head_dots(const T* qt, const float* const* rows, int n, int D, T* a) {
  if constexpr (std::is_same_v<T, float>) {
#ifdef __AVX__
    constexpr int kBytes = 32;
#else
    constexpr int kBytes = 16;
#endif
    constexpr int W = std::min<int>(L, kBytes / static_cast<int>(sizeof(T))), R = L / W;
    typedef T V __attribute__((vector_size(sizeof(T) * W)));
    for (int j = 0; j < n; ++j) {
      V acc[R] = {};
      const float* kr = rows[j];
      for (int d = 0; d < D; ++d)
        for (int r = 0; r < R; ++r) {
          V q;
          std::memcpy(&q, qt + static_cast<size_t>(d) * L + r * W, sizeof(V));
          acc[r] += q * kr[d];
        }
      std::memcpy(a + static_cast<size_t>(j) * L, acc, sizeof(acc));
    }
  } else {
    for (int j = 0; j < n; ++j) {
      T acc[L] = {};
      const float* kr = rows[j];
      for (int d = 0; d < D; ++d) {
        const T x = static_cast<T>(kr[d]);
        for (int i = 0; i < L; ++i) acc[i] += qt[static_cast<size_t>(d) * L + i] * x;
      }
      for (int i = 0; i < L; ++i) a[static_cast<size_t>(j) * L + i] = acc[i];
    }
  }
}

// The row backends' tasks (cpu.reference, cpu.lowp): per token, the query heads in blocks of up to
// kHeadBlock, each block within one KV head, so a block's heads read the same K and V rows.
constexpr int kHeadBlock = 8;
struct HeadBlocks {
  int G, per_kv, per_token;
  explicit HeadBlocks(const CaseSpec& c)
      : G(c.group_size()), per_kv((G + kHeadBlock - 1) / kHeadBlock), per_token(c.num_kv_heads * per_kv) {}
  // block b of a token: its first head and head count
  std::pair<int, int> heads(int b) const {
    const int hk = b / per_kv, h0 = hk * G + (b % per_kv) * kHeadBlock;
    return {h0, std::min(kHeadBlock, (hk + 1) * G - h0)};
  }
  // parallel_for's grain: about 16 heads per grab, as one head per task had
  int64_t grain() const { return std::max(1, 16 / std::min(G, kHeadBlock)); }
};

// head_dots at lanes L = the next power of two of nh (at most 8).
inline int head_dots_lanes(int nh) { return nh <= 1 ? 1 : nh <= 2 ? 2 : nh <= 4 ? 4 : 8; }
template <class T>
void head_dots_any(int L, const T* qt, const float* const* rows, int n, int D, T* a) {
  if (L == 1) dot_rows<T>(qt, rows, n, D, a);  // one head: eight keys side by side instead (the same bits)
  if (L == 2) head_dots<T, 2>(qt, rows, n, D, a);
  if (L == 4) head_dots<T, 4>(qt, rows, n, D, a);
  if (L == 8) head_dots<T, 8>(qt, rows, n, D, a);
}

struct KvAccess {
  const CaseSpec& c;
  const PageTable& pt;
  const Workload& w;
  const float* k(int r, int key, int h) const {
    return w.k_pool.data() + kv_offset(c.kv_cache.layout, pt.page_of(r, key), key % pt.page_size, h, 0, pt.page_size,
                                       c.num_kv_heads, c.head_dim_qk);
  }
  const float* v(int r, int key, int h) const {
    return w.v_pool.data() + kv_offset(c.kv_cache.layout, pt.page_of(r, key), key % pt.page_size, h, 0, pt.page_size,
                                       c.num_kv_heads, c.head_dim_vo);
  }
  // FP8 scales of key `key`'s K and V row (1 without scales: the workload of the original values
  // has none even for an FP8 case).
  float k_scale(int r, int key, int h) const { return w.has_scales() ? w.k_scale[scale_at(r, key, h)] : 1.0f; }
  float v_scale(int r, int key, int h) const { return w.has_scales() ? w.v_scale[scale_at(r, key, h)] : 1.0f; }
  int64_t scale_at(int r, int key, int h) const {
    return scale_index(c.kv_cache.scales.granularity, pt.page_of(r, key), key % pt.page_size, h, pt.page_size, c.num_kv_heads);
  }
};

// The plan's score_mod applied to one scaled logit x (q.k * sm_scale) of request r, head h, query
// at qa, key k, in doubles; x unchanged without one.
inline double apply_score_mod(const CaseSpec& c, const Plan& p, int r, int h, int qa, int k, double x) {
  if (!p.score_mod) return x;
  return p.score_mod->eval(expr_env(c, r, h, qa, k, x));
}

// A result with O and LSE poisoned (NaN) so any element a backend forgets to write shows up.
inline Result poisoned_result(const std::string& id, const CaseSpec& c) {
  Result r;
  r.backend = id;
  r.o.assign(static_cast<size_t>(c.total_q()) * c.num_qo_heads * c.head_dim_vo, std::numeric_limits<float>::quiet_NaN());
  r.lse.assign(static_cast<size_t>(c.total_q()) * c.num_qo_heads, std::numeric_limits<float>::quiet_NaN());
  return r;
}

// (request, query) of every token, in token order.
inline std::vector<std::pair<int, int>> token_list(const CaseSpec& c) {
  std::vector<std::pair<int, int>> t;
  t.reserve(static_cast<size_t>(c.total_q()));
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
    for (int q = 0; q < c.requests[r].q_len; ++q) t.emplace_back(r, q);
  return t;
}

// The start every row-by-row CPU backend shares (cpu.reference, cpu.lowp): poisoned outputs, the
// tokens, and the rows to compute; a sampled run records its rows and says so in the result.
struct RowRun {
  Result res;
  std::vector<std::pair<int, int>> tokens;
  std::vector<uint8_t> sel;
};
inline RowRun start_row_run(const std::string& id, const CaseSpec& c, const RunOptions& opt) {
  RowRun r{poisoned_result(id, c), token_list(c), row_selection(c, opt.sample_rows)};
  if (opt.sample_rows) {
    r.res.row_valid = r.sel;
    r.res.message = "sampled " + std::to_string(*opt.sample_rows) + " query rows per request";
  }
  return r;
}

}  // namespace attnscope::cpu
