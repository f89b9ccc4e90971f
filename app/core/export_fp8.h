// The FP8 part of the repro script (export_script.h; docs/conventions.md section 10). For a case
// whose KV cache is FP8 the script rebuilds the cache as PyTorch FP8 tensors from the stored values
// attnscope exported, computes both ideals in fp64 (over stored * scale and over the values before
// quantisation), prints the quantisation error (FP8's) apart from the kernel error (the library
// against the dequantised ideal), and checks the kernel error with the case's rule.
#pragma once

#include <string>

#include "attnscope/backend.h"
#include "session.h"

namespace attnscope {

// ", KV fp8_e4m3 (tensor scales)" (and ", FP8 attention (Q fp8_e4m3)") for the header's case line;
// "" without FP8.
std::string fp8_case_text(const CaseSpec& c);

// The FP8 files, for the header's file list ("" without FP8).
std::string fp8_files_note(const CaseSpec& c);

// The FP8 constants (KV_FP8, TORCH_FP8, SCALE_GRANULARITY, FP8_ATTENTION); "" without FP8.
std::string fp8_constants(const CaseSpec& c);

// scale_of(), dequantised(), originals(), fp8_summary(), check_ideals() and, when the script runs
// a library (`runs`), dequantised_lowp(), which rebuilds the FP8 tensors in PyTorch.
std::string fp8_fns(const CaseSpec& c, bool runs);

// The body of main() after its argument parsing for an FP8 case. `gpu` is the library part (the
// refusal or the call), written by the caller; `family`: run_library takes the family's module and
// the stored Q (the family reads the FP8 pool itself), else the three dequantised arrays.
std::string fp8_main_body(const CaseSpec& c, const ScriptPart& part, bool family, bool runs);

// Writes the FP8 files: k_scale.npy / v_scale.npy (tensor [1], head [kv_heads], token [total_kv,
// kv_heads] in logical order), k_orig.npy / v_orig.npy [total_kv, kv_heads, d] (the values before
// quantisation), q_orig.npy and q_scale.npy [1] with /fp8_attention, and the session's two ideals
// o_ / lse_ideal_dequantised.npy and o_ / lse_ideal_original.npy where they ran. Returns the file
// count (0 without FP8).
int write_fp8_npys(const Session& s, const Workload& w, const std::string& dir);

}  // namespace attnscope
