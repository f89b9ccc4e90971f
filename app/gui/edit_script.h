// --edit-latency N [--drag PATH=A:B]: the GUI's latency benchmark, run headless before a screenshot.
// Without --drag: N edits of the data seed (each a new seed, so new inputs), each applied once the
// previous edit's results are on screen. With --drag: N edits of PATH stepped from A to B at 60 Hz, as a hand dragging a
// slider, without waiting. Either way it prints the time from each edit to the first frame that shows
// finished results of that edit or a later one (p50 / p95), each stage's time (p50 / p95, and how
// often the cache served it), and, for a drag, the result updates per second while it lasts. Where a
// run shows sampled results first (live_session.h, sample_first), the time to those too.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runner.h"

namespace attnscope::gui {

struct DragSpec {
  std::string path;  // a case path, as `attnscope-cli sweep` takes it
  double from = 0, to = 0;
  bool integer = true;  // A and B are integers: every value is rounded
};
// "PATH=A:B" -> the drag; nullopt with *why set.
std::optional<DragSpec> parse_drag(const std::string& arg, std::string* why);

// p50 / p95 of a list (nearest rank); 0 for an empty one.
double percentile(std::vector<double> v, double p);

class EditScript {
 public:
  using Clock = std::chrono::steady_clock;
  EditScript(int edits, std::optional<DragSpec> drag) : n_(edits), drag_(std::move(drag)) {}

  bool active() const { return n_ > 0; }
  bool finished() const { return finished_; }
  // Once per frame, with the snapshot the frame shows (null: none yet) and the generation of the
  // newest edit. Returns true when an edit is due.
  bool frame(const Snapshot* snap, uint64_t newest_gen);
  // The case JSON of the next edit, made from the case as it is now.
  nlohmann::json next_case(const nlohmann::json& now) const;
  // The edit was applied at `at`: its generation and how long the frame's plan took.
  void edited(uint64_t gen, Clock::time_point at, double plan_ms);
  // The report (after finished()).
  std::string report() const;

 private:
  int n_;
  std::optional<DragSpec> drag_;
  int done_ = 0;                                               // edits applied
  std::vector<std::pair<uint64_t, Clock::time_point>> edits_;  // generation, when applied
  std::vector<double> latency_;                                // per edit, ms
  size_t next_unanswered_ = 0;                                 // the first edit whose results no frame has shown
  std::vector<double> first_latency_;  // per edit, ms, to its first results (sampled, where the live run sampled first)
  size_t next_first_ = 0;              // the first edit whose first results no frame has shown
  uint64_t last_first_ = 0;
  bool saw_sampled_ = false;  // a run's sampled pass reached the screen
  std::map<std::string, std::vector<double>> stage_ms_;
  std::map<std::string, int> stage_runs_, stage_reused_;
  std::vector<double> plan_ms_;
  const Session* last_shown_ = nullptr;
  uint64_t last_finished_ = 0;  // the newest finished generation a frame has shown
  int updates_ = 0;             // distinct finished sessions shown while edits were coming
  Clock::time_point first_edit_, last_update_;
  bool finished_ = false;
};

}  // namespace attnscope::gui
