// attnscope [case.json] [--screenshot out.png --tab NAME] [--sweep PATH=VALUES] [--sweep-report FILE] [--size WxH]
#include <GLFW/glfw3.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "environment.h"
#include "gui_app.h"

namespace {

// Why --screenshot FILE cannot be written, found before a window opens (a bad argument, exit 2),
// else "". The probe creates the file and removes it again unless it was there before.
std::string screenshot_path_error(const std::string& p) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (fs::is_directory(st)) return "is a directory; name the PNG file to write";
  if (fs::exists(st) && !fs::is_regular_file(st)) return "is not a regular file";
  const fs::path dir = fs::path(p).parent_path().empty() ? fs::path(".") : fs::path(p).parent_path();
  if (!fs::is_directory(dir, ec)) return "its folder " + dir.string() + " does not exist";
  const bool existed = fs::exists(st);
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return std::string("cannot be written: ") + std::strerror(errno);
  ::close(fd);
  if (!existed) ::unlink(p.c_str());
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace attnscope::gui;
  AppOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](const char* what) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "attnscope: %s needs a value\n", what);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--screenshot") {
      o.screenshot = next("--screenshot");
      if (const std::string why = screenshot_path_error(o.screenshot); !why.empty()) {
        std::fprintf(stderr, "attnscope: --screenshot %s: %s\n", o.screenshot.c_str(), why.c_str());
        return 2;
      }
    } else if (a == "--version") {
      std::printf("attnscope %s\n", attnscope::attnscope_version());
      return 0;
    } else if (a == "--tab") {
      const std::string t = next("--tab");
      o.tab = parse_tab(t);
      if (!o.tab) {
        std::fprintf(stderr, "attnscope: --tab %s is not a tab (mask, pages, local, split, softmax, diff, timing, sweep)\n",
                     t.c_str());
        return 2;
      }
    } else if (a == "--sweep") {
      o.sweep = next("--sweep");
      if (o.sweep.find('=') == std::string::npos) {
        std::fprintf(stderr, "attnscope: --sweep %s must be PATH=VALUES (as attnscope-cli sweep --set)\n", o.sweep.c_str());
        return 2;
      }
    } else if (a == "--sweep-report") {
      const std::string f = next("--sweep-report");
      try {
        std::ifstream in(f);
        if (!in) throw std::invalid_argument("cannot read the file");
        o.sweep_report = attnscope::sweep_from_json(nlohmann::json::parse(in));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "attnscope: --sweep-report %s: %s\n", f.c_str(), e.what());
        return 2;
      }
    } else if (a == "--size") {
      const std::string s = next("--size");
      o.size_given = true;
      if (std::sscanf(s.c_str(), "%dx%d", &o.width, &o.height) != 2 || o.width < 320 || o.height < 240) {
        std::fprintf(stderr, "attnscope: --size %s must be WxH, at least 320x240\n", s.c_str());
        return 2;
      }
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: attnscope [case.json] [--screenshot out.png] [--tab mask|pages|local|split|softmax|diff|timing|sweep] [--sweep "
          "PATH=VALUES] [--sweep-report FILE] "
          "[--size WxH] [--version]\n");
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "attnscope: unknown option %s (see --help)\n", a.c_str());
      return 2;
    } else {
      o.case_path = a;
    }
  }
  const char* display = std::getenv("DISPLAY");
  const char* wayland = std::getenv("WAYLAND_DISPLAY");
  if ((!display || !*display) && (!wayland || !*wayland)) {
    std::fprintf(stderr,
                 "attnscope: no display (DISPLAY is not set); for headless use run attnscope-cli (validate, plan, run, bench) or "
                 "xvfb-run -a attnscope --screenshot\n");
    return 2;
  }
  if (!glfwInit()) {
    std::fprintf(stderr, "attnscope: cannot open the display \"%s\"; for headless use run attnscope-cli\n",
                 display ? display : "");
    return 2;
  }
  const int code = App(o).run();
  glfwTerminate();
  return code;
}
