// Text longer than its room is cut with "..." and shown whole in a tooltip, never clipped mid-glyph
// without a sign that something is missing.
#pragma once

#include <imgui.h>

#include <functional>
#include <string>

namespace attnscope::gui {

// The longest prefix of s (whole UTF-8 characters, trailing spaces dropped) that fits max_w with
// "..." after it; s itself when it fits. `width` measures a string.
std::string elide(const std::string& s, float max_w, const std::function<float(const std::string&)>& width);

// Draws s elided to max_w (default: the room left on the line), the whole text as a tooltip when cut.
// Returns whether it was cut.
bool text_elided(const std::string& s, float max_w = -1, const ImVec4* colour = nullptr);

}  // namespace attnscope::gui
