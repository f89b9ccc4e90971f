// The plan is a value: everything about how attention is computed for a batch, from pure host
// functions. Kernels, the CPU plan twin, the GUI and the repro export all use this one struct.
#pragma once

#include <memory>
#include <vector>

#include "attnscope/block_map.h"
#include "attnscope/case_spec.h"
#include "attnscope/library_plan.h"
#include "attnscope/local_batches.h"
#include "attnscope/mask.h"
#include "attnscope/mask_bits.h"
#include "attnscope/mask_expr.h"
#include "attnscope/paging.h"
#include "attnscope/sparse.h"
#include "attnscope/split_plan.h"

namespace attnscope {

struct Plan {
  PageTable pages;
  VirtualBatches local;                                            // empty unless attention.local_chunk is set
  std::vector<WorkUnit> units;                                     // requests, or the virtual batches
  std::vector<RowMask> masks;                                      // [num_requests]; doc_starts point into doc_store
  std::shared_ptr<const std::vector<std::vector<int>>> doc_store;  // [num_requests] document starts,
                                                                   // shared so that a copied Plan's masks stay valid
  // attention.mask_mod / score_mod compiled (nullptr when absent); the mask's bits per request (with
  // a mask_mod or any request's tree_parents), which masks[r].bits / bounds point into (shared for the
  // same reason as doc_store)
  std::shared_ptr<const Expr> mask_mod, score_mod;
  std::shared_ptr<const std::vector<MaskBits>> mask_store;
  // /sparse: each request's selection (sparse.h), which mask_store holds as bits; nullptr without /sparse
  std::shared_ptr<const std::vector<SparseSelection>> sparse;
  SplitPlan split;
  LibraryPlans library;  // the libraries' own plans for the same units (FlashInfer's PrefillPlan), beside `split`
  BlockMap blocks;
  double plan_us = 0;  // host time to build this plan
};

// Pure: the same CaseSpec gives the same Plan. Throws CaseError if the case is invalid.
Plan make_plan(const CaseSpec& c);

// [units] output token of each unit's first query (units are in token order).
std::vector<int64_t> unit_first_tokens(const CaseSpec& c, const Plan& p);

// Allowed (query, key) pairs of one head summed over the batch (FLOP counts use it).
int64_t allowed_pairs(const CaseSpec& c, const Plan& p);

// Mask parameters of request r (doc_starts point into c).
RowMask row_mask(const CaseSpec& c, int r);

}  // namespace attnscope
