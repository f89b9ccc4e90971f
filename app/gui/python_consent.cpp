#include "python_consent.h"

#include <imgui.h>

#include <algorithm>

#include "attnscope/registry.h"

namespace attnscope::gui {

bool PythonConsent::holds_run(const std::vector<std::string>& ids, bool never_ask) {
  std::vector<std::string> files;
  for (const auto& id : user_code_needing_permission(ids)) {
    const std::string f = user_code_file(id);
    if (!refused_.count(f) && std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  }
  if (never_ask) {
    refused_.insert(files.begin(), files.end());
    return false;
  }
  if (asking_.empty()) asking_ = files;
  return !files.empty();
}

void PythonConsent::answer(bool allow) {
  for (const auto& f : asking_) {
    if (allow)
      allow_user_code_file(f);
    else
      refused_.insert(f);
  }
  asking_.clear();
}

void PythonConsent::draw() {
  if (asking_.empty()) return;
  const char* title = "Run Python code from the case?";
  if (!ImGui::IsPopupOpen(title)) ImGui::OpenPopup(title);
  ImGui::SetNextWindowSize(ImVec2(720, 0));
  if (!ImGui::BeginPopupModal(title, nullptr, ImGuiWindowFlags_AlwaysAutoResize)) return;
  ImGui::TextWrapped(
      "This case names python: backends. Running them executes the code in these files with your permissions. "
      "A case can come from anyone (a bug report, a download): run them only if you trust the files.");
  ImGui::Separator();
  for (const auto& f : asking_) ImGui::BulletText("%s", f.c_str());
  ImGui::Separator();
  if (ImGui::Button("Run this code")) {
    answer(true);
    ImGui::CloseCurrentPopup();
  }
  ImGui::SameLine();
  if (ImGui::Button("Do not run it")) {
    answer(false);
    ImGui::CloseCurrentPopup();
  }
  ImGui::EndPopup();
}

void PythonConsent::draw_timeout_setting() {
  double s = user_code_timeout();
  ImGui::SetNextItemWidth(120);
  if (ImGui::InputDouble("Python call timeout (s)", &s, 1, 10, "%.0f") && s > 0 && s <= 86400) set_user_code_timeout(s);
}

}  // namespace attnscope::gui
