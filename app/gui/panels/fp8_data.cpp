#include "fp8_data.h"

#include <thread>

namespace attnscope::gui {

std::shared_ptr<const Fp8Data> Fp8Cache::get(const Session& s) {
  if (!s.spec().fp8_kv()) return nullptr;
  if (!job_ || !(key_ == s.spec())) {
    key_ = s.spec();
    job_ = std::make_shared<Job>();
    // detached: a case edited meanwhile leaves the old job to finish into a Job nobody reads
    std::thread([job = job_, spec = s.spec(), pages = s.plan.pages] {
      Fp8Data d;
      try {
        d = build_fp8_data(spec, pages);
      } catch (const std::exception& e) {  // out of memory: the views say so instead of ending the GUI
        d = Fp8Data{};
        d.why = std::string("the FP8 data could not be built: ") + e.what();
      }
      job->data = std::make_shared<const Fp8Data>(std::move(d));
      job->done.store(true, std::memory_order_release);
    }).detach();
  }
  return job_->done.load(std::memory_order_acquire) ? job_->data : nullptr;
}

Fp8Cache& fp8_cache() {
  static Fp8Cache cache;
  return cache;
}

}  // namespace attnscope::gui
