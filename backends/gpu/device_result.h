// A GPU backend's O and LSE kept on its device as float (Result::device), so a comparison of two such
// results runs there (compare_device.h). Copies are bounded in bytes process-wide, the oldest dropped
// first, and all dropped whenever a backend needs the memory (require_device_memory).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "attnscope/backend.h"
#include "cuda_util.h"

namespace attnscope::cuda {

class DeviceResult final : public DeviceResultCopy {
 public:
  DeviceResult(int device, int64_t o_elems, int64_t lse_elems);
  int device() const { return device_; }
  int64_t o_elems() const { return o_elems_; }
  int64_t lse_elems() const { return lse_elems_; }
  int64_t bytes() const { return (o_elems_ + lse_elems_) * 4; }
  // Held while a comparison reads the copy; a drop waits for it.
  std::mutex& mutex() const { return m_; }
  // Null once dropped (read under mutex()).
  float* o() const { return dropped_ ? nullptr : o_.as<float>(); }
  float* lse() const { return dropped_ ? nullptr : lse_.as<float>(); }
  bool dropped() const { return dropped_; }
  void drop() const;  // frees the buffers; the result's host vectors stay

 private:
  int device_;
  int64_t o_elems_, lse_elems_;
  mutable std::mutex m_;
  mutable DeviceBuffer o_, lse_;
  mutable std::atomic<bool> dropped_{false};
};

// Where opt.keep_device_copy and the budget holds it: r's device copy, O converted on the device from
// `o` (rows of d_stored elements of dtype t, the first dv of each kept: as the host download) and the
// LSE uploaded from r->lse, which the caller has made final (LSE conventions are applied on the host).
// Call after r->o and r->lse are final; a copy that cannot be made is simply not kept.
void attach_device_copy(Result* r, const DeviceBuffer& o, DType t, int64_t rows, int d_stored, int dv, const RunOptions& opt);

// The same from r's host O and LSE (uploaded), for a backend that finishes O on the host (cuDNN's
// padding rows).
void attach_host_copy(Result* r, const RunOptions& opt);

// A device copy of r's host O and LSE on the current device, outside the budget (tests).
std::shared_ptr<const DeviceResult> upload_device_copy(const Result& r);

// Frees every copy the budget tracks (a backend needs the memory); true if any was held.
bool drop_device_copies();

}  // namespace attnscope::cuda
