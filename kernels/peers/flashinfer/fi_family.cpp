// PLACEHOLDER (being written): the flashinfer family entry.
#include "attnscope/backend.h"
namespace attnscope {
BackendFamily flashinfer_family() {
  BackendFamily f;
  f.name = "flashinfer";
  f.ids = {"flashinfer.prefill", "flashinfer.prefill_sm90", "flashinfer.decode"};
  f.note = "backends being written";
  f.make = [](const std::string& id) { return make_not_compiled_backend(id, "flashinfer backends being written"); };
  return f;
}
}  // namespace attnscope
