// Python source text, shared by the repro-script writer (app/core/export_script.cpp), the NumPy
// translation of expressions and the families' own script writers (ScriptPart in backend.h), so
// that every part of a generated script quotes, wraps and comments the same way.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace attnscope {

// x as a Python float expression that reads back the same double: shortest round-trip digits,
// float("inf"), -float("inf"), float("nan").
std::string py_float(double x);

// s as a double-quoted Python string literal of printable ASCII: \\ \" \n \t \r escaped, other
// control characters and non-ASCII code points as \x / \u / \U escapes; a byte that is not UTF-8
// as the four characters \xNN (escaped backslash), so the literal's text shows it.
std::string py_str(const std::string& s);

// s for a comment line: printable ASCII kept, every other character shown as an escape (\x00,
// \u00e9, invalid bytes \xff), so a name cannot end the comment, hold a NUL or make the script
// non-UTF-8.
std::string py_comment_text(const std::string& s);

// s on one line of printable ASCII: line breaks and tabs become spaces, other characters escapes.
std::string py_one_line(std::string s);

// A Python list literal, wrapped before column 100 with continuation lines indented under the '['
// (`indent`: the column of the '[').
std::string py_list(const std::vector<std::string>& items, size_t indent);

// "NAME = [...]" and a newline, the list wrapped under its '['.
std::string py_assign(const std::string& name, const std::vector<std::string>& items);

// `text` as comment lines of at most 100 columns: the first starts with `first`, the others with
// `rest` (both include the "# ").
std::string py_comment(const std::string& first, const std::string& rest, const std::string& text);

// `text` with every $(KEY) replaced by its value.
std::string py_fill(std::string text, const std::vector<std::pair<std::string, std::string>>& subs);

}  // namespace attnscope
