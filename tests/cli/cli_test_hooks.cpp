// attnscope-cli-faults's test hooks (app/cli/test_hooks.h): the faults tests ask for by environment
// variable, compiled only into the tests' copy of the CLI.
#include <cmath>
#include <cstdlib>

#include "session.h"
#include "test_hooks.h"

namespace attnscope::cli {

// ATTNSCOPE_TEST_CONSISTENCY_FAULT=ID@P: backend ID's decode steps P and later get O moved by a few
// units, so that the check's detection and exit code can be tested on any backend.
ConsistencyRunFn consistency_run_hook() {
  const char* env = std::getenv("ATTNSCOPE_TEST_CONSISTENCY_FAULT");
  if (!env) return nullptr;
  const std::string f = env;
  const auto at = f.rfind('@');
  if (at == std::string::npos) return nullptr;
  const std::string id = f.substr(0, at);
  const int from = std::atoi(f.c_str() + at + 1);
  return [id, from](const std::string& b, int step, const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& ro) {
    Result r = run_one(b, c, p, w, ro);
    if (b == id && step >= from && r.ok())
      for (float& x : r.o) x = round_to(c.dtype, x + 0.0625f * (1.0f + std::fabs(x)));
    return r;
  };
}

}  // namespace attnscope::cli
