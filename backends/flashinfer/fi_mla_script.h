// The repro script of flashinfer.mla / flashinfer.mla_sm90: FlashInfer's BatchMLAPagedAttentionWrapper
// on attnscope's latent pool (ckv and kpe as views of each token's [ckv ; kpe] row) and page table.
#pragma once

#include <string>

#include "attnscope/plan.h"

namespace attnscope::peers::flashinfer {

// Why the MLA wrapper cannot run the case ("" = it can): the absorbed form with a 512 + 64 latent,
// bf16 / fp16, causal or not, no other mask, no logit transform.
std::string mla_script_refusal(const CaseSpec& c);

// run_library(torch, flashinfer, q) with the wrapper's plan() and run(); `fa3`: the Hopper kernel.
std::string mla_run_library_fn(const CaseSpec& c, const Plan& p, bool fa3);

}  // namespace attnscope::peers::flashinfer
