// The GUI program under Xvfb, as the tests run it.
// Each call has its own X auth file: xvfb-run's own temporary directory failed its clean-up now and
// then under parallel ctest (exit 5, "problem while cleaning up temporary directory") after the
// program had already exited with its own code.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace attnscope::testing {

inline bool have_xvfb() { return std::system("command -v xvfb-run > /dev/null 2>&1") == 0; }

// A shell command (a subshell: append redirections after it) that runs `program args` on a fresh
// Xvfb screen, exits with the program's code and removes its auth file. `env` is "NAME=value ...".
inline std::string under_xvfb(const std::string& program, const std::string& args, const std::string& env = "",
                              const std::string& screen = "1280x800x24") {
  static std::atomic<int> calls{0};
  const std::string auth =
      (std::filesystem::temp_directory_path() / ("attnscope_xauth_" + std::to_string(::getpid()) + "_" + std::to_string(calls++)))
          .string();
  return "(" + (env.empty() ? "" : "env " + env + " ") + "xvfb-run -a -f " + auth + " -s '-screen 0 " + screen + "' " + program +
         " " + args + "; rc=$?; rm -f " + auth + "; exit $rc)";
}

}  // namespace attnscope::testing
