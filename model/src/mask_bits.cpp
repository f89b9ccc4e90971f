// make_mask_bits: a mask_mod evaluated for every pair of a request, rows spread over threads (an
// 8192 x 8192 request is 67M evaluations).
#include "attnscope/mask_bits.h"

#include <algorithm>
#include <thread>

namespace attnscope {

ExprEnv expr_env(const CaseSpec& c, int r, int h, int qa, int k, double score) {
  const RequestSpec& rq = c.requests[r];
  ExprEnv e;
  e.v[kVarB] = r;
  e.v[kVarH] = h;
  e.v[kVarQ] = qa;
  e.v[kVarKv] = k;
  e.v[kVarQLen] = rq.q_len;
  e.v[kVarKvLen] = rq.kv_len;
  e.v[kVarPrefix] = rq.prefix_len.value_or(0);
  e.v[kVarScore] = score;
  if (!rq.doc_starts.empty()) {
    e.doc_starts = rq.doc_starts.data();
    e.num_docs = static_cast<int>(rq.doc_starts.size());
  }
  e.num_heads = c.num_qo_heads;
  return e;
}

MaskBits make_mask_bits(const CaseSpec& c, int r, const RowMask& builtin, const Expr& mask_mod) {
  const RequestSpec& rq = c.requests[r];
  MaskBits mb;
  mb.words = (rq.kv_len + 63) / 64;
  mb.bits.assign(static_cast<size_t>(rq.q_len) * mb.words, 0);
  mb.bounds.assign(2 * static_cast<size_t>(rq.q_len), 0);
  const ExprOp* ops = mask_mod.ops().data();
  const int n_ops = static_cast<int>(mask_mod.ops().size());
  auto rows = [&](int q_begin, int q_end) {
    ExprEnv e = expr_env(c, r, 0, 0, 0);
    for (int q = q_begin; q < q_end; ++q) {
      const int qa = q_abs_of(builtin, q);
      int lo, hi;
      visible_range(builtin, qa, &lo, &hi);
      e.v[kVarQ] = qa;
      uint64_t* row = mb.bits.data() + static_cast<size_t>(q) * mb.words;
      int first = hi, last = lo;
      for (int k = lo; k < hi; ++k) {
        e.v[kVarKv] = k;
        if (!expr_true(eval_expr(ops, n_ops, e))) continue;
        row[k >> 6] |= 1ull << (k & 63);
        first = std::min(first, k);
        last = k + 1;
      }
      mb.bounds[2 * q] = first < last ? first : 0;
      mb.bounds[2 * q + 1] = first < last ? last : 0;
    }
  };
  const int64_t pairs = static_cast<int64_t>(rq.q_len) * rq.kv_len;
  const int threads = pairs < (1 << 20) ? 1 : std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  if (threads == 1) {
    rows(0, rq.q_len);
  } else {
    std::vector<std::thread> pool;
    const int per = (rq.q_len + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
      const int a = t * per, b = std::min(rq.q_len, a + per);
      if (a < b) pool.emplace_back(rows, a, b);
    }
    for (auto& th : pool) th.join();
  }
  return mb;
}

}  // namespace attnscope
