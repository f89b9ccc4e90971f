// The JSON case format "attnscope/case@1" (docs/case-format.md): strict reading (every unknown key,
// wrong type or out-of-range value is a CaseError naming the JSON path) and canonical writing.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "attnscope/case_spec.h"

namespace attnscope {

constexpr const char* kCaseSchema = "attnscope/case@1";

// A case file: the spec plus what an exported repro carries beside it.
struct CaseFile {
  CaseSpec spec;
  nlohmann::json environment;  // object or null: where the repro was recorded
  nlohmann::json recorded;     // object or null: digests and verdicts recorded by `run --export`
};

CaseFile parse_case(const nlohmann::json& j);       // throws CaseError
CaseFile parse_case_text(const std::string& text);  // syntax errors name line and column
// I/O errors name the file; only regular files of at most kMaxCaseBytes are read.
CaseFile read_case_file(const std::string& path);
constexpr size_t kMaxCaseBytes = size_t{64} << 20;  // ~2.4M requests' worth of text: far past the request limit

nlohmann::ordered_json case_to_json(const CaseSpec& c);
nlohmann::ordered_json case_file_to_json(const CaseFile& f);
std::string case_to_text(const CaseSpec& c);                             // pretty, 2-space indent, trailing newline
void write_text_file(const std::string& path, const std::string& text);  // throws std::runtime_error

}  // namespace attnscope
