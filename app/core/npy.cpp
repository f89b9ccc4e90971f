#include "npy.h"

#include <fstream>
#include <stdexcept>

namespace attnscope {

void write_npy(const std::string& path, const std::vector<float>& data, const std::vector<int64_t>& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";  // a Python 1-tuple
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + length (2) + header + '\n' must be a multiple of 64
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write \"" + path + "\"");
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.put(static_cast<char>(len & 0xff));
  out.put(static_cast<char>(len >> 8));
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!out) throw std::runtime_error("writing \"" + path + "\" failed");
}

}  // namespace attnscope
