// A screenshot of the GUI program under Xvfb, read back as RGBA pixels.
#pragma once

#include <stb/stb_image.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "xvfb_run.h"

namespace attnscope::testing {

struct GuiShot {
  int rc = -1;
  std::string log;  // stdout and stderr together
  int w = 0, h = 0;
  std::vector<unsigned char> px;  // RGBA, empty when no image was written
  const unsigned char* at(int x, int y) const { return px.data() + (static_cast<size_t>(y) * w + x) * 4; }
};

// Runs the GUI with `args` and `--screenshot <tmp>.png`, then reads the image back and removes it.
inline GuiShot gui_screenshot(const std::string& gui, const std::string& args, const std::string& tag,
                              const std::string& env = "") {
  static std::atomic<int> calls{0};
  namespace fs = std::filesystem;
  const fs::path png = fs::temp_directory_path() /
                       ("attnscope_shot_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(calls++) + ".png");
  const std::string log = png.string() + ".log";
  GuiShot s;
  const int rc = std::system((under_xvfb(gui, args + " --screenshot " + png.string(), env) + " > " + log + " 2>&1").c_str());
  s.rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
  std::ifstream lf(log);
  s.log.assign(std::istreambuf_iterator<char>(lf), {});
  int n = 0;
  if (unsigned char* data = s.rc == 0 ? stbi_load(png.string().c_str(), &s.w, &s.h, &n, 4) : nullptr) {
    s.px.assign(data, data + static_cast<size_t>(s.w) * s.h * 4);
    stbi_image_free(data);
  }
  fs::remove(png);
  fs::remove(log);
  return s;
}

}  // namespace attnscope::testing
