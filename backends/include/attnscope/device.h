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

// Makes `index` the calling thread's current device (the GPU its next backend run uses): the ranks of a
// partitioned case each on their own GPU. False and *why without CUDA or such a device.
bool set_current_device(int index, std::string* why);

// Why the CUDA runtime sees no device, from cudaGetDeviceCount's error (code and text) and
// cudaDriverGetVersion's answer (0: no driver loaded). Without a driver the runtime says "driver
// version is insufficient", which reads as "upgrade your driver": there is nothing to upgrade, so
// it says no GPU or driver; a driver that is there but too old gets both CUDA versions. Always
// starts "no CUDA device" (status_of_reason maps that to Status::kNoDevice).
inline std::string no_device_reason(int cuda_error, const std::string& error_text, int driver_version, int runtime_version) {
  constexpr int kInsufficientDriver = 35, kNoDevice = 100;  // cudaErrorInsufficientDriver, cudaErrorNoDevice
  auto cuda = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  if (cuda_error == kNoDevice || (cuda_error == kInsufficientDriver && driver_version <= 0))
    return "no CUDA device: no NVIDIA GPU or driver found";
  if (cuda_error == kInsufficientDriver)
    return "no CUDA device: the NVIDIA driver supports CUDA " + cuda(driver_version) + ", this build needs CUDA " +
           cuda(runtime_version) + " or newer (" + error_text + ")";
  return "no CUDA device: " + error_text;
}

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
