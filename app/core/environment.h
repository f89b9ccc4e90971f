// Where a result was produced: attnscope version, build, host, devices.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace attnscope {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  double memory_gib = 0;
};

struct Environment {
  std::string version;
  std::string build;  // compiler, build type, CUDA yes/no
  std::string host;
  std::string cpu;
  int cpu_threads = 0;
  bool cuda_compiled = false;
  std::vector<DeviceInfo> devices;
  std::string device_error;  // why no device is listed, if none
  // each compiled real-library family's note (its versions and, for cuDNN, the loaded file), and
  // every "built with X, running Y" where the library loaded is not the one built against
  std::vector<std::pair<std::string, std::string>> libraries;
  std::vector<std::string> library_mismatches;
};

// attnscope's version: CMake's project version ("0.1.0"), what --version prints.
const char* attnscope_version();

Environment capture_environment();
nlohmann::ordered_json environment_to_json(const Environment& e);

// Devices visible to the CUDA runtime (empty and a reason in *why without CUDA or a device).
std::vector<DeviceInfo> list_devices(std::string* why);

// The libraries and mismatches of Environment, from the registry's families.
void list_libraries(Environment* e);

}  // namespace attnscope
