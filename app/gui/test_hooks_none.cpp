// The product GUI's test seams (test_hooks.h): no fault.
#include "test_hooks.h"

namespace attnscope::gui {

std::optional<Tab> throw_in_view_hook() { return std::nullopt; }
std::optional<int64_t> full_reference_budget_hook() { return std::nullopt; }

}  // namespace attnscope::gui
