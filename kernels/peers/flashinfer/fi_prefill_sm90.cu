// PLACEHOLDER (being written): flashinfer.prefill_sm90.
#include "fi_backends.h"
namespace attnscope::peers::flashinfer {
std::unique_ptr<Backend> make_prefill_sm90_backend() {
  return make_not_compiled_backend("flashinfer.prefill_sm90", "flashinfer.prefill_sm90 is being written");
}
}  // namespace attnscope::peers::flashinfer
