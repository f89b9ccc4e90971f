// The GUI program's command line (issue 32, items 2, 9 and 23): --version, a --screenshot path that
// cannot be written, and the message of a case that cannot be opened in screenshot mode.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "environment.h"
#include "shell.h"
#include "xvfb_run.h"

namespace fs = std::filesystem;
using attnscope::testing::sh;
using attnscope::testing::src;

namespace {
const std::string kGui = ATTNSCOPE_GUI;
}

TEST(GuiMain, VersionPrintsTheProjectVersion) {
  const auto o = sh("env -u DISPLAY -u WAYLAND_DISPLAY " + kGui + " --version");
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, std::string("attnscope ") + attnscope::attnscope_version() + "\n");
}

// A directory or /proc was found only after the frames were drawn, and exited 1 (a failed check);
// it is a bad argument: exit 2 at once, naming the option, without a display.
TEST(GuiMain, ScreenshotPathThatCannotBeWrittenExitsTwo) {
  const fs::path dir = fs::temp_directory_path() / ("attnscope_shotdir_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::pair<std::string, std::string> bad[] = {
      {dir.string(), "is a directory"},
      {"/proc", "is a directory"},
      {"/proc/attnscope.png", "cannot be created"},
      {(dir / "no" / "such" / "shot.png").string(), "does not exist"},
  };
  for (const auto& [path, want] : bad) {
    SCOPED_TRACE(path);
    const auto o =
        sh("env -u DISPLAY -u WAYLAND_DISPLAY " + kGui + " " + src("examples/prefix-lm.json") + " --screenshot " + path);
    EXPECT_EQ(o.code, 2) << o.out;
    EXPECT_NE(o.out.find("attnscope: --screenshot " + path + ": "), std::string::npos) << o.out;
    EXPECT_NE(o.out.find(want), std::string::npos) << o.out;
  }
  // a writable path passes the check (it then stops at the missing display) and is not left behind
  const std::string ok = (dir / "shot.png").string();
  const auto o = sh("env -u DISPLAY -u WAYLAND_DISPLAY " + kGui + " --screenshot " + ok);
  EXPECT_NE(o.out.find("no display"), std::string::npos) << o.out;
  EXPECT_FALSE(fs::exists(ok));
  fs::remove_all(dir);
}

// Screenshot mode on a case that cannot be opened said "The current session is unchanged" when
// there was no session at all, and a missing file was "error: /: cannot open case file".
TEST(GuiMain, ScreenshotOfACaseThatCannotBeOpenedSpeaksOfNoSession) {
  const fs::path dir = fs::temp_directory_path() / ("attnscope_badcase_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bad = (dir / "bad.json").string();
  std::ofstream(bad) << "{\"schema\": \"attnscope/case@1\", \"requests\": 3}";
  const auto o = sh(attnscope::testing::under_xvfb(kGui, bad + " --screenshot " + (dir / "shot.png").string(),
                                                   "HOME=" + dir.string(), "800x600x24"));
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("Cannot open " + bad), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("/requests"), std::string::npos) << "the error names the JSON path: " << o.out;
  EXPECT_EQ(o.out.find("unchanged"), std::string::npos) << o.out;
  // a missing file is named as a file, not with the JSON path "/"
  const std::string nope = (dir / "nope.json").string();
  const auto m = sh(attnscope::testing::under_xvfb(kGui, nope + " --screenshot " + (dir / "shot.png").string(),
                                                   "HOME=" + dir.string(), "800x600x24"));
  EXPECT_EQ(m.code, 2) << m.out;
  EXPECT_NE(m.out.find("error: " + nope + ": no such file"), std::string::npos) << m.out;
  EXPECT_EQ(m.out.find("unchanged"), std::string::npos) << m.out;
  fs::remove_all(dir);
}
