#include "texture.h"

#include <GL/gl.h>

namespace attnscope::gui {

Texture::~Texture() {
  if (tex_) glDeleteTextures(1, &tex_);
}

void Texture::upload(int w, int h, const std::vector<uint32_t>& pixels) {
  if (!tex_) glGenTextures(1, &tex_);
  glBindTexture(GL_TEXTURE_2D, tex_);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  glPixelStorei(GL_UNPACK_ALIGNMENT, 4);
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA, w, h, 0, GL_RGBA, GL_UNSIGNED_BYTE, pixels.data());
  w_ = w;
  h_ = h;
}

}  // namespace attnscope::gui
