// Factories of the flashinfer.* backends (one file each), used by fi_family.cpp.
#pragma once

#include <memory>
#include <string>

#include "attnscope/backend.h"

namespace attnscope::peers::flashinfer {

std::unique_ptr<Backend> make_prefill_backend();       // flashinfer.prefill      (fi_prefill.cu, FA2 template)
std::unique_ptr<Backend> make_prefill_sm90_backend();  // flashinfer.prefill_sm90 (fi_prefill_sm90.cu, Hopper)
std::unique_ptr<Backend> make_decode_backend();        // flashinfer.decode       (fi_decode.cu)
std::unique_ptr<Backend> make_mla_backend(bool sm90);  // flashinfer.mla / flashinfer.mla_sm90 (fi_mla.cu)

// A refusal found once the run has started (after check()): unsupported, with the reason, and no
// half-written outputs.
inline Result refused(Result& r, const std::string& why) {
  r.status = Status::kUnsupported;
  r.message = why;
  r.o.clear();
  r.lse.clear();
  return r;
}

}  // namespace attnscope::peers::flashinfer
