// The python family's parts (family.cpp builds the descriptor from them).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "attnscope/backend.h"

namespace attnscope::python {

// The backend running FUNCTION of FILE (an absolute path) for id python:PATH.py:FUNCTION.
std::unique_ptr<Backend> make_python_backend(const std::string& id, const std::string& file, const std::string& fn);

// What the worker's python.flex_attention builds its mask_mod / score_mod from, beside the built-in
// mask's per-row key ranges: "mask_mod" (the case's mask_mod as PyTorch, expr_to_torch; with
// "prefix_lens" and "doc_starts" for its prefix_len and doc()) and "alibi_slopes" (ALiBi, also a
// score_mod lowered to it as the export script lowers it). Keys absent when the case has none.
nlohmann::json expression_meta(const CaseSpec& c);

}  // namespace attnscope::python
