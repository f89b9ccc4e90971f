// The mask, written once. Every mask attnscope supports makes each query row see one contiguous
// interval of keys [lo, hi) (causal, sliding window, chunked local, prefix-LM, documents, padding
// and their allowed combinations), so `allowed` is defined through `visible_range`. The CPU
// backends, the CUDA kernels, the block map and the GUI's mask view all call these functions.
#pragma once

#include "attnscope/expr_program.h"
#include "attnscope/types.h"

namespace attnscope {

// Mask parameters of one request, plain data so it can be copied to the device.
struct RowMask {
  int q_len = 0;                    // queries of the request
  int kv_len = 0;                   // keys of the request
  int causal = 1;                   // bottom-right aligned
  int window = 0;                   // W > 0: q_abs - W < k; 0 = no window
  int chunk = 0;                    // c > 0: chunked local attention; 0 = off
  int prefix_len = 0;               // p > 0: keys < p visible to every query (prefix-LM); 0 = off
  int pad_start = -1;               // >= 0: positions >= pad_start are padding; -1 = none
  const int* doc_starts = nullptr;  // [num_docs] sorted, first 0; nullptr = one document
  int num_docs = 0;
  // attention.mask_mod and / or the case's trees (tree_parents), evaluated on the host once per plan
  // (model/src/mask_bits.cpp) into bits that already include the built-in mask above: bit k % 64 of
  // bits[q * words + k / 64] = key k allowed for the request's query q; bounds[2q], bounds[2q + 1] =
  // its first allowed key and one past the last (equal when none). nullptr = neither: the interval
  // above is the whole mask.
  const uint64_t* bits = nullptr;
  const int* bounds = nullptr;
  int words = 0;  // words per query row: ceil(kv_len / 64)
};

AS_HD inline int popcount64(uint64_t x) {
#ifdef __CUDA_ARCH__
  return __popcll(x);
#else
  return __builtin_popcountll(x);
#endif
}

// Absolute position of query q of the request: the queries are the last q_len keys.
AS_HD inline int q_abs_of(const RowMask& m, int q) { return (m.kv_len - m.q_len) + q; }

// Index of the document holding key position `pos` (binary search over doc_starts).
AS_HD inline int doc_of(const RowMask& m, int pos) {
  int lo = 0, hi = m.num_docs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (m.doc_starts[mid] <= pos)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Visible keys of the query at absolute position qa: [*lo, *hi). Empty (lo >= hi) for a fully
// masked row.
AS_HD inline void visible_range(const RowMask& m, int qa, int* lo_out, int* hi_out) {
  int lo = 0, hi = m.kv_len;
  if (m.pad_start >= 0) {
    if (qa >= m.pad_start) {
      *lo_out = 0;
      *hi_out = 0;
      return;
    }  // padding query: sees nothing
    hi = hi < m.pad_start ? hi : m.pad_start;
  }
  if (m.causal) {
    // prefix-LM: k < p or k <= qa  ==  k < max(qa + 1, p)
    int c_hi = qa + 1;
    if (m.prefix_len > c_hi) c_hi = m.prefix_len;
    if (c_hi < hi) hi = c_hi;
  }
  if (m.window > 0) {
    const int w_lo = qa - m.window + 1;
    if (w_lo > lo) lo = w_lo;
  }
  if (m.chunk > 0 && qa >= 0) {
    const int c_lo = (qa / m.chunk) * m.chunk;
    if (c_lo > lo) lo = c_lo;
  }
  if (m.doc_starts != nullptr && m.num_docs > 0 && qa >= 0 && qa < m.kv_len) {
    const int d = doc_of(m, qa);
    const int d_lo = m.doc_starts[d];
    const int d_hi = d + 1 < m.num_docs ? m.doc_starts[d + 1] : m.kv_len;
    if (d_lo > lo) lo = d_lo;
    if (d_hi < hi) hi = d_hi;
  }
  if (m.bounds != nullptr) {  // a mask_mod: the row's first and last allowed key
    const int q = qa - (m.kv_len - m.q_len);
    if (q >= 0 && q < m.q_len) {
      if (m.bounds[2 * q] > lo) lo = m.bounds[2 * q];
      if (m.bounds[2 * q + 1] < hi) hi = m.bounds[2 * q + 1];
    }
  }
  if (lo < 0) lo = 0;
  if (hi < lo) hi = lo;
  *lo_out = lo;
  *hi_out = hi;
}

// The mask_mod bit of (query at qa, key k); true without a mask_mod. Only meaningful inside the
// row's visible range (callers test that first).
AS_HD inline bool mask_bit(const RowMask& m, int qa, int k) {
  if (m.bits == nullptr) return true;
  const int q = qa - (m.kv_len - m.q_len);
  return (m.bits[static_cast<int64_t>(q) * m.words + (k >> 6)] >> (k & 63)) & 1u;
}

AS_HD inline bool allowed(const RowMask& m, int qa, int k) {
  int lo, hi;
  visible_range(m, qa, &lo, &hi);
  return k >= lo && k < hi && mask_bit(m, qa, k);
}

// Allowed keys of the query at qa among [a, b) (a clipped to its visible range).
AS_HD inline int allowed_in(const RowMask& m, int qa, int a, int b) {
  int lo, hi;
  visible_range(m, qa, &lo, &hi);
  if (a < lo) a = lo;
  if (b > hi) b = hi;
  if (b <= a) return 0;
  if (m.bits == nullptr) return b - a;
  const uint64_t* row = m.bits + static_cast<int64_t>(qa - (m.kv_len - m.q_len)) * m.words;
  int n = 0;
  for (int w = a >> 6; w <= (b - 1) >> 6; ++w) {
    uint64_t x = row[w];
    const int w0 = w * 64;
    if (a > w0) x &= ~0ull << (a - w0);               // drop keys below a
    if (b < w0 + 64) x &= (1ull << (b - w0)) - 1ull;  // and from b on
    n += popcount64(x);
  }
  return n;
}

enum class TileClass : unsigned char { kEmpty = 0, kPartial = 1, kFull = 2 };

// Classifies the block of query positions [qa_begin, qa_end) x keys [k_begin, k_end):
// full = every pair allowed (no mask needed), empty = none allowed (skip), else partial.
AS_HD inline TileClass classify_tile(const RowMask& m, int qa_begin, int qa_end, int k_begin, int k_end) {
  bool all = true, any = false;
  for (int qa = qa_begin; qa < qa_end; ++qa) {
    const int n = allowed_in(m, qa, k_begin, k_end);
    if (n > 0) any = true;
    if (n < k_end - k_begin) all = false;
    if (any && !all) break;  // partial whatever the remaining rows see
  }
  if (all && qa_end > qa_begin && k_end > k_begin) return TileClass::kFull;
  return any ? TileClass::kPartial : TileClass::kEmpty;
}

// ALiBi slope of head h of n (Press et al.; the interpolation for n not a power of two, as in
// the reference implementations).
inline double alibi_slope(int h, int n) { return alibi_slope_of(h, n); }

}  // namespace attnscope
