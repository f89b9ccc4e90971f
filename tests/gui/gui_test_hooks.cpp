// attnscope-faults' test seams (app/gui/test_hooks.h): ATTNSCOPE_TEST_THROW_IN_VIEW=<tab id> makes
// that view throw while drawing; ATTNSCOPE_TEST_REFERENCE_BUDGET=N sets the live run's budget for a
// full reference. The product GUI never reads the variables.
#include <cstdlib>

#include "test_hooks.h"

namespace attnscope::gui {

std::optional<Tab> throw_in_view_hook() {
  const char* t = std::getenv("ATTNSCOPE_TEST_THROW_IN_VIEW");
  return t ? parse_tab(t) : std::nullopt;
}

std::optional<int64_t> full_reference_budget_hook() {
  const char* b = std::getenv("ATTNSCOPE_TEST_REFERENCE_BUDGET");
  return b ? std::optional<int64_t>(std::atoll(b)) : std::nullopt;
}

}  // namespace attnscope::gui
