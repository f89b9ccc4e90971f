// The arithmetic of cpu.tiled for one query row, in one place: the online softmax of a row over a
// work item's KV tiles (with the plan's key-split ways and their merge), the row's output or
// partial, and the fold of partials in chunk order. cpu.tiled runs it for every row; the softmax
// step-through (softmax_trace.cpp) runs it for one row with a trace, so the step-through's last
// step is cpu.tiled's result bit for bit by construction.
#pragma once

#include <vector>

#include "attnscope/softmax_steps.h"
#include "cpu_common.h"

namespace attnscope::cpu {

// The per-case constants of the arithmetic.
struct TiledArith {
  TiledArith(const CaseSpec& c, const Plan& p, const Workload& w);
  const CaseSpec& c;
  const Plan& p;
  const Workload& w;
  KvAccess kv;
  DType dt;
  int G, Hq, Dq, Dv;
  float scale, scale_log2, cap;
  bool plain;                     // no soft-cap, ALiBi or score_mod: the kernel's plain path, the score is q.k
  float exp_scale;                // what the softmax step multiplies a score by, inside exp2's fma: scale_log2 when plain, else 1
  std::vector<int64_t> unit_tok;  // first output token of each unit
  // Per KV head, an FP8 cache's scales as cuda.flash applies them (docs/conventions.md section 10; per
  // tensor or per head: constant over a head's keys). The score is q.k over the stored values; the K
  // scale is folded into the logit's scale, one float product: exp_scale x k_scale on the plain path,
  // sm_scale x k_scale before soft-cap / ALiBi / score_mod otherwise. The V scale multiplies O / den
  // before the final rounding or before the partial is written (tiled_final / tiled_partial). All 1
  // without FP8 (x * 1 = x: the same bits).
  std::vector<float> head_exp_scale, head_logit_scale, head_v_scale;
  // Per qo head, the sink logit in base 2 (sink_logits x log2(e), one float product); empty without
  // sinks. It starts a row's state (m = sink2, d = 1) in its final output or first KV chunk (tiled_item_row).
  std::vector<float> sink2;
};

// The score the kernel holds for (query vector qv of qo head h at q_abs, key): q.k on the plain path
// (sm_scale x log2(e) is folded into exp2's argument, fma(score, exp_scale, -max), as cuda.flash
// does); otherwise the logit in base 2 (scale, soft-cap, ALiBi or the score_mod, times log2(e)).
float tiled_score(const TiledArith& a, const float* qv, int request, int key, int h, int q_abs, float slope);
// The same from q . k already summed (in d order, from 0).
float tiled_score_of_dot(const TiledArith& a, float dot, int request, int key, int h, int q_abs, float slope);

// The logit in base 2 (the score times exp_scale, rounded once): what the step-through shows.
float tiled_logit(const TiledArith& a, const float* qv, int request, int key, int h, int q_abs, float slope);

// One row's state after a work item: unnormalised O (Dv values in the scratch, valid until its
// next row), running max (base 2) and denominator.
struct RowState {
  const float* o = nullptr;
  float mx = -INFINITY, den = 0.f;
  float v_scale = 1.f;  // the row's KV head's V scale (TiledArith::head_v_scale)
};

// Scratch reused across the rows of one thread: cpu.tiled's inner loop allocates nothing per row.
struct RowScratch {
  std::vector<float> s;
  std::vector<std::vector<float>> way_o;  // way 0 ends holding the merged row
  std::vector<float> way_m, way_d, scale;
  std::vector<float> dots, p;    // the row's q . k over the item's keys (index key - kv_begin); a tile's P
  std::vector<const float*> pv;  // the V rows of a tile's nonzero P
  // Per work item and KV head, shared by its rows: its keys' K and V rows (the page lookups once per
  // item, not per row), and with share_k_rows its K transposed (d-major, `kt_stride` keys a column,
  // zero-padded) so that a row's dot products are one vector loop over the keys (tiled_row.cpp).
  bool share_k_rows = false;
  const WorkItem* item = nullptr;
  int item_kvh = -1;
  std::vector<const float*> k_rows, v_rows;
  std::vector<float> kt;
  size_t kt_stride = 0;
};

// Row `row` (packed: q_local * G + g) of work item `it` for KV head `kvh`: each of the plan's
// kv_warp_split ways runs its online softmax over its keys of every KV tile, then the ways merge in
// way order. A sink starts the row's state when the item is the row's output or first KV chunk: every
// way's m = the sink (base 2), way 0's d = 1, as cuda.flash's start_rows. `steps` / `part` (may be
// null) receive every tile step and the ways' merge.
RowState tiled_item_row(const TiledArith& a, const WorkItem& it, int row, int kvh, RowScratch& scratch,
                        std::vector<TileStep>* steps = nullptr, ChunkPartial* part = nullptr);

// The item's partial of a split row: O / den (rounded to the dtype when the case asks for
// dtype partials), 0 for an empty row; returns its base-2 LSE. The first chunk's partial holds the
// row's sink (its state started there), so the merge counts it once.
float tiled_partial(const TiledArith& a, const RowState& st, float* out);

// The final output of an unsplit row: O / den rounded to the dtype (0 when empty); returns the
// natural-log LSE (the sink, if any, is already in m and d).
float tiled_final(const TiledArith& a, const RowState& st, float* out);

// Folds partial b (base-2 LSE, normalised O) into the accumulated acc / *lse (merge_weights).
// `step` (may be null) receives the weights.
void tiled_fold(int Dv, float* acc, float* lse, float lse_b, const float* ob, MergeStep* step = nullptr);

}  // namespace attnscope::cpu
