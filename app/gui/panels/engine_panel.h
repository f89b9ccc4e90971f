// Engine panel: the metadata tensors SGLang's FlashAttention backend or vLLM's FlashInfer backend
// builds for the case (attnscope/engine_metadata.h): scalars and vectors as a table with their
// values, every page table as a grid of physical page ids coloured by owner request as the Pages tab
// colours them, hover naming the request and keys a cell holds.
#pragma once

#include "attnscope/engine_metadata.h"
#include "gui_state.h"
#include "session.h"

namespace attnscope::gui {

EngineView build_engine_view(const Session& s, Engine e);

class EnginePanel {
 public:
  void draw(const Session& s, UiState& ui);

 private:
  void draw_grid(const Session& s, const EngineTensor& t);
  const Session* built_for_ = nullptr;
  int built_engine_ = -1;
  EngineView view_;
};

}  // namespace attnscope::gui
