// What the user has selected across panels. Panels read the session snapshot and this state.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace attnscope::gui {

enum class Tab { kMask, kPages, kLocal, kSplit, kSoftmax, kDiff, kTiming, kSweep, kConsistency, kEngine, kMerge };
// the Merge tab last: Ctrl+1 .. Ctrl+8 keep the tabs they had before it came
constexpr Tab kTabs[] = {Tab::kMask,   Tab::kPages, Tab::kLocal,       Tab::kSplit,  Tab::kSoftmax, Tab::kDiff,
                         Tab::kTiming, Tab::kSweep, Tab::kConsistency, Tab::kEngine, Tab::kMerge};

const char* tab_title(Tab t);  // "Mask", "Pages", ...
// "mask", "pages", "local", "split", "softmax", "diff", "timing", "sweep", "consistency", "engine", "merge"
const char* tab_id(Tab t);
std::optional<Tab> parse_tab(const std::string& s);  // by id or title, case-insensitive

struct UiState {
  Tab tab = Tab::kMask;
  bool tab_forced = false;              // --tab: select it once
  int request = 0;                      // mask / pages / local panels
  int head = 0;                         // mask readout
  int diff_index = 0;                   // which comparison the diff panel shows
  int diff_token = -1, diff_head = -1;  // clicked cell of the error map
  float mask_zoom = 1.f;
  float mask_pan_x = 0.f, mask_pan_y = 0.f;
  int sm_request = 0, sm_query = 0, sm_head = 0;  // the row the softmax panel steps through
  int sm_step = -1;                               // its event (-1: the last)
  std::optional<std::string> open_case_text;      // a panel asks the app to open this case (JSON text)
  // FP8 cases: the Pages tab's view (0 the pool, 1 the scales, 2 the quantisation error per channel)
  // and the Diff tab's reference (0 the comparison's baseline, 1 the dequantised ideal, 2 the original)
  int pages_view = 0;
  int diff_reference = 1;
  int engine = 0;  // the Engine tab's engine, as Engine (engine_metadata.h): 0 sglang-fa ... 3 vllm-flashmla-sparse
  // The Merge tab's (token, head) row: until the user picks one (merge_picked), the row with the
  // largest merged error, where a wrong merge shows most
  int merge_request = 0, merge_query = 0, merge_head = 0;
  bool merge_picked = false;
};

// --view NAME: the Pages tab's pool / scales / channels view or the Diff tab's baseline / dequantised /
// original reference of an FP8 case. False for another name.
bool apply_view(const std::string& name, UiState& ui);
constexpr const char* kViewNames =
    "pool, scales, channels (Pages), baseline, dequantised, original (Diff), sglang-fa, vllm-flashinfer, sglang-nsa, "
    "vllm-flashmla-sparse (Engine)";

}  // namespace attnscope::gui
