// Reads the default framebuffer and writes it as a PNG (stb_image_write).
#pragma once

#include <string>

namespace attnscope::gui {

// Returns an empty string on success, else why it failed.
std::string write_screenshot(const std::string& path, int width, int height);

}  // namespace attnscope::gui
