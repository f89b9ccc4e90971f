// The steps of one row's online softmax as the step-through records them (softmax_trace.h): a KV
// tile, a chunk's partial, a merge of two partials. Plain data, shared by the row arithmetic that
// fills them (the CPU plan twin's row code) and the trace that collects them.
#pragma once

#include <cmath>
#include <vector>

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

}  // namespace attnscope
