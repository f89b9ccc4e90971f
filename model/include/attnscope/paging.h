// Paged KV cache metadata in FlashInfer's CSR form, produced from the case's allocation policy.
#pragma once

#include <cstdint>
#include <vector>

#include "attnscope/case_spec.h"

namespace attnscope {

constexpr int kPageNull = -2;    // owner of the reserved null page (physical page 0)
constexpr int kPageUnused = -1;  // owner of a page no request references

struct PageTable {
  int page_size = 1;               // tokens per page
  int num_pages = 0;               // physical pages in the pool (null and unused pages included)
  std::vector<int> indptr;         // [num_requests + 1], prefix sum of pages per request
  std::vector<int> indices;        // [indptr.back()], physical page ids, in key order per request
  std::vector<int> last_page_len;  // [num_requests], tokens in each request's last page, in [1, page_size]
                                   // (0 for a request with no keys)
  std::vector<int> owner;          // [num_pages], request id, kPageNull or kPageUnused

  int pages_of(int r) const { return indptr[r + 1] - indptr[r]; }
  // Physical page and slot of key k of request r.
  int page_of(int r, int k) const { return indices[indptr[r] + k / page_size]; }
};

// contiguous: pages in request order after the null page; shuffled: the same pool in a seeded
// random order; fragmented: a pool twice as large with the used pages scattered (seeded), so
// unused pages sit between used ones. Ragged storage: page_size 1, contiguous, no null page.
PageTable make_page_table(const CaseSpec& c);

}  // namespace attnscope
