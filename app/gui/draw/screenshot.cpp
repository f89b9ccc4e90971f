#include "screenshot.h"

#include <GL/gl.h>
#include <stb/stb_image_write.h>

#include <vector>

namespace attnscope::gui {

std::string write_screenshot(const std::string& path, int w, int h) {
  std::vector<unsigned char> px(static_cast<size_t>(w) * h * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, px.data());
  // OpenGL rows run bottom-up
  std::vector<unsigned char> flipped(px.size());
  for (int y = 0; y < h; ++y)
    std::copy(px.begin() + static_cast<size_t>(h - 1 - y) * w * 4, px.begin() + static_cast<size_t>(h - y) * w * 4,
              flipped.begin() + static_cast<size_t>(y) * w * 4);
  if (!stbi_write_png(path.c_str(), w, h, 4, flipped.data(), w * 4)) return "cannot write PNG \"" + path + "\"";
  return "";
}

}  // namespace attnscope::gui
