// Seams through which the tests inject faults into the GUI. The product links test_hooks_none.cpp (no
// fault, no test switch read); tests/gui/gui_test_hooks.cpp defines them for attnscope-faults, a copy
// of the GUI built only with the tests.
#pragma once

#include <cstdint>
#include <optional>

#include "gui_state.h"

namespace attnscope::gui {

// The view that throws while drawing (the tests of the recovery), or none.
std::optional<Tab> throw_in_view_hook();
// The live run's budget for a full reference (live_session.h, kFullReferenceBudget) the tests set low, so
// a small case shows its sampled pass first; none: the product's.
std::optional<int64_t> full_reference_budget_hook();

}  // namespace attnscope::gui
