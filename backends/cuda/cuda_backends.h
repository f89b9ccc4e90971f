// Factories of the cuda family's backends (their device check is the GPU runtime's, device_check.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/backend.h"
#include "attnscope/fp8.h"

namespace attnscope::cuda {

std::unique_ptr<Backend> make_naive_backend(const std::string& id);  // cuda.reference, cuda.naive
std::unique_ptr<Backend> make_flash_backend(bool padded);            // cuda.flash, cuda.flash_padded

// The conversion cuda.flash's FP8 register path applies to its K / V bytes (fp8x4_split), run on the
// device over all 256 codes of format f: element i is code i as the dtype's bits (fp16 or bf16), for the
// GPU test that checks it against the format's definition.
std::vector<uint16_t> fp8_register_conversion_of_every_code(Fp8Format f, DType dt);

}  // namespace attnscope::cuda
