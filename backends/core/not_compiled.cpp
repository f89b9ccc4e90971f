// The backend a family absent from this build hands out: it only says why it is not here.
#include "attnscope/backend.h"

namespace attnscope {
namespace {

class NotCompiled final : public Backend {
 public:
  NotCompiled(std::string id, std::string why) : id_(std::move(id)), why_("not compiled: " + std::move(why)) {}
  std::string id() const override { return id_; }
  std::string describe() const override { return why_; }
  std::string check(const CaseSpec&) const override { return why_; }
  Result run(const CaseSpec&, const Plan&, const Workload&, const RunOptions&) override {
    Result r;
    r.backend = id_;
    r.status = Status::kNotCompiled;
    r.message = why_;
    return r;
  }

 private:
  std::string id_, why_;
};

}  // namespace

std::unique_ptr<Backend> make_not_compiled_backend(const std::string& id, const std::string& why) {
  return std::make_unique<NotCompiled>(id, why);
}

}  // namespace attnscope
