// Softmax panel: one query row's online softmax step by step (attnscope/softmax_trace.h), as
// the plan twin (the cpu family's) computes it under the plan: every KV tile (per key-split way), each chunk's partial,
// the merge of the partials, the result beside the exact softmax. Step with the buttons or the
// Left / Right keys; plots of the running max m and denominator d over the steps, and the row's
// logits and exact probabilities over its keys with the mask.
#pragma once

#include <future>
#include <string>
#include <vector>

#include "attnscope/softmax_trace.h"
#include "gui_state.h"
#include "session.h"
#include "sparse_data.h"
#include "sparse_view.h"

namespace attnscope::gui {

// One event of the step-through, in order: the attention sink's start of the row's state (with a
// sink), the tiles of chunk 0 (way by way), chunk 0's partial, ..., the merges in chunk order, the
// final result.
struct SoftmaxEvent {
  enum Kind { kTile, kPartial, kMerge, kSink, kFinal } kind = kTile;
  int index = 0;      // into steps / partials / merges (kSink: 0, the state the first tile starts from)
  std::string text;   // one line, as the list shows it
  std::string state;  // the state after the event, several lines
};

// Where the m / d series start over: a tile that begins a new KV chunk (split-KV) or key-split
// way has its own running state, so m and d drop there without anything being wrong.
struct SeriesBreak {
  int at = 0;         // tile-step index of the first tile of the new chunk / way
  std::string label;  // "chunk 1", "way 2"
};

struct SoftmaxView {
  std::string header;                     // row, plan, logit formula
  std::vector<SoftmaxEvent> events;       // never empty for a built trace (ends with kFinal)
  int step = 0;                           // the event shown, clamped to [0, events.size())
  std::vector<float> m_series, d_series;  // per tile step up to and including `step` (m: -inf -> NaN, not drawn)
  std::vector<SeriesBreak> breaks;        // within m_series: where a new chunk or way starts its own state
  std::vector<float> logits, probs;       // per key of the row's unit (masked logit: NaN)
  int key0 = 0;                           // first key of the unit
  int visible_lo = 0, visible_hi = 0;
  // The head's attention sink (docs/conventions.md section 12): a term of the denominator with no
  // value vector, which starts the row's state (m = s_h x log2(e), d = 1) in its output or first
  // chunk, way 0. sink_series: per tile step in m_series, the sink's term exp2(s_h x log2(e) - m)
  // inside d at the steps whose d holds it (NaN at the others: other ways, later chunks).
  bool has_sink = false;
  double sink_logit = 0;  // s_h, natural log
  float sink2 = 0;        // s_h x log2(e), as the kernel holds it
  double sink_prob = 0;   // its exact share of the probability mass, e^(s_h - LSE)
  std::string sink_line;  // one line: s_h, where it starts the state, its share
  std::vector<float> sink_series;
};

// The view of trace `t` at event `step` (negative: the last event).
SoftmaxView build_softmax_view(const SoftmaxTrace& t, int step);

class SoftmaxPanel {
 public:
  void draw(const Session& s, UiState& ui);
  // trace not shown yet, or a /sparse case's kept / dropped mass still computing
  bool busy() const {
    return job_.valid() || (!have_trace_ && error_.empty()) || sparse_.busy() ||
           (sparse_wanted_ && !sparse_.value() && sparse_.error().empty());
  }

 private:
  // The case (its JSON text: a new snapshot of the same case keeps the trace) and the row.
  struct Key {
    std::string case_text;
    int request = -1, query = -1, head = -1;
    bool operator==(const Key&) const = default;
  };
  const Session* seen_ = nullptr;  // the snapshot case_text_ was taken from
  std::string case_text_;
  Key want_, have_;
  std::future<SoftmaxTrace> job_;
  bool have_trace_ = false;
  SoftmaxTrace trace_;
  SoftmaxView view_;  // built when the trace or the step changes, not every frame
  bool view_valid_ = false;
  std::string error_;
  // /sparse: the row's kept / dropped mass, every head's recall (sparse_data.h), from a worker
  void draw_sparse(const Session& s, const UiState& ui);
  SparseJob<SparseRow> sparse_;
  SparseViews sparse_views_;
  bool sparse_wanted_ = false;
  std::string sparse_key_;  // the snapshot's case key (sparse_case_key)
};

}  // namespace attnscope::gui
