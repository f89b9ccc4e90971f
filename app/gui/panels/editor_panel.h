// The case editor sidebar: every field of the case format with fitting widgets, a requests table
// (add, remove, duplicate), a generator for N requests with chosen length distributions, and the
// examples as presets. Edits go into a CaseSpec copy; the app validates and re-runs it.
#pragma once

#include <string>
#include <vector>

#include "attnscope/case_spec.h"
#include "expr_editor.h"

namespace attnscope::gui {

struct GeneratorSettings {
  int count = 8;
  int q_min = 1, q_max = 512;
  int kv_min = 512, kv_max = 8192;
  int kind = 0;  // 0 uniform, 1 all decode (q = 1), 2 all prefill (q = kv)
  uint64_t seed = 1;
};

// N requests from the settings (seeded, reproducible). Used by the editor and tested.
std::vector<RequestSpec> generate_requests(const GeneratorSettings& g);

// The FP8 fields as the editor shows them (docs/case-format.md, FP8): scales as text, "amax" or
// numbers (one, or one per KV head).
struct Fp8EditorState {
  int kv_dtype = 0;  // 0 the case's /dtype, 1 fp8_e4m3, 2 fp8_e5m2
  ScaleGranularity granularity = ScaleGranularity::kTensor;
  std::string k_scales = "amax", v_scales = "amax";
  bool fp8_attention = false;
  std::string q_scale = "amax";
};
Fp8EditorState fp8_editor_state(const CaseSpec& c);
// Writes the state into c. Text that is neither "amax" nor numbers leaves c unchanged and returns the
// error naming the JSON path and the rule; "" otherwise (the case's own rules are validate_case's).
std::string apply_fp8_editor_state(const Fp8EditorState& st, CaseSpec& c);

class EditorPanel {
 public:
  // Draws the sidebar; returns true when `c` changed. `preset` is set to an example path the user picked.
  bool draw(CaseSpec& c, const std::vector<std::string>& examples, std::string* preset);

 private:
  GeneratorSettings gen_;
  ExprEditor expr_;     // mask_mod / score_mod with live validation
  int sel_ = 0;         // request whose advanced fields are shown
  std::string filter_;  // request table filter ("q=1 kv>=4096")
  int sort_col_ = 0;    // 0 index, 1 q_len, 2 kv_len
  bool sort_ascending_ = true;
  std::string fp8_error_;  // scale text that did not parse
  bool draw_fp8(CaseSpec& c);
  bool draw_mla(CaseSpec& c);
  bool draw_requests(CaseSpec& c);
  bool draw_settings(CaseSpec& c);
};

}  // namespace attnscope::gui
