// attnscope's stand-in for the one PyTorch type flash.h names: Flash_fwd_params holds an
// at::PhiloxCudaState for dropout, which attnscope never enables (FLASHATTENTION_DISABLE_DROPOUT).
#pragma once
#include <cstdint>

namespace at {
struct PhiloxCudaState {
  union Payload {
    uint64_t val;
    int64_t* ptr;
  };
  Payload seed_{}, offset_{};
  uint32_t offset_intragraph_ = 0;
  bool captured_ = false;
};
}  // namespace at
