// The attnscope window: case editor sidebar, tabbed panels, status bar, file handling, headless
// screenshots. The GUI thread plans edits at once (plans are cheap; a large mask_mod's is left to the
// Runner, whose first snapshot is the plan) and hands the backends to the Runner at the edit; it only
// ever reads snapshots.
#pragma once

#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "desktop.h"
#include "edit_script.h"
#include "frame_stats.h"
#include "gui_state.h"
#include "panels/consistency_panel.h"
#include "panels/diff_panel.h"
#include "panels/editor_panel.h"
#include "panels/engine_panel.h"
#include "panels/local_panel.h"
#include "panels/mask_panel.h"
#include "panels/merge_panel.h"
#include "panels/pages_panel.h"
#include "panels/plan_cost_panel.h"
#include "panels/softmax_panel.h"
#include "panels/split_panel.h"
#include "panels/sweep_panel.h"
#include "panels/timing_panel.h"
#include "python_consent.h"
#include "runner.h"
#include "test_hooks.h"

struct GLFWwindow;

namespace attnscope::gui {

struct AppOptions {
  std::string case_path;
  std::string screenshot;  // write a PNG once the results are in, then exit
  std::optional<Tab> tab;
  std::string sweep;                        // PATH=VALUES: fill the Sweep tab and start it (with --screenshot: wait for it)
  std::optional<SweepReport> sweep_report;  // a saved sweep (attnscope-cli sweep --json) to show in the Sweep tab
  bool plan_cost = false;                   // the Sweep tab's planning-cost view, started (with --screenshot: wait for it)
  int consistency = 0;  // N > 0: start the Consistency tab's check of the last N tokens (with --screenshot: wait for it)
  int width = 1600, height = 1000;
  bool size_given = false;  // --size: else the size kept in the settings
  double screenshot_timeout_s = 300;
  std::string view;              // --view: an FP8 sub-view (gui_state.h's parse_view)
  int edit_latency = 0;          // with --screenshot: scripted edits timed from the edit to the frame showing their results
  std::optional<DragSpec> drag;  // --drag: those edits step a case path at 60 Hz (edit_script.h)
};

class App {
 public:
  explicit App(AppOptions o);
  int run();  // the frame loop; the process exit code

  // for the drop callback
  void queue_open(const std::string& path) { drop_path_ = path; }

 private:
  bool open_case(const std::string& path);      // on failure: error dialog, current session kept
  void adopt(const CaseFile& f);                // new current case: plan now, run at once
  void show(std::shared_ptr<const Session> s);  // what the panels draw from this frame on
  void take_snapshot();                         // the runner's latest snapshot, if newer than the one shown
  void apply_edit();                            // edit_ validated and adopted, as the editor's edits are
  void draw_panel(Tab t);
  void recover_from(const std::exception& e);  // a frame outside the views threw: balance ImGui, say why
  void report_failure(const std::string& what);
  void frame();
  void draw_menu();
  void draw_status();
  void draw_dialogs();
  void remember_recent(const std::string& path);
  void shortcuts();  // keyboard shortcuts (desktop.h's shortcut_list)
  void draw_help();  // the F1 overlay
  void undo_redo(bool redo);
  void save_case();
  void export_repro();
  bool persistent() const { return opt_.screenshot.empty(); }  // screenshots neither read nor write settings or recent files

  AppOptions opt_;
  GLFWwindow* win_ = nullptr;
  Runner runner_;
  UiState ui_;
  CaseFile current_;                      // the last valid case
  CaseSpec edit_;                         // what the editor shows (may be invalid)
  std::string edit_error_;                // why edit_ is invalid
  std::shared_ptr<const Session> shown_;  // what the panels draw
  std::shared_ptr<const Snapshot> snap_;
  uint64_t want_gen_ = 0;
  bool run_pending_ = false;
  std::shared_ptr<const Session> planned_;  // the newest edit planned in its frame (null: the runner plans it)
  double plan_ms_ = 0;                      // how long that plan took
  std::string drop_path_;
  std::string dialog_error_;  // modal error text
  std::string open_path_, save_path_;
  std::vector<std::string> recent_, examples_;
  std::string env_line_;
  bool gpu_present_ = false;
  FrameStats frame_stats_;
  EditHistory history_;
  Settings settings_;
  bool help_ = false;
  std::optional<Tab> switch_to_;  // a shortcut's tab, selected in the tab bar's next frame
  int frames_after_done_ = 0;
  bool frame_log_ = std::getenv("ATTNSCOPE_FRAME_LOG") != nullptr;  // slow frames to stderr
  // a view that threw: drawn as its error until the session shown changes
  std::optional<Tab> failed_tab_;
  const Session* failed_for_ = nullptr;
  std::string failed_what_;
  int exit_code_ = 0;                                   // screenshot mode: 1 when a view failed
  std::optional<Tab> throw_in_ = throw_in_view_hook();  // the tests' fault seam (test_hooks.h); none in the product
  EditScript script_{opt_.edit_latency, opt_.drag};     // --edit-latency [--drag]
  std::string script_error_;                            // its edit was refused: the run ends, exit 2

  PythonConsent python_consent_;  // asks before a case's python: backends run
  EditorPanel editor_;
  MaskPanel mask_;
  PagesPanel pages_;
  LocalPanel local_;
  EnginePanel engine_;
  SplitPanel split_;
  SoftmaxPanel softmax_;
  SweepPanel sweep_;
  PlanCostPanel plan_cost_;
  int sweep_mode_ = 0;  // the Sweep tab: 0 a case path swept, 1 planning cost per batch size
  DiffPanel diff_;
  TimingPanel timing_;
  MergePanel merge_;
  ConsistencyPanel consistency_;
};

}  // namespace attnscope::gui
