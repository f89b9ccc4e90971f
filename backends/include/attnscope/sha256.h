// SHA-256 of a file, as lowercase hex: repros record the user code a backend ran (registry.h).
#pragma once

#include <string>

namespace attnscope {

// The digest of `data`.
std::string sha256_hex(const std::string& data);
// The digest of the file at `path`, or "" with *why set ("no such file", ...).
std::string file_sha256(const std::string& path, std::string* why);

}  // namespace attnscope
