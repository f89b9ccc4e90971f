// Colour maps: a perceptual ramp for values in [0, 1], distinct colours for page owners.
#pragma once

#include <cstdint>

namespace attnscope::gui {

struct Rgba {
  uint8_t r, g, b, a;
};

Rgba ramp(float t);              // t in [0, 1]: dark blue -> teal -> yellow (viridis-like)
Rgba owner_colour(int request);  // stable, distinct per request
uint32_t pack_abgr(Rgba c);      // ImGui's IM_COL32 layout

}  // namespace attnscope::gui
