// Built when no CUDA compiler was found: the GPU backends exist, and report "not compiled".
#include "attnscope/backend.h"

namespace attnscope {
namespace {

class Stub final : public Backend {
 public:
  explicit Stub(std::string id) : id_(std::move(id)) {}
  std::string id() const override { return id_; }
  std::string describe() const override { return "GPU backend (this build has no CUDA)"; }
  std::string check(const CaseSpec&) const override {
    return "not compiled: this build of attnscope has no CUDA (configure with a CUDA toolkit to enable " + id_ + ")";
  }
  Result run(const CaseSpec&, const Plan&, const Workload&, const RunOptions&) override {
    Result r;
    r.backend = id_;
    r.status = Status::kNotCompiled;
    r.message = check(CaseSpec{});
    return r;
  }

 private:
  std::string id_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const std::string& id) { return std::make_unique<Stub>(id); }
bool cuda_compiled() { return false; }

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
