// Local batches panel: chunked local attention's virtual batches (vLLM) as a table and as small
// mask diagrams, one per virtual batch, placed at their chunk of the request.
#pragma once

#include <vector>

#include "gui_state.h"
#include "session.h"

namespace attnscope::gui {

struct VbDiagram {
  int index = 0, request = 0;
  int q_begin = 0, q_len = 0, kv_begin = 0, kv_len = 0;
  int q_abs_first = 0;  // absolute position of its first query
};

struct LocalItems {
  int chunk = 0;
  std::vector<VbDiagram> batches;
};

LocalItems build_local_items(const Session& s);

class LocalPanel {
 public:
  void draw(const Session& s, UiState& ui);

 private:
  const Session* built_for_ = nullptr;
  LocalItems items_;
};

}  // namespace attnscope::gui
