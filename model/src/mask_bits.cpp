// make_mask_bits: a mask_mod evaluated for every pair of a request, rows spread over threads (an
// 8192 x 8192 request is 67M evaluations).
#include "attnscope/mask_bits.h"

#include <algorithm>
#include <string>
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

namespace {

constexpr int64_t kSat = int64_t{1} << 61;

struct MaskCost {
  int64_t pairs = 0, ops = 0, bytes = 0;
};

// Every request is counted whole (q_len x kv_len), the pairs a built-in mask hides too: the figure
// stays predictable from the case alone. Bytes are the bits and the per-row bounds.
MaskCost mask_cost(const CaseSpec& c, size_t first, size_t last, int64_t n_ops) {
  MaskCost m;
  n_ops = std::max<int64_t>(1, n_ops);
  for (size_t r = first; r < last; ++r) {
    const RequestSpec& rq = c.requests[r];
    const int64_t q = std::max(0, rq.q_len), kv = std::max(0, rq.kv_len);
    // saturated: lengths may not be validated yet, and no sum of these can overflow
    m.pairs = std::min(m.pairs + std::min(q * kv, kSat), kSat);
    m.bytes = std::min(m.bytes + std::min(q * ((kv + 63) / 64 * 8 + 2 * static_cast<int64_t>(sizeof(int))), kSat), kSat);
  }
  m.ops = m.pairs > kMaxMaskOps / n_ops ? kMaxMaskOps + 1 : m.pairs * n_ops;
  return m;
}

void check_cost(const MaskCost& m, const Expr& mask_mod) {
  auto refuse = [](const std::string& what) { throw CaseError("/attention/mask_mod", what); };
  if (m.pairs > kMaxMaskPairs)
    refuse("would be evaluated on " + std::to_string(m.pairs) +
           " (query, key) pairs (the sum of q_len x kv_len), more than the " + std::to_string(kMaxMaskPairs) +
           " a case may have with a mask_mod");
  if (m.bytes > kMaxMaskBytes)
    refuse("needs " + std::to_string(m.bytes) + " bytes of mask bits, more than the " + std::to_string(kMaxMaskBytes) +
           " a case may have with a mask_mod");
  if (m.ops > kMaxMaskOps)
    refuse("would take " + std::to_string(m.pairs) + " pairs x " + std::to_string(mask_mod.ops().size()) +
           " operations, more than the " + std::to_string(kMaxMaskOps) +
           " a case may have: shorten the expression or the requests");
}

}  // namespace

void check_mask_budget(const CaseSpec& c, const Expr& mask_mod) {
  check_cost(mask_cost(c, 0, c.requests.size(), static_cast<int64_t>(mask_mod.ops().size())), mask_mod);
}

void check_tree_budget(const CaseSpec& c) {
  size_t first = 0;
  while (first < c.requests.size() && c.requests[first].tree_parents.empty()) ++first;
  if (first == c.requests.size()) return;
  const MaskCost m = mask_cost(c, 0, c.requests.size(), 1);
  if (m.bytes > kMaxMaskBytes)
    throw CaseError("/requests/" + std::to_string(first) + "/tree_parents",
                    "a tree makes mask bits for every request: " + std::to_string(m.bytes) +
                        " bytes (q_len x kv_len bits each), " + "more than the " + std::to_string(kMaxMaskBytes) +
                        " a case may have");
}

std::vector<uint64_t> tree_ancestors(const std::vector<int>& parents, int* words) {
  const int n = static_cast<int>(parents.size());
  *words = (n + 63) / 64;
  std::vector<uint64_t> anc(static_cast<size_t>(n) * *words, 0);
  for (int i = 0; i < n; ++i) {  // parents come first (validate_case), so their rows are complete
    uint64_t* row = anc.data() + static_cast<size_t>(i) * *words;
    if (parents[i] >= 0) {
      const uint64_t* up = anc.data() + static_cast<size_t>(parents[i]) * *words;
      for (int w = 0; w < *words; ++w) row[w] = up[w];
    }
    row[i >> 6] |= 1ull << (i & 63);
  }
  return anc;
}

MaskBits make_mask_bits(const CaseSpec& c, int r, const RowMask& builtin, const Expr* mask_mod) {
  // before allocating, also for callers that skipped validate_case
  if (mask_mod) check_cost(mask_cost(c, r, r + 1, static_cast<int64_t>(mask_mod->ops().size())), *mask_mod);
  const RequestSpec& rq = c.requests[r];
  if (!rq.tree_parents.empty()) check_tree_budget(c);
  MaskBits mb;
  mb.words = (rq.kv_len + 63) / 64;
  mb.bits.assign(static_cast<size_t>(rq.q_len) * mb.words, 0);
  mb.bounds.assign(2 * static_cast<size_t>(rq.q_len), 0);
  const ExprOp* ops = mask_mod ? mask_mod->ops().data() : nullptr;
  const int n_ops = mask_mod ? static_cast<int>(mask_mod->ops().size()) : 0;
  int tw = 0;
  const std::vector<uint64_t> anc = tree_ancestors(rq.tree_parents, &tw);
  const int prefix = rq.kv_len - rq.q_len;  // keys from here on are the new tokens
  auto rows = [&](int q_begin, int q_end) {
    ExprEnv e = expr_env(c, r, 0, 0, 0);
    for (int q = q_begin; q < q_end; ++q) {
      const int qa = q_abs_of(builtin, q);
      int lo, hi;
      visible_range(builtin, qa, &lo, &hi);
      e.v[kVarQ] = qa;
      uint64_t* row = mb.bits.data() + static_cast<size_t>(q) * mb.words;
      const uint64_t* tree = anc.empty() ? nullptr : anc.data() + static_cast<size_t>(q) * tw;
      int first = hi, last = lo;
      for (int k = lo; k < hi; ++k) {
        if (tree && k >= prefix && !((tree[(k - prefix) >> 6] >> ((k - prefix) & 63)) & 1u)) continue;
        e.v[kVarKv] = k;
        if (ops && !expr_true(eval_expr(ops, n_ops, e))) continue;
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
