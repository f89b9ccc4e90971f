// A /sparse case in the form the engines run sparse MLA decode (docs/dsa.md section 4): every query row
// becomes a request of one query whose keys are its kept tokens in rank order, read through a page
// table of page size 1 whose entries are the tokens' physical slots in the case's own pool
// (slot = page * page_size + offset). The pool's memory is unchanged: with one latent KV head (or NHD)
// a pool of pages of P tokens is a pool of pages of one token. Kernels that take a paged cache then
// attend exactly the kept tokens, at sparse cost, and the output rows keep their token order.
#pragma once

#include <string>

#include "attnscope/case_spec.h"
#include "attnscope/paging.h"
#include "attnscope/plan.h"

namespace attnscope {

struct SparseGather {
  CaseSpec c;        // one request per query row (q_len 1, kv_len = its kept tokens), page size 1, no /sparse
  Plan p;            // make_plan(c), its page table replaced by the slot table
  int64_t kept = 0;  // kept tokens over every row (page-table entries)
};

// "" when the case has a gathered form, else why not (from the case alone): more query rows than
// requests a case may have, a given row that keeps no token (an empty page-table row is no request),
// several KV heads in the HND layout (a slot is not one row of the pool), a pool of 2^31 slots or more,
// a score_mod or ALiBi (they read key positions, which the gathered rows renumber).
// `pages`: the case's page table when at hand (the plan's), else it is made to count the pool's slots.
std::string sparse_gather_refusal(const CaseSpec& c, const PageTable* pages = nullptr);

// The gathered form of a /sparse case and its plan (p.sparse holds the selection). Throws CaseError
// with sparse_gather_refusal's text when there is none.
SparseGather gather_sparse(const CaseSpec& c, const Plan& p);

}  // namespace attnscope
