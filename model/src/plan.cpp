// make_plan: the whole plan of a case, from pure functions.
#include "attnscope/plan.h"

#include <chrono>

#include "attnscope/sparse.h"

namespace attnscope {

RowMask row_mask(const CaseSpec& c, int r) {
  const auto& q = c.requests[r];
  RowMask m;
  m.q_len = q.q_len;
  m.kv_len = q.kv_len;
  m.causal = c.attention.causal ? 1 : 0;
  m.window = c.attention.window.value_or(0);
  m.chunk = c.attention.local_chunk.value_or(0);
  m.prefix_len = (c.attention.prefix_lm && q.prefix_len) ? *q.prefix_len : 0;
  m.pad_start = q.pad_start.value_or(-1);
  if (!q.doc_starts.empty()) {
    m.doc_starts = q.doc_starts.data();
    m.num_docs = static_cast<int>(q.doc_starts.size());
  }
  return m;
}

std::vector<int64_t> unit_first_tokens(const CaseSpec& c, const Plan& p) {
  std::vector<int64_t> req_tok(c.requests.size() + 1, 0);
  for (size_t r = 0; r < c.requests.size(); ++r) req_tok[r + 1] = req_tok[r] + c.requests[r].q_len;
  std::vector<int64_t> out(p.units.size());
  for (size_t u = 0; u < p.units.size(); ++u) out[u] = req_tok[p.units[u].request] + p.units[u].q_begin;
  return out;
}

int64_t allowed_pairs(const CaseSpec& c, const Plan& p) {
  int64_t n = 0;
  for (size_t r = 0; r < c.requests.size(); ++r)
    for (int q = 0; q < c.requests[r].q_len; ++q) n += allowed_in(p.masks[r], q_abs_of(p.masks[r], q), 0, c.requests[r].kv_len);
  return n;
}

Plan make_plan(const CaseSpec& c) {
  const auto t0 = std::chrono::steady_clock::now();
  validate_case(c);
  Plan p;
  p.pages = make_page_table(c);
  p.local = make_virtual_batches(c, p.pages);
  auto docs = std::make_shared<std::vector<std::vector<int>>>();
  for (const auto& r : c.requests) docs->push_back(r.doc_starts);
  p.doc_store = docs;
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    RowMask m = row_mask(c, r);
    if (m.doc_starts) m.doc_starts = (*docs)[r].data();
    p.masks.push_back(m);
  }
  // a mask_mod or a tree becomes every request's bits (one verdict per pair for every consumer)
  if (c.attention.mask_mod) p.mask_mod = std::make_shared<const Expr>(Expr::parse(*c.attention.mask_mod, Expr::Kind::kMask));
  if (p.mask_mod || c.has_trees() || c.sparse) {
    auto store = std::make_shared<std::vector<MaskBits>>();
    auto sel = std::make_shared<std::vector<SparseSelection>>();
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      if (c.sparse) {  // DSA's selection ANDed with the causal mask (/sparse refuses a mask_mod and trees)
        sel->push_back(sparse_selection(c, r));
        store->push_back(sparse_mask_bits(sel->back(), p.masks[r]));
      } else {
        store->push_back(make_mask_bits(c, r, p.masks[r], p.mask_mod.get()));
      }
    }
    if (c.sparse) p.sparse = sel;
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      p.masks[r].bits = (*store)[r].bits.data();
      p.masks[r].bounds = (*store)[r].bounds.data();
      p.masks[r].words = (*store)[r].words;
    }
    p.mask_store = store;
  }
  if (c.attention.score_mod) p.score_mod = std::make_shared<const Expr>(Expr::parse(*c.attention.score_mod, Expr::Kind::kScore));
  if (c.attention.local_chunk) {
    for (const auto& b : p.local.batches) p.units.push_back({b.request, b.q_begin, b.q_len, b.kv_begin, b.kv_len});
  } else {
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
      p.units.push_back({r, 0, c.requests[r].q_len, 0, c.requests[r].kv_len});
  }
  p.split = make_split_plan(c, p.units, p.masks);
  p.blocks = make_block_map(p.units, p.masks, c.group_size(), p.split.cta_tile_q);
  if (p.mask_store) list_item_tiles(&p.split, p.units, p.masks, c.group_size());
  p.plan_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

}  // namespace attnscope
