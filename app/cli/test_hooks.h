// Seams through which the tests inject faults into attnscope-cli. The product links
// cli/test_hooks_none.cpp (no faults, no test switch read); tests/cli/cli_test_hooks.cpp defines them
// for attnscope-cli-faults, a copy of the CLI built only with the tests.
#pragma once

#include "consistency.h"

namespace attnscope::cli {

// The run function `consistency` uses; empty: the registry's run_one.
ConsistencyRunFn consistency_run_hook();

}  // namespace attnscope::cli
