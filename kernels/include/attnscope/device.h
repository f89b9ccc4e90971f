// CUDA devices as the kernels library sees them (empty without CUDA or without a device).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnscope {

struct DeviceProps {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int64_t memory_bytes = 0;
  int64_t free_bytes = 0;
};

// Every visible device; *why says why the list is empty ("not compiled", "no CUDA device: ...").
std::vector<DeviceProps> query_devices(std::string* why);

}  // namespace attnscope
