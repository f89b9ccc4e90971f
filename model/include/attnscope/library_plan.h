// A real library's own plan for the case, made by the library's planner code (FlashInfer's
// PrefillSplitQOKVIndptr, compiled from the pinned headers), kept beside attnscope's model of it
// (SplitPlan) so the two can be compared field by field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/fa3_plan.h"
#include "attnscope/mla_plan.h"
#include "attnscope/split_plan.h"

namespace attnscope {

// What FlashInfer's planner asks the device (SM count, compute capability, opt-in shared memory).
// Without a GPU the answers come from an explicit profile, and `source` says so.
struct DeviceProfile {
  std::string source;        // "device 0: NVIDIA H100 80GB HBM3, 132 SMs, cc 9.0" or
                             // "profile H100 SXM, 132 SMs, no CUDA device here"
  bool from_device = false;  // true: the answers are device 0's own
  int sm_count = 132;        // SMs (the profile takes /split/num_sms)
  int cc_major = 9, cc_minor = 0;
  int max_smem_per_block_optin = 232448;  // bytes (H100: 227 KiB), cudaDevAttrMaxSharedMemoryPerBlockOptin
};

// The H100 SXM profile the planner answers from without a GPU: cc 9.0, 232448 B opt-in shared
// memory, `num_sms` SMs (the case's /split/num_sms). `why` is appended to the source line.
DeviceProfile h100_profile(int num_sms, const std::string& why);

// FlashInfer's FA2 PrefillPlan for the case's units (requests, or vLLM's virtual batches).
struct FlashInferPlan {
  bool compiled = false;   // false: the flashinfer family is not compiled (why says why)
  bool ran = false;        // FlashInfer's planner was called (false: not compiled, or planner flash_attn)
  bool refused = false;    // the planner threw (flashinfer::Error): why holds FlashInfer's message
  bool available = false;  // ran && !refused: the outputs below are FlashInfer's
  std::string why;         // why not available; empty when available
  std::string note;        // what the case asks for that FlashInfer has no argument for (fi_conventions.h split_args)
  std::string pin;         // the pinned FlashInfer whose headers were compiled
  DeviceProfile device;
  // inputs as passed to the planner
  std::vector<int> qo_indptr;  // [units + 1], queries
  std::vector<int> kv_indptr;  // [units + 1], pages (tokens when ragged: page_size 1)
  int page_size = 1;           // tokens per page
  int total_num_rows = 0;      // queries (qo_indptr.back())
  int num_qo_heads = 0, num_kv_heads = 0, head_dim_qk = 0, head_dim_vo = 0;
  int kv_dtype_bytes = 2;
  int window_left = -1;       // W - 1; -1 = no window
  int fixed_split_size = -1;  // pages; -1 = none
  bool disable_split_kv = false;
  bool enable_cuda_graph = false;
  int64_t uniform_q_len = 0;        // 0: ragged query lengths (attnscope never promises uniform ones)
  int max_batch_size_if_split = 0;  // 2 x SMs / kv heads, as PrefillPlanImpl computes it
  // outputs, as FlashInfer returns them
  int cta_tile_q = 0;               // packed query rows per tile
  int64_t kv_chunk_size = 0;        // tokens (FlashInfer multiplies its page count by page_size)
  bool kv_chunk_unbounded = false;  // disable_split_kv: FlashInfer's chunk is INT64_MAX pages, and
                                    // kv_chunk_size is that times page_size (wraps for page_size > 1)
  bool split_kv = false;
  int new_batch_size = 0;                                              // real work items
  int padded_batch_size = 0;                                           // grid x
  std::vector<int> request_indices, qo_tile_indices, kv_tile_indices;  // [new_batch_size] unit, q-tile, kv-chunk
  std::vector<int> merge_indptr;                                       // [total queries + 1]
  std::vector<int> o_indptr;                                           // [units + 1]
  // PrefillPlanWorkspaceSize for the same arguments: FlashInfer's workspaces, bytes
  int64_t float_workspace_bytes = 0;  // split-KV partials (tmp_v, tmp_s)
  int64_t int_workspace_bytes = 0;    // the plan's index arrays
};

// FlashInfer's MLA planner (MLAPlan in scheduler.cuh) for an absorbed MLA case: its inputs and the
// schedule read back from its buffers, beside attnscope's model (mla_plan.h).
struct FlashInferMlaPlan {
  bool compiled = false;   // false: the flashinfer family is not compiled (why says why)
  bool ran = false;        // MLAPlan was called (false: not compiled, not an absorbed MLA case, refused before)
  bool refused = false;    // the planner threw or failed (why says so), or attnscope refused before calling it
  bool available = false;  // ran && !refused: the schedule below is FlashInfer's
  std::string why;         // why not available; empty when available
  std::string pin;
  DeviceProfile device;
  MlaPlanInputs inputs;               // as passed (num_sm: the device's answer); filled for every absorbed MLA case
  int model_num_sms = 132;            // the case's /split/num_sms, which attnscope's model plans for
  MlaSchedule schedule;               // as MLAPlan wrote it
  int64_t int_workspace_bytes = 0;    // staged_int_workspace_bytes: what is copied to the device
  int64_t float_workspace_bytes = 0;  // end of its partial_o / partial_lse regions
};

// FlashAttention-2's split decision as flash_attn_with_kvcache makes it (flash_api.cpp's
// mha_fwd_kvcache, set_params_splitkv and num_splits_heuristic), reproduced by the flash_attn family
// (backends/flash_attn/fa_planner.cpp; flash_api.cpp is PyTorch-bound) and pinned by a CPU test
// against the sdist's own num_splits_heuristic. Beside the model of the same decision
// (split_plan_flash_attn.cpp), compared field by field.
struct FlashAttnPlan {
  bool ran = false;             // the reproduction ran (false: not planned)
  bool asked = false;           // the case plans with /split/planner flash_attn or runs a flash_attn backend:
                                // the report and the CLI show it (other cases' reports keep their form)
  bool refused = false;         // flash_attn_with_kvcache refuses the case: why holds the rule
  bool available = false;       // ran && !refused
  std::string why;              // why not available; empty when available
  std::string pin;              // the flash-attn sdist whose flash_api.cpp is reproduced
  DeviceProfile device;         // the SM count get_num_sm() answers (a profile without a GPU)
  int num_splits_arg = 0;       // flash_attn_with_kvcache's num_splits argument: 0 = its heuristic
  std::string num_splits_from;  // where that argument comes from, in words
  // inputs, after mha_fwd_kvcache's rewrites (seqlenq_ngroups_swapped moves the group into seqlen_q)
  int batch_size = 0, num_heads = 0, num_heads_k = 0, head_size = 0, seqlen_q = 0;
  int64_t seqlen_k = 0;  // max_num_blocks_per_seq x page_block_size (paged) or the cache's seqlen dim
  bool ngroups_swapped = false;
  bool paged = false;
  int page_block_size = 1, max_num_blocks_per_seq = 0;
  // set_params_splitkv's derived inputs
  int block_n = 0, num_n_blocks = 0, num_m_blocks = 0, num_sms_x2 = 0;
  int64_t batch_nheads_mblocks = 0;
  // outputs
  int num_splits = 1;
  int64_t chunk_tokens = 0;   // keys per split: ceil(num_n_blocks / num_splits) x block_n
  bool split_kernel = false;  // the split-KV kernel runs (num_splits > 1, or a paged cache: forced)
  int64_t accum_bytes = 0;    // out_accum + softmax_lse_accum, fp32, when num_splits > 1
  // attnscope's model of the same decision (make_split_plan with /split/planner flash_attn, whatever
  // the case's planner), kept here so every view compares the same two
  SplitPlan model;
};

// FlashAttention-3's split decision as attnscope models it (fa3_plan.h), for a case that runs the
// FA3 adapter: FA3's own choice exists only once the call ran, so the run's Result carries the two
// side by side (Result::library_plan) and the plan shows the model alone.
struct Fa3LibraryPlan {
  bool asked = false;  // the case runs a backend whose family planned it
  std::string source;  // who answers for the library at run time, in words
  Fa3PlanModel model;
};

// Filled by the backends floor (plan_case asks each family with a planner of its own); make_plan
// alone leaves them unplanned, with that as the reason.
struct LibraryPlans {
  FlashInferPlan flashinfer;         // for the flashinfer / fixed / off planner models; why says when not run
  FlashInferMlaPlan flashinfer_mla;  // absorbed MLA cases: FlashInfer's MLAPlan
  FlashAttnPlan flash_attn;          // FlashAttention-2's num_splits for the case (flash_attn family)
  Fa3LibraryPlan fa3;                // FlashAttention-3's, modelled (python family's FA3 adapter)
  LibraryPlans() {
    flashinfer.why = "not planned: the library planners run in plan_case (backends floor)";
    flashinfer_mla.why = flashinfer.why;
    flash_attn.why = flashinfer.why;
  }
};

// One field where attnscope's model and FlashInfer's own planner differ.
struct PlanFieldDiff {
  std::string field;    // "cta_tile_q", "kv_chunk_size", "split_kv", "new_batch_size", "padded_batch_size",
                        // "work_items", "merge_indptr", "o_indptr", "refusal"
  std::string model;    // the model's value, in words
  std::string library;  // FlashInfer's value, in words
};

// The fields of `model` that differ from FlashInfer's plan (empty: agrees on every field). Only
// meaningful when lib.available or lib.refused.
std::vector<PlanFieldDiff> compare_flashinfer_plan(const SplitPlan& model, const FlashInferPlan& lib);

// "FlashInfer's own planner (profile H100 SXM, 132 SMs, no CUDA device here): agrees with the model
// on every field", or the differing fields, or why there is no FlashInfer plan.
std::string flashinfer_agreement_line(const SplitPlan& model, const FlashInferPlan& lib);

// attnscope's model of the same plan: model_mla_plan on lib.inputs with num_sm = lib.model_num_sms
// (refusal set when there are no inputs: not an absorbed MLA case).
MlaPlanModel flashinfer_mla_model(const FlashInferMlaPlan& lib);

// The MLA plan's fields where the model and FlashInfer's MLAPlan differ: "refusal", "num_blks_x",
// "num_blks_y", "work_indptr", "works" (q_indptr, kv_indptr, partial_indptr, q_len, kv_len, q_start,
// kv_start, kv_end of every item), "merge" (the five merge arrays). Empty: every field agrees.
std::vector<PlanFieldDiff> compare_flashinfer_mla_plan(const MlaPlanModel& model, const FlashInferMlaPlan& lib);

// "FlashInfer's MLA planner (profile H100 SXM, 132 SMs, ...): agrees with the model on every field
// (N work items on C clusters of X CTAs, kv_len_limit L, M merge CTAs)", the differing fields, or why not run.
std::string flashinfer_mla_agreement_line(const MlaPlanModel& model, const FlashInferMlaPlan& lib);

// The fields where attnscope's flash_attn model (lib.model) and FlashAttention-2's own decision
// differ: "refusal", "seqlen_k", "num_splits", "chunk_tokens", "split_kv". Empty: every field
// agrees (or lib did not run).
std::vector<PlanFieldDiff> compare_flash_attn_plan(const FlashAttnPlan& lib);

// "FlashAttention-2's own num_splits (profile H100 SXM, 132 SMs, ...): agrees with the model on every
// field (num_splits N, ...)", the differing fields, or why not run.
std::string flash_attn_agreement_line(const FlashAttnPlan& lib);

// The fields where the FA3 model and FA3's own choice differ: "num_splits", "pack_gqa",
// "request_m_blocks", "request_splits". Empty when they agree or FA3's is not available.
std::vector<PlanFieldDiff> compare_fa3_plan(const Fa3PlanModel& m, const Fa3OwnPlan& own);

}  // namespace attnscope
