// Files a user names (a case, the settings' last case, a saved sweep, a screenshot path) are not
// trusted: only regular files are read (a FIFO would block open(), /dev/zero never ends), up to a
// stated size, and every error names the file and what is wrong with it.
#pragma once

#include <cstddef>
#include <string>

#include "case_json.h"
#include "sweep.h"

namespace attnscope::gui {

constexpr size_t kMaxReportBytes = size_t{1} << 30;  // a saved sweep (attnscope-cli sweep --json)
constexpr int kMaxWindowSide = 8192;                 // --size: the screenshot buffer stays under 256 MiB

// Reads `path` into *text if it is a regular file of at most max_bytes; else returns why (without
// the path: "is a directory", "is not a regular file (a FIFO)", "is 80000000 bytes, more than ...").
// Never blocks on a FIFO or a device.
std::string read_regular_file(const std::string& path, size_t max_bytes, std::string* text);

// A case file: read_regular_file, then parse_case_text. Throws std::runtime_error
// ("PATH: is a directory") for the file, CaseError for its content.
CaseFile load_case_file(const std::string& path);

// A saved sweep, parsed point by point (the JSON document is never held whole, so an 80 MB report
// takes a fraction of the memory a JSON tree would). Throws std::invalid_argument
// "PATH: <what is wrong>": empty file, not JSON (line, column), not a sweep report, a point's field.
SweepReport load_sweep_report(const std::string& path);

// --size WxH: both at least 320x240 and at most kMaxWindowSide; else returns why.
std::string parse_window_size(const std::string& s, int* w, int* h);

// --screenshot PATH: whether a PNG can be written there, checked before any window opens (a
// directory, /proc, a missing folder); "" when it can. Leaves nothing behind.
std::string check_screenshot_path(const std::string& path);

}  // namespace attnscope::gui
