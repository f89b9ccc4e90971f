#include "colormap.h"

#include <algorithm>
#include <cmath>

namespace attnscope::gui {

namespace {
Palette g_palette = Palette::kDefault;  // GUI thread only
}  // namespace

void set_palette(Palette p) { g_palette = p; }
Palette palette() { return g_palette; }

Rgba block_full_colour() { return g_palette == Palette::kColourBlind ? Rgba{86, 180, 233, 200} : Rgba{90, 220, 120, 170}; }
Rgba block_partial_colour() { return g_palette == Palette::kColourBlind ? Rgba{230, 159, 0, 220} : Rgba{255, 150, 50, 200}; }

Rgba ramp(float t) {
  // five viridis anchor colours, linearly interpolated
  static const float k[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  if (!(t >= 0)) t = 0;  // NaN -> 0
  t = std::min(t, 1.f) * 4.f;
  const int i = std::min(static_cast<int>(t), 3);
  const float f = t - i;
  auto mix = [&](int c) { return static_cast<uint8_t>(k[i][c] + (k[i + 1][c] - k[i][c]) * f); };
  return {mix(0), mix(1), mix(2), 255};
}

Rgba owner_colour(int request) {
  if (g_palette == Palette::kColourBlind) {
    // Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies
    static const Rgba oi[8] = {{230, 159, 0, 255}, {86, 180, 233, 255}, {0, 158, 115, 255},   {240, 228, 66, 255},
                               {0, 114, 178, 255}, {213, 94, 0, 255},   {204, 121, 167, 255}, {200, 200, 200, 255}};
    return oi[((request % 8) + 8) % 8];
  }
  // golden-angle hues, fixed saturation and value
  const float h = std::fmod(request * 0.618034f, 1.f) * 6.f;
  const int i = static_cast<int>(h);
  const float f = h - i, v = 0.85f, s = 0.55f;
  const float p = v * (1 - s), q = v * (1 - s * f), u = v * (1 - s * (1 - f));
  float r, g, b;
  switch (i % 6) {
    case 0:
      r = v;
      g = u;
      b = p;
      break;
    case 1:
      r = q;
      g = v;
      b = p;
      break;
    case 2:
      r = p;
      g = v;
      b = u;
      break;
    case 3:
      r = p;
      g = q;
      b = v;
      break;
    case 4:
      r = u;
      g = p;
      b = v;
      break;
    default:
      r = v;
      g = p;
      b = q;
      break;
  }
  return {static_cast<uint8_t>(r * 255), static_cast<uint8_t>(g * 255), static_cast<uint8_t>(b * 255), 255};
}

uint32_t pack_abgr(Rgba c) {
  return (static_cast<uint32_t>(c.a) << 24) | (static_cast<uint32_t>(c.b) << 16) | (static_cast<uint32_t>(c.g) << 8) | c.r;
}

}  // namespace attnscope::gui
