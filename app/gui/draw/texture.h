// An RGBA image uploaded as an OpenGL texture for ImGui::Image (heatmaps are one texture each,
// never one widget per cell).
#pragma once

#include <cstdint>
#include <vector>

namespace attnscope::gui {

class Texture {
 public:
  Texture() = default;
  Texture(const Texture&) = delete;
  Texture& operator=(const Texture&) = delete;
  ~Texture();
  // pixels: [h][w] RGBA packed as IM_COL32 (ABGR in memory order R, G, B, A). Nearest filtering.
  void upload(int w, int h, const std::vector<uint32_t>& pixels);
  void* id() const { return reinterpret_cast<void*>(static_cast<intptr_t>(tex_)); }
  int width() const { return w_; }
  int height() const { return h_; }
  bool valid() const { return tex_ != 0; }

 private:
  unsigned tex_ = 0;
  int w_ = 0, h_ = 0;
};

}  // namespace attnscope::gui
