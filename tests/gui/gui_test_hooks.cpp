// attnscope-faults' test seams (app/gui/test_hooks.h): ATTNSCOPE_TEST_THROW_IN_VIEW=<tab id> makes
// that view throw while drawing. The product GUI never reads the variable.
#include <cstdlib>

#include "test_hooks.h"

namespace attnscope::gui {

std::optional<Tab> throw_in_view_hook() {
  const char* t = std::getenv("ATTNSCOPE_TEST_THROW_IN_VIEW");
  return t ? parse_tab(t) : std::nullopt;
}

}  // namespace attnscope::gui
