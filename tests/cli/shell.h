// Shell helpers of the cli tests that run programs as a user does (the generated repro scripts,
// tests/peer/bench_table.py): a command line's exit code and output, and paths in the source tree.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace attnscope::testing {

struct ShellOut {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// Runs a shell command line, stderr folded into stdout.
inline ShellOut sh(const std::string& cmd) {
  ShellOut o;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  const int st = pclose(p);
  o.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

inline std::string src(const std::string& rel) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/" + rel; }

}  // namespace attnscope::testing
