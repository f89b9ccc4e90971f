// The online-softmax step-through of one query row and head: how cpu.tiled (the CPU twin of
// cuda.flash) computes it under the case's plan, with every intermediate kept. Keys are visited in
// the plan's order (KV tiles of kKvTile keys from each chunk's start, the key-split ways of 16-row
// tiles), each chunk ends in a partial (O, LSE), the partials merge in chunk order, and the result
// is set beside the exact softmax (fp64, cpu.reference's arithmetic). The last step's O and LSE are
// cpu.tiled's bits: the step-through runs cpu.tiled's own code (kernels/cpu/tiled_row.h).
// All running quantities are in base 2, as the kernels keep them: logits are scaled by log2(e), m
// is the running max of those, d the running sum of exp2(logit - m).
#pragma once

#include <string>
#include <vector>

#include "attnscope/plan.h"
#include "attnscope/workload.h"

namespace attnscope {

constexpr int kTraceHeadValues = 4;  // leading values of O kept per step

struct TileStep {
  int chunk = 0;                 // the work item's KV chunk
  int way = 0;                   // key-split way (the plan's kv_warp_split; 0 when 1)
  int kv_begin = 0, kv_end = 0;  // the way's keys of this tile
  int visible = 0;               // of them, keys the row sees
  float tile_max = -INFINITY;    // max logit of the tile (base 2), -inf when none is visible
  float m_old = -INFINITY;       // running max before the tile
  float m_new = -INFINITY;       // after
  float rescale = 1.f;           // exp2(m_old - m_new): applied to d and O (0 when m_old was -inf)
  float den = 0.f;               // running denominator d after the tile
  double o_norm = 0;             // Euclidean norm of the running (unnormalised) O after the tile
  std::vector<float> o_head;     // its first kTraceHeadValues values
  bool skipped = false;          // nothing visible yet: the state is left as it is
};

struct ChunkPartial {
  int chunk = 0, item = 0;                     // KV chunk and work item index
  int kv_begin = 0, kv_end = 0;                // the chunk's keys
  std::vector<float> way_m, way_d, way_scale;  // key-split ways: their m, d and merge scale exp2(m_w - M)
  float m = -INFINITY, den = 0.f;              // the chunk's state after the ways' merge
  float lse2 = -INFINITY;                      // its partial LSE (base 2); -inf when the chunk saw no key
  std::vector<float> o_head;                   // its partial O (normalised; the final O when the row is not split)
};

struct MergeStep {
  int chunk = 0;                     // the partial folded in
  float lse_acc = -INFINITY;         // accumulated LSE before (base 2)
  float lse_chunk = -INFINITY;       // the partial's LSE
  float w_acc = 0.f, w_chunk = 0.f;  // merge weights (merge_weights in softmax_state.h)
  float lse_after = -INFINITY;
  std::vector<float> o_head;  // accumulated O after
};

struct SoftmaxTrace {
  int request = 0, query = 0, head = 0;                        // query: index within the request's queries
  int64_t token = 0;                                           // row of O
  int q_abs = 0, visible_lo = 0, visible_hi = 0, visible = 0;  // position and visible key range (mask)
  int unit = 0;                                                // work unit (request, or vLLM virtual batch)
  int tile_q = 0, chunk_pages = 0, kv_warp_split = 1;
  bool split = false;
  float sm_scale = 0;
  float scale_log2 = 0;  // sm_scale * log2(e) (as float: the plain path's one multiply)
  bool alibi = false;
  float soft_cap = 0;  // 0 = none
  std::vector<TileStep> steps;
  std::vector<ChunkPartial> partials;
  std::vector<MergeStep> merges;
  std::vector<float> o;       // final O (dtype values, as float): cpu.tiled's bits
  float lse = 0;              // final LSE (natural log): cpu.tiled's bits
  std::vector<double> ref_o;  // exact softmax (fp64)
  double ref_lse = 0;
  double max_abs_diff = 0, lse_diff = 0;
  std::vector<int> keys;      // the unit's keys (absolute positions)
  std::vector<float> logits;  // per key: logit in base 2 (-inf masked), the tiled arithmetic
  std::vector<double> probs;  // per key: exact softmax probability (0 masked)
};

// The step-through of query `query` of request `request`, head `head`. Throws std::invalid_argument
// naming the argument when the row does not exist.
SoftmaxTrace explain_row(const CaseSpec& c, const Plan& p, const Workload& w, int request, int query, int head);

}  // namespace attnscope
