// The flash_attn backends (fa_backends.cu), built only with the FA2 kernel units.
#pragma once
#include <memory>

#include "attnscope/backend.h"
#include "fa_conventions.h"

namespace attnscope::peers::flash_attn {
std::unique_ptr<Backend> make_backend(Api api);
}  // namespace attnscope::peers::flash_attn
