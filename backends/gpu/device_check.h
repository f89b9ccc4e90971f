// The device check every GPU family runs before its own (device_info.cu).
#pragma once

#include <string>

namespace attnscope::cuda {

// Empty when a CUDA device is usable (compute capability 8.0 or newer), else why not ("no CUDA
// device: ...").
std::string device_check();

}  // namespace attnscope::cuda
