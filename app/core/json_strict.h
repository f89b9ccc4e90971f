// JSON parsing that refuses what nlohmann::json accepts silently: a duplicate key in an object (the
// last value would win, so the file means two things to two readers), and inputs past the format's
// limits, which are refused as soon as the limit is passed rather than after reading everything.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace attnscope {

// Deeper than any case needs; also keeps every recursive walk of a parsed value (dump, copy) shallow.
constexpr size_t kMaxJsonDepth = 64;

struct JsonArrayLimit {
  std::string path;  // JSON pointer; a "*" segment matches any key or index ("/requests/*/doc_starts")
  size_t max = 0;    // items allowed
  std::string what;  // plural noun for the message: "requests"
};

// Parses `text` in time linear in its size; throws CaseError naming the JSON path on a duplicate
// key, on nesting deeper than kMaxJsonDepth, and on the first item past an array limit (the rest of
// the input is not read). Syntax errors pass through as nlohmann::json::parse_error (the caller names
// line and column).
nlohmann::json parse_json_strict(const std::string& text, const std::vector<JsonArrayLimit>& limits = {});

// What a value is, in the words the case errors use: "integer", "number", "string", "object", ...
std::string json_kind(const nlohmann::json& v);

}  // namespace attnscope
