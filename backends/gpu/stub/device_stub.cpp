// Built when no CUDA compiler was found: the device queries the app makes answer "no CUDA here".

#include "attnscope/device.h"

namespace attnscope {
std::vector<DeviceProps> query_devices(std::string* why) {
  if (why) *why = "this build has no CUDA backends (no CUDA compiler was found at configure time)";
  return {};
}
bool set_current_device(int, std::string* why) {
  if (why) *why = "this build has no CUDA backends";
  return false;
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

#include "attnscope/device_compare.h"

namespace attnscope {
// Without CUDA no result has a device copy: every comparison runs on the host.
std::optional<DiffPass> device_diff_pass(const CaseSpec&, const Result&, const Result&, double, double) { return std::nullopt; }
DiffPassFn diff_pass_where_the_data_is(const CaseSpec&) { return nullptr; }
namespace {
int64_t g_budget = int64_t{1} << 30;
}
void set_device_copy_budget(int64_t bytes) { g_budget = bytes; }
int64_t device_copy_budget() { return g_budget; }
int64_t device_copy_bytes() { return 0; }
}  // namespace attnscope
