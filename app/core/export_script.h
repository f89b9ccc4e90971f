// `attnscope-cli run CASE --export-script DIR`: a repro a maintainer runs without attnscope.
// DIR/repro.py is a short Python program, generated with the case's numbers filled in, that loads
// the inputs attnscope used (.npy), runs the library's own public API on them, recomputes an fp64
// reference, and prints attnscope's statistics (max abs, relative L2, the 2x rule against a
// same-dtype naive computation) against the reference and against attnscope's recorded output of
// the same backend. Exit codes: 0 match, 1 mismatch, 2 cannot run here. The library call is the
// target's family's own writer where it has one (BackendFamily::script_part: FlashInfer's paged
// wrappers), else PyTorch's scaled_dot_product_attention (pinned to the SDPA backend the
// descriptor names, BackendInfo::script_sdpa_backend) or flex_attention, written here.
// `repro.py --reference-only` needs numpy only: the script's fp64 reference against attnscope's
// recorded reference backend (Role::kReference; CI runs it). An FP8 case's script (export_fp8.h)
// rebuilds the FP8 cache with PyTorch's FP8 dtypes and separates the quantisation error from the
// kernel error; its --reference-only checks both of attnscope's ideals.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "session.h"

namespace attnscope {

// How a script reproduces its target backend.
enum class ScriptApi {
  kFamily,         // the target's family's own writer (BackendFamily::script_part)
  kSdpa,           // torch.nn.functional.scaled_dot_product_attention, one request at a time
  kFlexAttention,  // torch flex_attention: soft-cap and ALiBi need a score_mod, which SDPA lacks
  kSinksTorch,     // attention sinks: PyTorch eager attention with the sink column (export_shapes.h)
};

// The backend a script reproduces: `requested` (--script-backend) when given, which must be one of
// `backends` (the backends of the run); else the first whose family has a script writer of its
// own; else the first that is not a baseline (a backend with the reference or low-precision role);
// else the first. Throws std::invalid_argument with a one-line message naming --script-backend.
std::string script_target(const std::vector<std::string>& backends, const std::optional<std::string>& requested);

ScriptApi script_api(const CaseSpec& c, const std::string& target);

// The case as a script writes it: a mask_mod stays (allowed() evaluates it in numpy); a score_mod
// of the soft-cap / ALiBi forms (lower_score_mod) becomes those parameters, which every library
// path passes natively; any other score_mod throws std::invalid_argument with the reason.
CaseSpec script_case(const CaseSpec& c);

// The text of repro.py for the session's case and `target` (tests read it).
std::string make_repro_script(const Session& s, const std::string& target);

// Writes DIR/repro.py; q.npy, k.npy, v.npy; o_<backend>.npy and lse_<backend>.npy of every backend
// that ran; the arrays the target's family writer needs (ScriptPart::write_arrays; FlashInfer's:
// attnscope's paged pool k_cache.npy / v_cache.npy, NaN poison included, and its int32 CSR page
// table qo_indptr.npy, kv_indptr.npy, kv_indices.npy, kv_last_page_len.npy); and case.json (the
// repro case, replayable by attnscope-cli run); for an FP8 case the scales, the original values and
// the two ideals (write_fp8_npys). Creates DIR. Returns the file count. Throws
// std::runtime_error when DIR cannot be written.
int export_script(const Session& s, const std::string& dir, const std::string& target);

}  // namespace attnscope
