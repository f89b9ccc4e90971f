// Factories of the CUDA backends, and the device check they share.
#pragma once

#include <memory>
#include <string>

#include "attnscope/backend.h"

namespace attnscope::cuda {

// Empty when a CUDA device is usable, else why not ("no CUDA device: ...").
std::string device_check();

std::unique_ptr<Backend> make_naive_backend(const std::string& id);  // cuda.reference, cuda.naive
std::unique_ptr<Backend> make_flash_backend(bool padded);            // cuda.flash, cuda.flash_padded

}  // namespace attnscope::cuda
