// The text form of a softmax step-through (attnscope-cli explain).
#pragma once

#include <ostream>

#include "attnscope/softmax_trace.h"

namespace attnscope::cli {

void print_trace(std::ostream& o, const SoftmaxTrace& t);

}  // namespace attnscope::cli
