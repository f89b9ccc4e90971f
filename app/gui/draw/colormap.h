// Colour maps: a perceptual ramp for values in [0, 1], distinct colours for page owners.
#pragma once

#include <cstdint>

namespace attnscope::gui {

struct Rgba {
  uint8_t r, g, b, a;
};

// The palette (View menu, kept in the settings): the default, or colour-blind safe (Okabe-Ito's
// eight colours for owners and series, blue / orange instead of green / orange for block classes).
// viridis, the ramp, reads in both.
enum class Palette { kDefault = 0, kColourBlind = 1 };
void set_palette(Palette p);
Palette palette();

Rgba ramp(float t);              // t in [0, 1]: dark blue -> teal -> yellow (viridis-like)
Rgba owner_colour(int request);  // stable, distinct per request (and per series of a chart)
Rgba block_full_colour();        // a fully allowed block outline
Rgba block_partial_colour();     // a partially masked block outline
uint32_t pack_abgr(Rgba c);      // ImGui's IM_COL32 layout

}  // namespace attnscope::gui
