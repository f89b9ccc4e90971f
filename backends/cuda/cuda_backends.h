// Factories of the cuda family's backends (their device check is the GPU runtime's, device_check.h).
#pragma once

#include <memory>
#include <string>

#include "attnscope/backend.h"

namespace attnscope::cuda {

std::unique_ptr<Backend> make_naive_backend(const std::string& id);  // cuda.reference, cuda.naive
std::unique_ptr<Backend> make_flash_backend(bool padded);            // cuda.flash, cuda.flash_padded

}  // namespace attnscope::cuda
