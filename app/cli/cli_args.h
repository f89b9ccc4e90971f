// Command-line arguments of attnscope-cli: one command, options, one case path.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnscope::cli {

// Bad arguments: printed as one line, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// --help (or -h) after a command: the usage goes to stdout, exit code 0.
struct HelpRequested {};

struct Args {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // --name value
  std::set<std::string> flags;                // --name

  bool flag(const std::string& n) const { return flags.count(n) > 0; }
  std::optional<std::string> value(const std::string& n) const {
    auto it = values.find(n);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
  std::optional<int> int_value(const std::string& n, int lo, int hi) const;
  std::vector<std::string> list_value(const std::string& n) const;  // comma separated
  const std::string& case_path() const;
};

// flags: options without a value; valued: options that take one; --help / -h throw HelpRequested.
// Anything else is a UsageError.
Args parse_args(int argc, char** argv, const std::set<std::string>& flags, const std::set<std::string>& valued);

}  // namespace attnscope::cli
