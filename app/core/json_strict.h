// JSON parsing that refuses what nlohmann::json accepts silently: a duplicate key in an object (the
// last value would win, so the file means two things to two readers).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace attnscope {

// Parses `text`; throws CaseError("/path/to/object", "duplicate key \"k\" ...") on a duplicate key
// and lets nlohmann::json::parse_error through for a syntax error (the caller names line and column).
nlohmann::json parse_json_strict(const std::string& text);

// What a value is, in the words the case errors use: "integer", "number", "string", "object", ...
std::string json_kind(const nlohmann::json& v);

}  // namespace attnscope
