// The flashinfer family entry: its ids, the pinned FlashInfer version, the factories.
#include "attnscope/backend.h"
#include "fi_backends.h"

namespace attnscope {

BackendFamily flashinfer_family() {
  BackendFamily f;
  f.name = "flashinfer";
  f.ids = {"flashinfer.prefill", "flashinfer.prefill_sm90", "flashinfer.decode"};
  f.compiled = true;
  f.note = ATTNSCOPE_FLASHINFER_PIN;  // the pinned flashinfer-python wheel whose headers were compiled
  f.make = [](const std::string& id) -> std::unique_ptr<Backend> {
    if (id == "flashinfer.prefill") return peers::flashinfer::make_prefill_backend();
    if (id == "flashinfer.prefill_sm90") return peers::flashinfer::make_prefill_sm90_backend();
    return peers::flashinfer::make_decode_backend();
  };
  return f;
}

}  // namespace attnscope
