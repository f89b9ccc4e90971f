// --allow-python and --python-timeout S: the options of every command that runs backends
// (docs/python-backends.md). A case can come from a stranger's bug report; its python: backends run
// only when the user says so.
#pragma once

#include <set>
#include <string>

#include "cli_args.h"

namespace attnscope::cli {

// parse_args with the two options added; sets the registry's policy from them. Without
// --allow-python, a python: backend named by the case (/backends/i) or by --backends / --backend is
// refused here, before anything runs: CaseError or UsageError naming the flag (exit 2).
Args parse_backend_args(int argc, char** argv, std::set<std::string> flags, std::set<std::string> valued);

}  // namespace attnscope::cli
