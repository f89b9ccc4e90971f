#include "cli_args.h"

namespace attnscope::cli {

std::optional<int> Args::int_value(const std::string& n, int lo, int hi) const {
  auto v = value(n);
  if (!v) return std::nullopt;
  size_t used = 0;
  long x = 0;
  try {
    x = std::stol(*v, &used);
  } catch (...) {
    used = 0;
  }
  if (used != v->size() || v->empty()) throw UsageError("--" + n + ": \"" + *v + "\" is not an integer");
  if (x < lo || x > hi)
    throw UsageError("--" + n + ": " + *v + " is out of range, must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "]");
  return static_cast<int>(x);
}

std::vector<std::string> Args::list_value(const std::string& n) const {
  std::vector<std::string> out;
  auto v = value(n);
  if (!v) return out;
  std::string cur;
  for (char ch : *v + ",") {
    if (ch == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  return out;
}

const std::string& Args::case_path() const {
  if (positional.empty()) throw UsageError(command + ": missing the case file (attnscope-cli " + command + " CASE.json)");
  if (positional.size() > 1) throw UsageError(command + ": one case file expected, got " + std::to_string(positional.size()));
  return positional[0];
}

Args parse_args(int argc, char** argv, const std::set<std::string>& flags, const std::set<std::string>& valued) {
  Args a;
  a.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--help" || s == "-h") throw HelpRequested{};
    if (s.rfind("--", 0) == 0 && s.size() > 2) {
      std::string name = s.substr(2), val;
      const auto eq = name.find('=');
      const bool has_eq = eq != std::string::npos;
      if (has_eq) {
        val = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (flags.count(name)) {
        if (has_eq) throw UsageError("--" + name + " takes no value");
        a.flags.insert(name);
      } else if (valued.count(name)) {
        if (!has_eq) {
          if (i + 1 >= argc) throw UsageError("--" + name + " needs a value");
          val = argv[++i];
        }
        a.values[name] = val;
      } else {
        throw UsageError("unknown option --" + name + " for " + a.command + " (see attnscope-cli --help)");
      }
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

}  // namespace attnscope::cli
