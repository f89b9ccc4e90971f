// The online-softmax step-through of one query row and head: how the plan twin (the cpu family's
// tiled backend) computes it under the case's plan, with every intermediate kept. Keys are visited in
// the plan's order (KV tiles of kKvTile keys from each chunk's start, the key-split ways of 16-row
// tiles), each chunk ends in a partial (O, LSE), the partials merge in chunk order, and the result
// is set beside the exact softmax (fp64, the reference's arithmetic). The last step's O and LSE are
// the plan twin's bits: the step-through runs its own code (backends/cpu/tiled_row.h).
// All running quantities are in base 2, as the kernels keep them: logits are scaled by log2(e), m
// is the running max of those, d the running sum of exp2(logit - m).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attnscope/plan.h"
#include "attnscope/softmax_steps.h"
#include "attnscope/workload.h"

namespace attnscope {

struct SoftmaxTrace {
  int request = 0, query = 0, head = 0;                        // query: index within the request's queries
  int64_t token = 0;                                           // row of O
  int q_abs = 0, visible_lo = 0, visible_hi = 0, visible = 0;  // position and visible key range (mask)
  int unit = 0;                                                // work unit (request, or vLLM virtual batch)
  int tile_q = 0, chunk_pages = 0, kv_warp_split = 1;
  bool split = false;
  float sm_scale = 0;
  float scale_log2 = 0;  // sm_scale * log2(e) (as float: the plain path's factor, fused into exp2's fma)
  bool alibi = false;
  float soft_cap = 0;      // 0 = none
  bool score_mod = false;  // the case's attention.score_mod (logits: score_mod(q.k x sm_scale) x log2(e))
  std::vector<TileStep> steps;
  std::vector<ChunkPartial> partials;
  std::vector<MergeStep> merges;
  std::vector<float> o;       // final O (dtype values, as float): the plan twin's bits
  float lse = 0;              // final LSE (natural log): the plan twin's bits
  std::vector<double> ref_o;  // exact softmax (fp64)
  double ref_lse = 0;
  double max_abs_diff = 0, lse_diff = 0;
  // a /sparse row (sparse_gather.h): the kept tokens in the order cpu.tiled visits them, its gathered
  // request's keys (the steps' key indices index this); empty otherwise
  std::vector<int> gathered;
  std::vector<int> keys;      // the unit's keys (absolute positions)
  std::vector<float> logits;  // per key: logit in base 2 (-inf masked), the tiled arithmetic
  std::vector<double> probs;  // per key: exact softmax probability (0 masked)
  // the head's attention sink (docs/conventions.md section 12): its logit (natural log, -inf: none)
  // and its exact share of the probability mass, e^sink / e^ref_lse (the keys' probs sum to 1 - it)
  double sink = -INFINITY, sink_prob = 0;
  // the sink in base 2 as the plan twin holds it (sink x log2(e), one float product; -inf: none): the
  // row's starting m in its output or first chunk, with d = 1 in way 0 (its term), O = 0
  float sink2 = -INFINITY;
  // A /sparse row: what docs/dsa.md section 5 checks, for this row and head. The dense output is this
  // head's fp64 softmax over every visible key; flips count the kept tokens of the FP8 indexer's
  // selection that its fp64 twin does not keep (-1: not computed, with given indices or fp64 scoring).
  struct SparseCheck {
    int kept = 0, padding = 0, nans = 0, flips = -1;
    double recall = 1, recall_min = 1, recall_mean = 1;  // this head's, and over the query heads
    int recall_min_head = 0;
    double dense_lse = 0, dense_diff = 0;  // dense LSE; max |exact sparse O - dense O|
    // the case modifies the logits (score_mod, soft-cap, ALiBi): recall and the dense twin use the plain
    // q.k x sm_scale (recall_of_mass's), so LSE_sparse = LSE_dense + ln recall does not hold
    bool plain_logits = false;
    // a GPU library's own top-k on this row's indexer scores (BackendFamily::gpu_top_k; the app's explain
    // fills it): whose, and how many of the kept tokens differ (-1: not run, gpu_top_k_note says why)
    std::string gpu_top_k_name, gpu_top_k_note;
    int gpu_top_k_differs = -1;
    bool gpu_top_k_tie = false;  // a tie at the top_k-th fp32 score: which of the tied tokens is kept may differ
  };
  std::optional<SparseCheck> sparse;
};

// The step-through of query `query` of request `request`, head `head`. Throws std::invalid_argument
// naming the argument when the row does not exist. `sparse_checks`: fill `sparse` for a /sparse row (every
// head's dense softmax and the fp64 indexer: the CLI's explain asks; the Softmax tab has its own job).
SoftmaxTrace explain_row(const CaseSpec& c, const Plan& p, const Workload& w, int request, int query, int head,
                         bool sparse_checks = false);

}  // namespace attnscope
