// The Pages tab's MLA view (docs/conventions.md section 13): one token's latent row drawn as its ckv and
// kpe parts, what the case's form reads of it (absorbed: K is the whole row, V its ckv part; non-absorbed:
// the up-projected per-head K and V), and the cache's bytes per token and in total beside what the same
// model would store as GQA-style K and V per head.
#pragma once

#include <cstdint>
#include <string>

#include "session.h"

namespace attnscope::gui {

struct MlaLayoutItems {
  bool mla = false;
  bool absorbed = true;
  int rank = 0, rope = 0, nope = 0, vdim = 0, heads = 0, elem_bytes = 2;
  int64_t latent_bytes = 0;    // one token's latent row
  int64_t per_head_bytes = 0;  // the same token as per-head K (nope + rope) and V (vdim) for every query head
  int64_t kernel_bytes = 0;    // what the case's form reads per token: the latent (absorbed) or the per-head K and V
  int64_t tokens = 0;          // pool slots (pages x page_size)
  double ratio = 0;            // per_head_bytes / latent_bytes
};

MlaLayoutItems build_mla_layout(const Session& s);

// Draws the view above the pool when the case has /mla; nothing otherwise.
void draw_mla_layout(const MlaLayoutItems& it);

}  // namespace attnscope::gui
