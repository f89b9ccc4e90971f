// The product's test hooks (test_hooks.h): none.
#include "test_hooks.h"

namespace attnscope::cli {

ConsistencyRunFn consistency_run_hook() { return nullptr; }

}  // namespace attnscope::cli
