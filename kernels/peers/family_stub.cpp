// Built for each real-library family that CMake did not find: its backends exist in the registry
// and report "not compiled" with the reason CMake gave (ATTNSCOPE_<FAMILY>_WHY).
#include "attnscope/backend.h"

namespace attnscope {

#if defined(ATTNSCOPE_STUB_FLASHINFER)
BackendFamily flashinfer_family() {
  BackendFamily f;
  f.name = "flashinfer";
  f.ids = {"flashinfer.prefill", "flashinfer.prefill_sm90", "flashinfer.decode"};
  f.note = ATTNSCOPE_FLASHINFER_WHY;
  f.make = [](const std::string& id) { return make_not_compiled_backend(id, "flashinfer family: " ATTNSCOPE_FLASHINFER_WHY); };
  return f;
}
#endif

#if defined(ATTNSCOPE_STUB_CUDNN)
BackendFamily cudnn_family() {
  BackendFamily f;
  f.name = "cudnn";
  f.ids = {"cudnn.sdpa"};
  f.note = ATTNSCOPE_CUDNN_WHY;
  f.make = [](const std::string& id) { return make_not_compiled_backend(id, "cudnn family: " ATTNSCOPE_CUDNN_WHY); };
  return f;
}
#endif

}  // namespace attnscope
