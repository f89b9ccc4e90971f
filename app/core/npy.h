// NumPy .npy writer (float32, C order) for `attnscope-cli run --dump`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnscope {

// Throws std::runtime_error when the file cannot be written.
void write_npy(const std::string& path, const std::vector<float>& data, const std::vector<int64_t>& shape);

}  // namespace attnscope
