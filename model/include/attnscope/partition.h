// Partitions made across kernels (issue 44, docs/conventions.md section 18): context parallelism
// (each request's keys sharded over ranks) and cascade (a prefix of keys shared by every request,
// attended in a level of its own). Each partition is a case of its own (a sub-case) that any backend
// runs; its partial (O, LSE) rows are merged by their log-sum-exp. The layout, the sub-cases and the
// merge are here, written once for the host and the device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/result.h"
#include "attnscope/softmax_state.h"
#include "attnscope/types.h"

namespace attnscope {

// Rank r owns key position p iff floor(p / interleave) mod ranks == r (interleave 1: SGLang's
// --dcp-size layout; interleave i: vLLM's cp_kv_cache_interleave_size).
AS_HD inline int owner_rank(int64_t p, int ranks, int interleave) { return static_cast<int>((p / interleave) % ranks); }
// Position of rank r's j-th key (its keys in ascending order).
AS_HD inline int64_t shard_position(int64_t j, int ranks, int rank, int interleave) {
  return KeySource{0, ranks, rank, interleave, 0}.position(j);
}
// How many of the positions [0, len) rank r owns.
AS_HD inline int64_t shard_size(int64_t len, int ranks, int rank, int interleave) {
  const int64_t cycle = static_cast<int64_t>(ranks) * interleave;
  const int64_t full = len / cycle, rem = len - full * cycle - static_cast<int64_t>(rank) * interleave;
  return full * interleave + (rem <= 0 ? 0 : rem < interleave ? rem : interleave);
}

// The partitions of a case, in merge order: context ranks 0..c-1, or cascade levels 0 (the shared
// prefix) and 1 (each request's own keys).
struct Partition {
  std::string label;          // "rank 1", "level 0: shared prefix"
  CaseSpec sub;               // the case this partition runs (requests with no keys here dropped)
  std::vector<int> requests;  // [sub.requests] the request of the case each sub-case request is
  std::vector<int64_t> keys;  // [case requests] keys of each request in this partition
  int rank = 0;               // context: the rank; cascade: the level
};
bool is_partitioned(const CaseSpec& c);
// Empty when the case has no /parallel. Throws CaseError for a case the partitions cannot express.
std::vector<Partition> make_partitions(const CaseSpec& c);
// The rule a partitioned case breaks ("" = none): the masks and features a partition cannot carry.
// Returns the JSON path first, then ": ", then the rule (validate_case throws it as a CaseError).
std::string partition_rule(const CaseSpec& c);

// Which key partition of the case key position p of request r is in (for the views).
int partition_of_key(const CaseSpec& c, int r, int64_t p);

// One (token, head) row's merge: the partials' LSE as the merge reads them, in base 2 (the form
// FlashInfer's merge_state keeps). `native` is the base the backend returns (its descriptor), `read`
// the base the merge assumes; the partial's LSE `x` is given in natural log (Result::lse).
// Both bases agree: x * log2(e). Base-2 partials read as natural log: x * log2(e)^2 (sglang #40903);
// natural-log partials read as base 2: x.
AS_HD inline float merge_input_lse2(float x, LseBase native, LseBase read) {
  if (x == -INFINITY) return -INFINITY;
  const float l2e = static_cast<float>(kLog2e);
  const float as_native = native == LseBase::k2 ? x * l2e : x;
  return read == LseBase::kE ? as_native * l2e : as_native;
}
// One element of a fold: the only arithmetic a merge applies to O (explicit fma: nvcc's contraction
// cannot make it another operation on the device).
AS_HD inline float merge_fold_element(float wa, float o, float wb, float o_b) { return fmaf(wa, o, wb * o_b); }
// Folds partial b (lse2_b, o_b) into the running state (lse2, o[0..dv)): merge_weights' weights (its
// portable exp2 / log2), then merge_fold_element per element; the same bits on host and device.
AS_HD inline void merge_fold(float* lse2, float* o, float lse2_b, const float* o_b, int dv) {
  float wa, wb, l;
  merge_weights<true>(*lse2, lse2_b, &wa, &wb, &l);
  for (int d = 0; d < dv; ++d) o[d] = merge_fold_element(wa, o[d], wb, o_b[d]);
  *lse2 = l;
}

// Partials of one partitioned run, rows of the whole case: o [total_q, heads, dv] (case dtype
// values), lse [total_q, heads] natural log (-inf where the partition holds no key of the row).
struct PartialRows {
  const float* o = nullptr;
  const float* lse = nullptr;
};
// attnscope's merge: partials folded in order 0, 1, ... per row with merge_fold, O rounded to the
// dtype once at the end, LSE back to natural log (read-base units: what the merge computed).
void merge_partials(const std::vector<PartialRows>& parts, int64_t rows, int dv, DType dt, LseBase native, LseBase read,
                    std::vector<float>* o, std::vector<float>* lse);

const char* lse_base_name(LseBase b);  // "e", "2"

// What a comparison of a merged result says about its merge: "" when the merge read each partial in the
// backend's own base, else e.g. "merged reading flashinfer.decode's base-2 LSE as natural log
// (/parallel/merge_base "e"; its descriptor says 2)". compare_results appends it to the verdict.
std::string merge_base_note(const Result& r);

}  // namespace attnscope
