// Built when no CUDA compiler was found: the device queries the app makes answer "no CUDA here".

#include "attnscope/device.h"

namespace attnscope {
std::vector<DeviceProps> query_devices(std::string* why) {
  if (why) *why = "this build has no CUDA backends (no CUDA compiler was found at configure time)";
  return {};
}
}  // namespace attnscope

namespace attnscope {
bool device_generated_inputs(const CaseSpec&, const Plan&, std::vector<float>*, std::vector<float>*, std::vector<float>*,
                             std::string* why) {
  if (why) *why = "this build has no CUDA backends";
  return false;
}
double measure_copy_bandwidth_gbps(std::string* why) {
  if (why) *why = "this build has no CUDA backends";
  return 0;
}
}  // namespace attnscope
