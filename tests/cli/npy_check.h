// Checks a .npy file as NumPy's loader would: magic, version 1.0 header, a dtype of 4-byte values,
// and exactly the bytes the shape promises after the header.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace attnscope::testing {

// "" when `path` is a loadable float32 / int32 .npy, else what is wrong with it.
inline std::string npy_problem(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  if (bytes.size() < 10 || bytes.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) != 0) return "no .npy 1.0 magic";
  const size_t hlen = static_cast<unsigned char>(bytes[8]) | static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
  if (10 + hlen > bytes.size()) return "header longer than the file";
  const std::string dict = bytes.substr(10, hlen);
  if (dict.find("'descr': '<f4'") == std::string::npos && dict.find("'descr': '<i4'") == std::string::npos)
    return "not float32 / int32: " + dict;
  const size_t open = dict.find("'shape': ("), close = dict.find(')', open);
  if (open == std::string::npos || close == std::string::npos) return "no shape: " + dict;
  uint64_t count = 1;
  const std::string dims = dict.substr(open + 10, close - open - 10);
  for (size_t i = 0; i < dims.size();) {
    const size_t j = dims.find(',', i);
    const std::string d = dims.substr(i, (j == std::string::npos ? dims.size() : j) - i);
    if (d.find_first_not_of(' ') != std::string::npos) count *= std::stoull(d);
    i = j == std::string::npos ? dims.size() : j + 1;
  }
  const uint64_t data = bytes.size() - 10 - hlen;
  if (data != count * 4)
    return "the header promises " + std::to_string(count * 4) + " bytes of data, " + std::to_string(data) + " follow";
  return "";
}

}  // namespace attnscope::testing
