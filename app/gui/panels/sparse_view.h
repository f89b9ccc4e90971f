// DeepSeek sparse attention's views (docs/dsa.md): the Mask tab's kept tokens over the dense causal
// mask with the mass each carries, the Pages tab's selected slots, the Softmax tab's kept / dropped
// mass. The data is sparse_data.h's; here its colours, sentences and drawing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "draw/texture.h"
#include "sparse_data.h"

namespace attnscope::gui {

// Colours of the Mask tab's sparse grid: masked (not causally visible), visible but dropped, kept
// (the mass not computed for the row); kept cells with a mass take the ramp (sparse_mass_colour).
uint32_t sparse_masked_colour();
uint32_t sparse_dropped_colour();
uint32_t sparse_kept_colour();
// A kept key's (or cell's) mass on a log scale: the ramp over four decades below `max_mass`.
uint32_t sparse_mass_colour(double mass, double max_mass);
constexpr double kSparseDecades = 4;
// RGBA pixels ([rows * cols], ImGui's layout) of the grid.
std::vector<uint32_t> sparse_mask_pixels(const SparseMaskItems& m);

// The legend of a row: kept count, -1 padding, NaN scores, recall of mass of its head.
std::string sparse_row_line(const SparseRow& r, bool with_recall = true);
// How the Mask tab shades: which head's dense softmax, on which scale, which rows.
std::string sparse_shade_line(const SparseMaskItems& m, int q_len);
// The Pages tab's line on the selected slots of the explained row.
std::string sparse_slots_line(const SparseSlots& s);
// The Softmax tab's lines: kept / dropped mass of the explained head, the heads' recall summarised.
std::vector<std::string> sparse_mass_lines(const SparseRow& r);

// The pictures below are images (one texture each, rebuilt when their data or size changes), never
// one rectangle per key: a software-rendered frame pays per triangle.
struct SparseImage {
  int w = 0, h = 0;
  std::vector<uint32_t> px;  // [h][w], 0 = transparent
};

// The explained row as a strip, `cols` columns of keys: per column the kept keys' mass (ramp, by the
// column's kept mass against the largest) stacked on the dropped keys' (grey) from the bottom, scaled
// to the largest column (`*max_mass`), over `bar_h` rows; under them `rug_h` rows, teal where a key is kept.
SparseImage sparse_strip_image(const SparseRow& r, int cols, int bar_h, int rug_h, double* max_mass);
// The request's slots: one column per page in key order, one row per slot offset; selected cyan, unselected dark,
// past kv_len transparent.
SparseImage sparse_slot_image(const SparseSlots& s);
// One column per head: the kept mass (teal; `head` yellow) at the bottom, the dropped (grey) above, `h` rows.
SparseImage sparse_head_image(const SparseRow& r, int h);
constexpr uint32_t kSlotSelected = 0xFFFFE678;  // IM_COL32(120, 230, 255, 255)

class SparseViews {
 public:
  // The explained row's strip, `height` pixels, with its scale and hover readout.
  void strip(const SparseRow& r, float height);
  // The Pages tab's slot grid, `height` pixels. `version` changes when `s` is rebuilt in place.
  void slots(const SparseSlots& s, int version, float height);
  // The Softmax tab's bars per head, `height` pixels.
  void heads(const SparseRow& r, float height);

 private:
  struct Cached {
    Texture tex;
    const void* data = nullptr;
    int version = 0, w = 0, h = 0;
    double max = 0;
    bool stale(const void* d, int v, int ww, int hh) const { return d != data || v != version || ww != w || hh != h; }
    void mark(const void* d, int v, int ww, int hh) { data = d, version = v, w = ww, h = hh; }
  };
  Cached strip_, slots_, heads_;
};

}  // namespace attnscope::gui
