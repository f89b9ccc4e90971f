// Factories of the flashinfer.* backends (one file each), used by fi_family.cpp.
#pragma once

#include <memory>

#include "attnscope/backend.h"

namespace attnscope::peers::flashinfer {

std::unique_ptr<Backend> make_prefill_backend();       // flashinfer.prefill      (fi_prefill.cu, FA2 template)
std::unique_ptr<Backend> make_prefill_sm90_backend();  // flashinfer.prefill_sm90 (fi_prefill_sm90.cu, Hopper)
std::unique_ptr<Backend> make_decode_backend();        // flashinfer.decode       (fi_decode.cu)

}  // namespace attnscope::peers::flashinfer
