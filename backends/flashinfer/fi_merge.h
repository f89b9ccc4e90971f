// FlashInfer's merges of partial (O, LSE) rows as mergers (attnscope/merge.h): flashinfer.merge_state,
// flashinfer.merge_states, flashinfer.merge_states_varlen (fi_merge.cu, cascade.cuh of the pinned wheel).
#pragma once

#include <vector>

#include "attnscope/merge.h"

namespace attnscope::peers::flashinfer {

std::vector<Merger> fi_mergers();

}  // namespace attnscope::peers::flashinfer
