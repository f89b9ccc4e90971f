// Pages panel: the physical page pool coloured by owner request, null and unused (poisoned)
// pages, each request's block table and its last-page fill; for an FP8 cache also its scales and
// the quantisation error per channel (fp8_views.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fp8_views.h"
#include "gui_state.h"
#include "session.h"
#include "sparse_data.h"
#include "sparse_view.h"

namespace attnscope::gui {

struct PageCell {
  int owner = -1;         // request, kPageNull or kPageUnused
  float fill = 0;         // used slots / page_size
  bool poisoned = false;  // unused slots hold NaN
};

struct PagesItems {
  int page_size = 1;
  int num_pages = 0, used = 0, unused = 0;
  bool has_null = false;
  std::vector<PageCell> pool;            // [num_pages]
  std::vector<std::vector<int>> tables;  // per request, its block table (first 256 entries)
  std::vector<int> table_len;            // per request, full length
  std::vector<int> last_fill;            // per request, last_page_len
};

PagesItems build_pages_items(const Session& s);

class PagesPanel {
 public:
  void draw(const Session& s, UiState& ui);
  bool busy() const;  // an FP8 view waits for its data

 private:
  bool fp8_view(const Session& s, UiState& ui);  // true when it drew an FP8 view instead of the pool
  bool fp8_shown_ = false;
  Fp8ScalesView scales_;
  Fp8ChannelView channels_;
  const Session* built_for_ = nullptr;
  PagesItems items_;
  // /sparse: the explained row's (the Softmax tab's) selected slots, rebuilt when the row or snapshot changes
  const SparseSlots* sparse_slots(const Session& s, const UiState& ui);
  const Session* slots_for_ = nullptr;
  int slots_r_ = -1, slots_q_ = -1;
  std::optional<SparseSlots> slots_;
  int slots_version_ = 0;
  SparseViews sparse_views_;
};

}  // namespace attnscope::gui
