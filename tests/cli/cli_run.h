// Runs attnscope-cli as a user does: exit code, stdout and stderr apart (the cli tests check which
// stream a line goes to).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace attnscope::testing {

struct CliOut {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// `args` is a shell word list (quote what the shell must not split); `binary` the CLI to run.
inline CliOut cli_at(const std::string& binary, const std::string& args) {
  namespace fs = std::filesystem;
  const std::string errf = fs::temp_directory_path() / ("attnscope_cli_err_" + std::to_string(::getpid()));
  const std::string cmd = binary + " " + args + " 2>" + errf;
  CliOut o;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  const int st = pclose(p);
  o.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(errf);
  o.err.assign(std::istreambuf_iterator<char>(e), {});
  fs::remove(errf);
  return o;
}

// attnscope-cli as a user has it.
inline CliOut cli(const std::string& args) { return cli_at(ATTNSCOPE_CLI, args); }

#ifdef ATTNSCOPE_CLI_FAULTS
// The tests' copy of the CLI, with the fault hooks of tests/cli/cli_test_hooks.cpp.
inline CliOut cli_faults(const std::string& args) { return cli_at(ATTNSCOPE_CLI_FAULTS, args); }
#endif

}  // namespace attnscope::testing
