// attnscope's model of FlashInfer's MLA planner (MLAPlan, the scheduler of its MLA decode kernels
// mla.cuh / mla_hopper.cuh), written from the algorithm as docs/conventions.md section 14 describes
// it. The library's own plan (library_plan.h FlashInferMlaPlan) is compared with it field by field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/split_plan.h"

namespace attnscope {

// What the MLA planner is given: one entry per unit (request), as FlashInfer's MLA wrapper passes it.
struct MlaPlanInputs {
  std::vector<int> qo_indptr;  // [batch + 1], query tokens
  std::vector<int> kv_indptr;  // [batch + 1], pages
  std::vector<int> kv_len;     // [batch], keys (tokens)
  int num_heads = 0;           // query heads (all on the one latent KV head)
  int head_dim_o = 512;        // kv_lora_rank (only the float workspace's size depends on it)
  bool causal = true;
  int num_sm = 132;  // SMs the plan is made for
};

// One work item: a cluster's pass over the keys [kv_start, kv_end) of one query tile of one request.
struct MlaWork {
  int q_indptr = 0;        // the request's first query token
  int kv_indptr = 0;       // the request's first page
  int partial_indptr = 0;  // first row of its partial output (split tiles), else -1
  int q_len = 0, kv_len = 0;
  int q_start = 0;  // the tile's first packed row (query * heads + head) within the request
  int kv_start = 0, kv_end = 0;
  bool operator==(const MlaWork&) const = default;
};

// The schedule the kernels read: the grid, each cluster's work list and the merge CTAs' ranges.
struct MlaSchedule {
  int64_t num_blks_x = 0;        // CTAs per cluster (1 or 2)
  int64_t num_blks_y = 0;        // clusters
  std::vector<int> work_indptr;  // [clusters + 1] into works
  std::vector<MlaWork> works;    // every cluster's items, cluster after cluster
  // [num_sm] each: merge CTA i combines packed rows [packed_start, packed_end) from partial rows
  // partial_start + k * stride (k = 0.. while < partial_end); unused entries 0
  std::vector<int> merge_packed_start, merge_packed_end, merge_partial_start, merge_partial_end, merge_partial_stride;
};

struct MlaPlanModel {
  std::string refusal;  // non-empty: no plan (the schedule is empty)
  MlaPlanInputs inputs;
  int cluster_size = 1;     // CTAs working on one 64 x cluster_size row tile
  int cluster_tile_q = 64;  // packed rows per tile
  int64_t total_kv = 0;     // keys over every tile (causal: each tile's own bound)
  int kv_len_limit = 0;     // the most keys one work item takes
  int merge_ctas = 0;       // used entries of the merge arrays
  int partial_rows = 0;     // rows of partial output the split tiles write
  MlaSchedule schedule;
};

// The planner's inputs for the case's units; num_sm from the caller (the model: /split/num_sms).
MlaPlanInputs mla_plan_inputs(const CaseSpec& c, const std::vector<WorkUnit>& units, int num_sm);

// FlashInfer holds at most this many work items in its buffers and does not check the count;
// attnscope refuses a batch whose bound (tiles + clusters) exceeds it, before planning.
constexpr int kMlaMaxWorks = 16384;
// The bound on the number of work items (query tiles plus one per cluster), 0 for an empty batch.
int64_t mla_work_bound(const MlaPlanInputs& in);

// The model's plan; refusal set for an empty batch, no SMs, or mla_work_bound > kMlaMaxWorks.
MlaPlanModel model_mla_plan(const MlaPlanInputs& in);

}  // namespace attnscope
