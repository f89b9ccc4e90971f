#include "attnscope/sparse_gather.h"

#include "attnscope/paging.h"
#include "attnscope/sparse.h"

namespace attnscope {

std::string sparse_gather_refusal(const CaseSpec& c, const PageTable* pages) {
  if (!c.sparse) return "not a /sparse case";
  const int64_t rows = c.total_q();
  if (rows > kMaxRequests)
    return "the gathered form has one request per query row: " + std::to_string(rows) + " rows, more than " +
           std::to_string(kMaxRequests) + " requests";
  if (c.num_kv_heads > 1 && c.kv_cache.layout == KvLayout::kHND)
    return "/kv_cache/layout HND with " + std::to_string(c.num_kv_heads) +
           " KV heads: a slot of the pool is one row only in the NHD layout or with one latent head";
  if (c.attention.score_mod || c.attention.alibi)
    return std::string(c.attention.score_mod ? "/attention/score_mod" : "/attention/alibi") +
           ": a gathered row's keys are numbered by rank, not by position (kv_idx), which the logit reads";
  const int64_t slots = pages ? static_cast<int64_t>(pages->num_pages) * pages->page_size : [&] {
    const PageTable pt = make_page_table(c);
    return static_cast<int64_t>(pt.num_pages) * pt.page_size;
  }();
  if (slots >= (int64_t{1} << 31))
    return "the pool has " + std::to_string(slots) + " slots: a page table of page size 1 holds int32 slot ids";
  for (size_t r = 0; r < c.sparse->indices.size(); ++r)
    for (size_t q = 0; q < c.sparse->indices[r].size(); ++q) {
      const auto& row = c.sparse->indices[r][q];
      if (row.empty() || row.front() < 0)
        return "/sparse/indices/" + std::to_string(r) + "/" + std::to_string(q) +
               " keeps no token: its gathered request would have no keys (the CPU backends run it as a fully masked row)";
    }
  return "";
}

SparseGather gather_sparse(const CaseSpec& c, const Plan& p) {
  if (auto why = sparse_gather_refusal(c, &p.pages); !why.empty()) throw CaseError("/sparse", why);
  if (!p.sparse) throw CaseError("/sparse", "the plan has no selection (a plan of another case?)");
  SparseGather g;
  g.c = c;
  g.c.sparse.reset();
  g.c.kv_cache.page_size = 1;
  g.c.kv_cache.storage = KvStorage::kPaged;
  g.c.kv_cache.max_num_blocks_per_seq.reset();
  g.c.requests.clear();
  PageTable pt;
  pt.page_size = 1;
  pt.num_pages = p.pages.num_pages * p.pages.page_size;
  pt.owner.assign(pt.num_pages, kPageUnused);
  pt.indptr.push_back(0);
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    const SparseSelection& s = (*p.sparse)[r];
    const int* page_row = p.pages.indices.data() + p.pages.indptr[r];
    for (int q = 0; q < s.q_len; ++q) {
      RequestSpec one;
      one.q_len = 1;
      one.kv_len = s.kept(q);
      if (one.kv_len == 0)
        throw CaseError("/sparse", "request " + std::to_string(r) + " row " + std::to_string(q) + " keeps no token");
      one.seed = c.request_seed(r);
      g.c.requests.push_back(one);
      for (int i = 0; i < one.kv_len; ++i) {
        const int64_t slot = sparse_slot(page_row, p.pages.page_size, s.row(q)[i]);
        pt.indices.push_back(static_cast<int>(slot));
        pt.owner[slot] = static_cast<int>(g.c.requests.size()) - 1;
      }
      pt.indptr.push_back(static_cast<int>(pt.indices.size()));
      pt.last_page_len.push_back(1);
    }
  }
  g.kept = static_cast<int64_t>(pt.indices.size());
  g.p = make_plan(g.c);
  g.p.pages = std::move(pt);
  return g;
}

}  // namespace attnscope
