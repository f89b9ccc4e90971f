// Built when no CUDA compiler was found: the GPU backends exist, and report "not compiled".
#include "attnscope/backend.h"

namespace attnscope {

BackendFamily cuda_family() {
  BackendFamily f;
  f.name = "cuda";
  f.ids = {"cuda.reference", "cuda.naive", "cuda.flash", "cuda.flash_padded"};
  f.compiled = false;
  f.note = "this build of attnscope has no CUDA (configure with a CUDA toolkit to enable it)";
  f.make = [](const std::string& id) { return make_not_compiled_backend(id, cuda_family().note); };
  return f;
}

}  // namespace attnscope

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
