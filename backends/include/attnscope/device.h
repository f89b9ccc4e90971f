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

namespace attnscope {

struct CaseSpec;
struct Plan;

// Generates the case's inputs on device 0 and copies them back as floats (Q, the paged K and V
// pools), for the test that device and host generators agree bit for bit. False and *why without
// CUDA or a device.
bool device_generated_inputs(const CaseSpec& c, const Plan& p, std::vector<float>* q, std::vector<float>* k,
                             std::vector<float>* v, std::string* why);

// Device-to-device copy bandwidth of device 0 in GB/s (bytes read + written), median of a few
// 1 GiB copies; 0 and *why without CUDA or a device.
double measure_copy_bandwidth_gbps(std::string* why);

}  // namespace attnscope
