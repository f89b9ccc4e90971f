// `run --export-script DIR` on a /parallel case (docs/partitions.md): the merge a maintainer reruns
// without attnscope. DIR/merge.py loads the target backend's partials as its library returned them
// (LSE in its own base), merges them in both bases with NumPy (attnscope's fold), with FlashInfer's
// merge_state / merge_states and a PyTorch merge where those import, and prints each against
// attnscope's merged output and the reference's answer: which base reproduces attnscope's merge and
// which one the reference agrees with. Exit codes: 0 attnscope's merge reproduced, 1 not, 2 cannot run.
#pragma once

#include <string>

#include "session.h"

namespace attnscope {

// The text of merge.py for the session's `target` (its result carries Result::partition).
std::string make_merge_script(const Session& s, const std::string& target);
// Writes DIR/merge.py, part<k>_o.npy / part<k>_lse.npy (k in merge order), o_merged.npy / lse_merged.npy
// (attnscope's merge) and o_ref.npy (the reference's answer). Returns the file count; throws
// std::runtime_error naming what is missing (no partitioned result of `target`, no reference).
int export_merge_script(const Session& s, const std::string& dir, const std::string& target);

}  // namespace attnscope
