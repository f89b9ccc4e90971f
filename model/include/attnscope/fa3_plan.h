// FlashAttention-3's split decision for a varlen forward on Hopper, as attnscope models it, beside what
// FA3 itself chose at run time (python.fa3 reads it back: docs/python-backends.md, "FlashAttention-3").
// Read from Dao-AILab/flash-attention at 0251105a (hopper/flash_api.cpp get_num_splits, get_pack_gqa and
// mha_fwd's rewrites; hopper/heuristics.h num_splits_heuristic, should_pack_gqa; hopper/tile_size.h
// tile_size_fwd_sm90; hopper/flash_prepare_scheduler.cu prepare_varlen_num_blocks), reproduced in
// attnscope's words, not copied.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/types.h"

namespace attnscope {

// What the varlen call hands FA3: per-request lengths it computes (seqused_q, seqused_k: the rows and
// keys before a request's padding), max_seqlen_q / max_seqlen_k (the longest request, padding included),
// heads, head dims, the element size (2 for bf16, 1 for e4m3), causal, soft-cap, the SMs and the two
// plan arguments.
struct Fa3PlanInputs {
  std::vector<int> q_lens, kv_lens;
  int max_seqlen_q = 0, max_seqlen_k = 0;  // 0: the longest of q_lens / kv_lens
  int num_heads = 0, num_heads_k = 0, head_dim = 0, head_dim_v = 0;
  int element_bytes = 2;
  bool causal = false, softcap = false;
  int num_sms = 132;
  int num_splits_arg = 0;       // 0: FA3's heuristic; >= 1 the count passed
  std::string num_splits_from;  // where num_splits_arg comes from, in words
  int pack_gqa_arg = -1;        // -1: None (FA3 decides), 0 / 1 as passed
};

struct Fa3PlanModel {
  Fa3PlanInputs in;
  int max_seqlen_q = 0, max_seqlen_k = 0;
  int d_rounded = 0, dv_rounded = 0;
  bool is_causal = false;        // after mha_fwd's rewrite: a one-row query (max_seqlen_q 1) is not causal there
  int block_m = 0, block_n = 0;  // tile_size_fwd_sm90
  // get_num_splits: varlen, so FA3 pretends batch 1 (one long sequence) and gets an upper bound
  int num_m_blocks = 0, num_n_blocks = 0;
  int64_t total_mblocks = 0, size_one_kv_head = 0;
  int num_splits = 1;      // the static count (num_splits_arg when >= 1)
  std::string split_rule;  // which branch of num_splits_heuristic decided
  bool pack_gqa = false;
  // prepare_varlen_num_blocks: each request's own split count (at most num_splits)
  std::vector<int> request_m_blocks, request_n_blocks, request_splits;
  int64_t total_blocks = 0;
  int blocks_per_sm = 0;
};

// The inputs python.fa3 passes for the case: num_splits 1 under /split/planner off, the fixed chunk's
// count under planner fixed, else 0 (FA3's heuristic); pack_gqa None; `num_sms` SMs.
Fa3PlanInputs fa3_plan_inputs(const CaseSpec& c, int num_sms);

// The decision for those inputs (Hopper, sm_90; no local attention, no paged KV: this build of FA3
// has neither).
Fa3PlanModel model_fa3_plan(const Fa3PlanInputs& in);

// FA3's own choice as python.fa3 read it back from the call: num_splits from the split partials'
// leading dimension (1 without partials), and get_scheduler_metadata's tensor for the same arguments,
// per request in request order (the scheduler sorts requests; its batch-index vector undoes that).
// (compare_fa3_plan, in library_plan.h, lists the fields where the two differ.)
struct Fa3OwnPlan {
  bool available = false;
  std::string why;     // why not, when not available
  std::string device;  // "NVIDIA H200, 132 SMs"
  int num_sms = 0;
  int num_splits = 1;
  int pack_gqa = -1;  // -1: not observable from the metadata (one query head per KV head)
  std::vector<int> request_m_blocks, request_splits;
  std::vector<int> metadata;  // the scheduler metadata as returned (first 64 values)
  int metadata_size = 0;
};

// The model's decision as lines (its inputs, the rule, the result), and, given FA3's own choice, each
// compared field side by side, a differing one marked "<- differs".
std::string fa3_plan_text(const Fa3PlanModel& m, const Fa3OwnPlan* own);

}  // namespace attnscope
