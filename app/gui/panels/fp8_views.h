// The FP8 views of the Pages tab (docs/conventions.md section 10): the scales (the two numbers of
// granularity tensor, a strip per KV head, a heat map over the pool per token) with the saturated
// elements marked, and the quantisation error per head-dim channel.
#pragma once

#include <cstdint>

#include "draw/colormap.h"
#include "draw/texture.h"
#include "fp8_data.h"
#include "session.h"

namespace attnscope::gui {

// What the pool map colours a (slot, KV head) cell by: its scale (granularity token), the largest
// |value| before quantisation, or how many of its elements saturated.
enum class Fp8Colour { kScale = 0, kAmax = 1, kSaturated = 2 };

// The cell's value for K (v false) or V under `mode`; NaN for a slot no request uses.
float fp8_cell_value(const Fp8Data& d, bool v, Fp8Colour mode, int64_t slot, int head);

// The mark of a cell with a saturated element: a colour the viridis ramp never gives.
constexpr Rgba kSaturatedColour{255, 60, 40, 255};

class Fp8ScalesView {
 public:
  void draw(const Session& s, const Fp8Data& d);

 private:
  void draw_heads(const Fp8Data& d);
  void draw_pool(const Session& s, const Fp8Data& d);
  void build_texture(const Session& s, const Fp8Data& d, int per_row, int shown);

  int head_ = 0;
  bool v_ = false;
  int mode_ = -1;  // Fp8Colour; -1: the granularity's default
  // the texture and what it was built for
  Texture tex_;
  const Fp8Data* built_for_ = nullptr;
  int built_head_ = -1, built_mode_ = -1, built_per_row_ = -1;
  bool built_v_ = false;
  bool log_scale_ = true;
  float lo_ = 0, hi_ = 1;  // colour range (log10 when log_scale_)
};

class Fp8ChannelView {
 public:
  void draw(const Session& s, const Fp8Data& d);

 private:
  int stat_ = 0;  // 0 max, 1 RMS
  bool log_ = false;
};

}  // namespace attnscope::gui
