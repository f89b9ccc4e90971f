// The GUI's permission for python:PATH.py:FUNCTION backends (docs/python-backends.md, "Safety"): a
// case can come from anyone, so before a run that would execute a file's code the window asks once per
// file, showing its path; the run starts after the answer. Allowed files go to the registry's policy;
// refused ones are not asked about again, and their backends report the refusal. Also the setting of
// the per-call timeout.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace attnscope::gui {

class PythonConsent {
 public:
  // True while some backend of `ids` runs a file neither allowed nor refused: the caller holds the run
  // back and the modal asks (starting to ask when it was not). `never_ask` (headless screenshots):
  // such files count as refused, so nothing waits on a dialog nobody sees.
  bool holds_run(const std::vector<std::string>& ids, bool never_ask = false);
  // The files being asked about (shown in the modal).
  const std::vector<std::string>& asking() const { return asking_; }
  // The user's answer for every file being asked about.
  void answer(bool allow);
  // The modal (call once per frame, inside the frame's dialogs).
  void draw();
  // The timeout setting as a menu entry (seconds per call, the registry's user_code_timeout).
  void draw_timeout_setting();

 private:
  std::vector<std::string> asking_;
  std::set<std::string> refused_;
};

}  // namespace attnscope::gui
