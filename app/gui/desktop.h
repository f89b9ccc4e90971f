// The habits of a desktop tool, as plain testable pieces: undo / redo of case edits, the settings
// restored at the next start (window size, sidebar width, last case, palette), the keyboard
// shortcuts the F1 overlay lists, and the request table's sort and filter.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "case_json.h"

namespace attnscope::gui {

// Case edits in order. push() records a new current case (dropping what redo would have given);
// undo() / redo() move through them. Bounded: the oldest entries go first.
class EditHistory {
 public:
  explicit EditHistory(size_t capacity = 200) : cap_(capacity) {}
  void reset(const CaseFile& f);  // a new history starting at f (a file opened)
  void push(const CaseFile& f);
  bool can_undo() const { return pos_ > 0; }
  bool can_redo() const { return pos_ + 1 < v_.size(); }
  const CaseFile& undo();  // requires can_undo()
  const CaseFile& redo();  // requires can_redo()
  size_t size() const { return v_.size(); }

 private:
  std::vector<CaseFile> v_;
  size_t pos_ = 0;
  size_t cap_;
};

struct Settings {
  int width = 1600, height = 1000;
  float sidebar = 420;    // case editor width in pixels
  std::string last_case;  // absolute path of the last case opened or saved
  int palette = 0;        // 0 default, 1 colour-blind safe (Okabe-Ito)
};

// ~/.config/attnscope/settings.json ("" without HOME).
std::string settings_path();
// Missing or unreadable file: the defaults; unknown keys are ignored, bad values keep the default.
Settings load_settings(const std::string& path);
void save_settings(const std::string& path, const Settings& s);  // best effort, never throws

// (keys, what they do), in the order the F1 overlay lists them.
std::vector<std::pair<std::string, std::string>> shortcut_list();

// The request table's rows: indices of the requests that pass `filter`, sorted by column `col`
// (0 index, 1 q_len, 2 kv_len) ascending or not (ties by index). Filter: space-separated terms
// "q<op>N" / "kv<op>N" (op one of < <= > >= = !=) that must all hold; an unparsable term matches
// nothing and is named in *error.
std::vector<int> request_rows(const CaseSpec& c, int col, bool ascending, const std::string& filter, std::string* error);

// This process's peak resident memory in MiB (Linux /proc/self/status VmHWM; -1 elsewhere), printed
// with a screenshot's frame times.
double peak_resident_mib();

}  // namespace attnscope::gui
