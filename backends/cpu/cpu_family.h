// Factories of the cpu family's backends (tests construct them directly).
#pragma once

#include <memory>

#include "attnscope/backend.h"

namespace attnscope {

std::unique_ptr<Backend> make_cpu_reference();
std::unique_ptr<Backend> make_cpu_lowp();
std::unique_ptr<Backend> make_cpu_tiled();

}  // namespace attnscope
