// Partials of a partitioned run held on one GPU (attnscope/merge.h's DevicePartials): P O buffers of
// [rows, dv] floats and P LSE buffers of [rows] floats (natural log, as Result::lse), in merge order.
// A collective gathers into one (nccl_gather.h); a device merger reads its pointers (cuda.merge).
#pragma once

#include <vector>

#include "attnscope/merge.h"
#include "cuda_util.h"
#include "scoped_device.h"

namespace attnscope::cuda {

class GpuPartials final : public DevicePartials {
 public:
  GpuPartials(int device, int parts, int64_t rows, int dv) : device_(device), rows_(rows), dv_(dv) {
    ScopedDevice on(device);
    for (int k = 0; k < parts; ++k) {
      o_.emplace_back(static_cast<size_t>(rows) * dv * 4);
      lse_.emplace_back(static_cast<size_t>(rows) * 4);
    }
  }
  ~GpuPartials() override {
    try {
      ScopedDevice on(device_);  // the buffers are freed on their own device
      o_.clear();
      lse_.clear();
    } catch (const CudaError&) {
    }
  }
  int device() const override { return device_; }
  int parts() const { return static_cast<int>(o_.size()); }
  int64_t rows() const { return rows_; }
  int dv() const { return dv_; }
  float* o(int k) const { return o_[k].as<float>(); }
  float* lse(int k) const { return lse_[k].as<float>(); }
  std::vector<const float*> o_ptrs() const {
    std::vector<const float*> v;
    for (const auto& b : o_) v.push_back(b.as<float>());
    return v;
  }
  std::vector<const float*> lse_ptrs() const {
    std::vector<const float*> v;
    for (const auto& b : lse_) v.push_back(b.as<float>());
    return v;
  }

 private:
  int device_;
  int64_t rows_;
  int dv_;
  std::vector<DeviceBuffer> o_, lse_;
};

}  // namespace attnscope::cuda
