// attnscope [case.json] [--screenshot out.png --tab NAME [--view NAME]] [--sweep PATH=VALUES] [--sweep-report FILE] [--plan-cost]
//           [--consistency N] [--size WxH]
//           [--edit-latency N [--drag PATH=A:B]]
#include <GLFW/glfw3.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>

#include "environment.h"
#include "file_input.h"
#include "gui_app.h"

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
      const std::string why = check_screenshot_path(o.screenshot);
      if (!why.empty()) {
        std::fprintf(stderr, "attnscope: --screenshot %s: %s\n", o.screenshot.c_str(), why.c_str());
        return 2;
      }
    } else if (a == "--version") {
      std::printf("attnscope %s\n", attnscope::attnscope_version());
      return 0;
    } else if (a == "--edit-latency") {
      const std::string n = next("--edit-latency");
      char extra = 0;
      if (std::sscanf(n.c_str(), "%d%c", &o.edit_latency, &extra) != 1 || o.edit_latency < 1 || o.edit_latency > 1000) {
        std::fprintf(stderr, "attnscope: --edit-latency %s must be a number of edits, 1 to 1000\n", n.c_str());
        return 2;
      }
    } else if (a == "--drag") {
      const std::string d = next("--drag");
      std::string why;
      o.drag = attnscope::gui::parse_drag(d, &why);
      if (!o.drag) {
        std::fprintf(stderr, "attnscope: --drag %s: %s\n", d.c_str(), why.c_str());
        return 2;
      }
    } else if (a == "--tab") {
      const std::string t = next("--tab");
      o.tab = parse_tab(t);
      if (!o.tab) {
        std::fprintf(
            stderr,
            "attnscope: --tab %s is not a tab (mask, pages, local, split, softmax, diff, timing, sweep, consistency, engine)\n",
            t.c_str());
        return 2;
      }
    } else if (a == "--view") {
      o.view = next("--view");
      UiState probe;
      if (!apply_view(o.view, probe)) {
        std::fprintf(stderr, "attnscope: --view %s is not a view (%s)\n", o.view.c_str(), kViewNames);
        return 2;
      }
    } else if (a == "--sweep") {
      o.sweep = next("--sweep");
      if (o.sweep.find('=') == std::string::npos) {
        std::fprintf(stderr, "attnscope: --sweep %s must be PATH=VALUES (as attnscope-cli sweep --set)\n", o.sweep.c_str());
        return 2;
      }
    } else if (a == "--plan-cost") {
      o.plan_cost = true;
    } else if (a == "--consistency") {
      const std::string n = next("--consistency");
      char extra = 0;
      if (std::sscanf(n.c_str(), "%d%c", &o.consistency, &extra) != 1 || o.consistency < 1) {
        std::fprintf(stderr,
                     "attnscope: --consistency %s must be N >= 1, the last N tokens (as attnscope-cli consistency --last)\n",
                     n.c_str());
        return 2;
      }
    } else if (a == "--sweep-report") {
      const std::string f = next("--sweep-report");
      try {
        o.sweep_report = load_sweep_report(f);
      } catch (const std::exception& e) {  // the message names the file
        std::fprintf(stderr, "attnscope: --sweep-report %s\n", e.what());
        return 2;
      }
    } else if (a == "--size") {
      const std::string s = next("--size");
      o.size_given = true;
      const std::string why = parse_window_size(s, &o.width, &o.height);
      if (!why.empty()) {
        std::fprintf(stderr, "attnscope: --size %s %s\n", s.c_str(), why.c_str());
        return 2;
      }
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: attnscope [case.json] [--screenshot out.png] [--tab "
          "mask|pages|local|split|softmax|diff|timing|sweep|consistency|engine|merge] [--view NAME] [--sweep "
          "PATH=VALUES] [--sweep-report FILE] [--plan-cost] [--consistency N] "
          "[--size WxH] [--edit-latency N [--drag PATH=A:B]] [--version]\n"
          "  --view NAME       an FP8 case's sub-view: pool, scales, channels (Pages tab), baseline, dequantised, original\n"
          "                    (the Diff tab's reference), sglang-fa, vllm-flashinfer (the Engine tab's engine)\n"
          "  --plan-cost       the Sweep tab's planning-cost view, measured at start (as attnscope-cli bench --plan-only)\n"
          "  --edit-latency N  with --screenshot: apply N scripted edits (the data seed stepped, each once the last one's\n"
          "                    results are shown), print the time from each edit to the frame showing its results (p50,\n"
          "                    p95) and each stage's time\n"
          "  --drag PATH=A:B   with --edit-latency N: the N edits step PATH from A to B at 60 Hz (a slider dragged),\n"
          "                    e.g. /attention/window=64:4096; also prints the result updates per second\n");
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "attnscope: unknown option %s (see --help)\n", a.c_str());
      return 2;
    } else {
      o.case_path = a;
    }
  }
  if (o.drag && o.edit_latency == 0) {
    std::fprintf(stderr, "attnscope: --drag needs --edit-latency N (the number of edits along the range)\n");
    return 2;
  }
  if (o.edit_latency > 0 && o.screenshot.empty()) {
    std::fprintf(stderr, "attnscope: --edit-latency needs --screenshot (it measures, then writes the screenshot and exits)\n");
    return 2;
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
  int code = 1;
  try {
    code = App(std::move(o)).run();
  } catch (const std::exception& e) {  // App::run recovers from what a frame throws; this is the last resort
    std::fprintf(stderr, "attnscope: internal error: %s\n", e.what());
  }
  glfwTerminate();
  return code;
}
