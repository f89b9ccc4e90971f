// The flashinfer family's repro-script writer (BackendFamily::script_part): FlashInfer's paged
// wrappers on attnscope's pool and page table, for a flashinfer.* backend.
#pragma once

#include <string>

#include "attnscope/backend.h"

namespace attnscope::peers::flashinfer {

ScriptPart script_part(const CaseSpec& c, const Plan& p, const std::string& id);

}  // namespace attnscope::peers::flashinfer
