// The repro script's parts for issue 28's shapes (docs/conventions.md sections 12 and 13): speculative-
// decoding trees in allowed(), attention sinks in the references and in a PyTorch eager run, and MLA's
// form in the header. export_script.cpp places them; each returns "" when the case has no such shape.
#pragma once

#include <string>

#include "attnscope/case_spec.h"

namespace attnscope {

std::string shapes_constants(const CaseSpec& c);   // TREE_PARENTS, SINKS, MLA's dims
std::string tree_mask_line(const CaseSpec& c);     // the line allowed() ANDs in
std::string tree_fn(const CaseSpec& c);            // def tree_visible(r, q_abs, k)
std::string sparse_fn(const CaseSpec& c);          // def sparse_kept(r, q_abs, k): /sparse's selection
std::string sparse_files_note(const CaseSpec& c);  // sparse_indices.npy, for the header's list
std::string shapes_case_text(const CaseSpec& c);   // ", sinks, trees, MLA absorbed ..." for the header's case line

// run_library() of a sinks case: PyTorch eager attention with the sink column, upcast to float32 (no
// library kernel takes sinks the way attnscope's backends do), returning O and LSE.
std::string sinks_run_fn(const CaseSpec& c);

}  // namespace attnscope
