// The mask, written once. Every mask attnscope supports makes each query row see one contiguous
// interval of keys [lo, hi) (causal, sliding window, chunked local, prefix-LM, documents, padding
// and their allowed combinations), so `allowed` is defined through `visible_range`. The CPU
// backends, the CUDA kernels, the block map and the GUI's mask view all call these functions.
#pragma once

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
};

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
  if (lo < 0) lo = 0;
  if (hi < lo) hi = lo;
  *lo_out = lo;
  *hi_out = hi;
}

AS_HD inline bool allowed(const RowMask& m, int qa, int k) {
  int lo, hi;
  visible_range(m, qa, &lo, &hi);
  return k >= lo && k < hi;
}

enum class TileClass : unsigned char { kEmpty = 0, kPartial = 1, kFull = 2 };

// Classifies the block of query positions [qa_begin, qa_end) x keys [k_begin, k_end):
// full = every pair allowed (no mask needed), empty = none allowed (skip), else partial.
AS_HD inline TileClass classify_tile(const RowMask& m, int qa_begin, int qa_end, int k_begin, int k_end) {
  bool all = true, any = false;
  for (int qa = qa_begin; qa < qa_end; ++qa) {
    int lo, hi;
    visible_range(m, qa, &lo, &hi);
    const int a = lo > k_begin ? lo : k_begin;
    const int b = hi < k_end ? hi : k_end;
    if (b > a) any = true;
    if (!(lo <= k_begin && hi >= k_end)) all = false;
  }
  if (all && qa_end > qa_begin && k_end > k_begin) return TileClass::kFull;
  return any ? TileClass::kPartial : TileClass::kEmpty;
}

// ALiBi slope of head h of n (Press et al.; the interpolation for n not a power of two, as in
// the reference implementations).
inline double alibi_slope(int h, int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  auto base = [](int count, int i) { return std::pow(2.0, -8.0 * (i + 1) / count); };
  if (h < p) return base(p, h);
  return base(2 * p, 2 * (h - p));  // odd-indexed slopes of the doubled set
}

}  // namespace attnscope
