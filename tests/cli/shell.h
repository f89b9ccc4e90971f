// Shell helpers of the cli tests that run programs as a user does (the generated repro scripts,
// tests/peer/bench_table.py): a command line's exit code and output, and paths in the source tree.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
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

// An interpreter with NumPy: ATTNSCOPE_PYTHON, else python3, else /usr/bin/python3 (CI installs
// python3-numpy); "" when none has it. Finds NumPy without importing it: each test process asks once.
inline std::string numpy_python() {
  if (const char* p = std::getenv("ATTNSCOPE_PYTHON")) return p;
  for (const char* py : {"python3", "/usr/bin/python3"})
    if (std::system(
            (std::string(py) + " -c 'import importlib.util as u, sys; sys.exit(u.find_spec(\"numpy\") is None)' >/dev/null 2>&1")
                .c_str()) == 0)
      return py;
  return "";
}

}  // namespace attnscope::testing
