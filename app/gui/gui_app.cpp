#include "gui_app.h"

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <imgui_internal.h>  // ErrorCheckEndFrameRecover
#include <imgui_stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "case_json.h"
#include "draw/colormap.h"
#include "draw/screenshot.h"
#include "draw/text_fit.h"
#include "file_input.h"
#include "live_session.h"
#include "repro.h"

namespace attnscope::gui {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string recent_file() {
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + "/.config/attnscope/recent.txt" : "";
}

}  // namespace

App::App(AppOptions o) : opt_(std::move(o)) {
  if (const auto b = full_reference_budget_hook()) runner_.set_full_reference_budget(*b);
  if (persistent()) {
    settings_ = load_settings(settings_path());
    set_palette(static_cast<Palette>(settings_.palette));
    if (!opt_.size_given) opt_.width = settings_.width, opt_.height = settings_.height;
  }
  if (!opt_.sweep.empty()) sweep_.start_with(opt_.sweep);
  if (opt_.plan_cost) {
    sweep_mode_ = 1;
    plan_cost_.start_next_draw();
  }
  if (opt_.consistency > 0) consistency_.start_with(opt_.consistency);
  if (opt_.sweep_report) {  // the points move to the panel (a report can hold 200,000); the case swept stays here
    nlohmann::json base = opt_.sweep_report->base;
    sweep_.show(std::move(*opt_.sweep_report));
    opt_.sweep_report = SweepReport{};
    opt_.sweep_report->base = std::move(base);
  }
  if (!opt_.view.empty()) apply_view(opt_.view, ui_);
  if (opt_.tab) {
    ui_.tab = *opt_.tab;
    ui_.tab_forced = true;
  }
  const std::string ex_dir = std::string(ATTNSCOPE_SOURCE_DIR) + "/examples";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ex_dir, ec))
    if (e.path().extension() == ".json") examples_.push_back(e.path().string());
  std::sort(examples_.begin(), examples_.end());
  if (persistent()) {
    std::ifstream rf(recent_file());
    for (std::string line; std::getline(rf, line);)
      if (!line.empty()) recent_.push_back(line);
  }
  std::string why;
  const auto devs = query_devices(&why);
  gpu_present_ = !devs.empty();
  env_line_ = gpu_present_ ? devs[0].name : "no GPU: CPU backends only (" + why + ")";
  // a library loaded other than the one built against (issue 47) is said where the device is
  for (const auto& f : backend_families())
    if (!f.mismatch.empty()) env_line_ += "; " + f.name + ": " + f.mismatch;
}

void App::remember_recent(const std::string& path) {
  const std::string abs = fs::absolute(path).string();
  recent_.erase(std::remove(recent_.begin(), recent_.end(), abs), recent_.end());
  recent_.insert(recent_.begin(), abs);
  if (recent_.size() > 10) recent_.resize(10);
  const std::string rf = recent_file();
  if (rf.empty() || !persistent()) return;
  std::error_code ec;
  fs::create_directories(fs::path(rf).parent_path(), ec);
  std::ofstream out(rf);
  for (const auto& r : recent_) out << r << "\n";
}

bool App::open_case(const std::string& path) {
  try {
    const CaseFile f = load_case_file(path);  // regular files only: a FIFO or /dev/zero is refused, not read
    adopt(f);
    history_.reset(f);
    open_path_ = save_path_ = path;
    settings_.last_case = fs::absolute(path).string();
    remember_recent(path);
    return true;
  } catch (const std::exception& e) {  // CaseError for the content; the file, or memory, for the rest
    dialog_error_ = "Cannot open " + path + ":\n\nerror: " + e.what() +
                    (shown_ ? "\n\nThe current session is unchanged." : "\n\nNo case is open: open one from the File menu.");
    return false;
  }
}

void App::adopt(const CaseFile& f) {
  current_ = f;
  edit_ = f.spec;
  edit_error_.clear();
  run_pending_ = true;
  planned_.reset();
  // a mask_mod is evaluated on every (query, key) pair when planning, and /sparse's indexer scores every
  // visible key: a large one is planned by the runner, whose first snapshot is the plan, and the views keep
  // the last plan until then
  if (plan_on_runner(f.spec)) return;
  // plan now, on this thread: the plan views follow the edit in this frame; the results shown stay
  // the last edit's, marked stale, until the runner replaces them
  const auto t0 = Clock::now();
  auto s = std::make_shared<Session>();
  s->file = f;
  s->plan = plan_case(f.spec);
  plan_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (shown_) s->env = shown_->env;
  planned_ = s;
  show(shown_ ? with_stale_results(*s, *shown_) : s);
}

void App::show(std::shared_ptr<const Session> s) {
  runner_.retire(std::move(shown_));
  shown_ = std::move(s);
}

void App::draw_menu() {
  if (!ImGui::BeginMainMenuBar()) return;
  if (ImGui::BeginMenu("File")) {
    ImGui::SetNextItemWidth(420);
    ImGui::InputTextWithHint("##open", "path/to/case.json", &open_path_);
    ImGui::SameLine();
    if (ImGui::Button("Open")) open_case(open_path_);
    if (ImGui::BeginMenu("Recent", !recent_.empty())) {
      for (const auto& r : recent_)
        if (ImGui::MenuItem(r.c_str())) open_case(r);
      ImGui::EndMenu();
    }
    if (ImGui::BeginMenu("Examples")) {
      for (const auto& e : examples_)
        if (ImGui::MenuItem(fs::path(e).filename().string().c_str())) open_case(e);
      ImGui::EndMenu();
    }
    ImGui::Separator();
    ImGui::SetNextItemWidth(420);
    ImGui::InputTextWithHint("##save", "save as / export to ...", &save_path_);
    if (ImGui::MenuItem("Save case", "Ctrl+S")) save_case();
    if (ImGui::MenuItem("Export repro (case + environment + results)", "Ctrl+E", false, snap_ && snap_->done && snap_->session))
      export_repro();
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Edit")) {
    if (ImGui::MenuItem("Undo", "Ctrl+Z", false, history_.can_undo())) undo_redo(false);
    if (ImGui::MenuItem("Redo", "Ctrl+Shift+Z", false, history_.can_redo())) undo_redo(true);
    ImGui::Separator();
    python_consent_.draw_timeout_setting();
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("View")) {
    bool cb = palette() == Palette::kColourBlind;
    if (ImGui::MenuItem("Colour-blind safe palette (Okabe-Ito)", nullptr, &cb)) {
      set_palette(cb ? Palette::kColourBlind : Palette::kDefault);
      settings_.palette = cb ? 1 : 0;
    }
    if (ImGui::MenuItem("Keyboard shortcuts", "F1")) help_ = true;
    ImGui::EndMenu();
  }
  ImGui::TextDisabled("  %s", current_.spec.name.c_str());
  ImGui::EndMainMenuBar();
}

void App::draw_status() {
  const float h = ImGui::GetFrameHeight();
  ImGui::SetNextWindowPos(ImVec2(0, ImGui::GetIO().DisplaySize.y - h));
  ImGui::SetNextWindowSize(ImVec2(ImGui::GetIO().DisplaySize.x, h));
  ImGui::Begin("##status", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings);
  // each part cut with "..." to its share of the bar, whole in a tooltip; the state gets the larger share
  const float width = ImGui::GetIO().DisplaySize.x, frame_w = 240;
  const float state_w = std::max(200.f, (width - frame_w) * 0.6f);
  text_elided(env_line_, std::max(80.f, width - frame_w - state_w - 30));
  ImGui::SameLine(0, 30);
  const ImVec4 red(1, 0.4f, 0.4f, 1);
  if (!edit_error_.empty()) {
    text_elided("invalid edit (not applied): " + edit_error_, state_w, &red);
  } else if (run_pending_ || runner_.busy() || !snap_ || !snap_->done) {
    const std::string a = runner_.activity();
    const size_t stale = shown_ ? shown_->stale.size() : 0;
    // a sampled pass's results are never taken for the full ones (live_session.h, sample_first)
    const std::string sampled = shown_ && shown_->shows_sampled() ? "; " + sampled_note(*shown_) : "";
    text_elided("running " + (a.empty() ? std::string("...") : a) +
                    (stale ? "; " + std::to_string(stale) + " of the results shown are the previous edit's (stale)" : "") +
                    sampled,
                state_w);
  } else if (snap_ && !snap_->error.empty()) {
    text_elided("error: " + snap_->error, state_w, &red);
  } else if (shown_) {
    // the same summary as the CLI's last line: ok (green), NOT CHECKED (amber), FAILED (red)
    const RunSummary sum = shown_->summary();
    const ImVec4 colour = sum.state == RunSummary::State::kFailed       ? ImVec4(1, 0.4f, 0.4f, 1)
                          : sum.state == RunSummary::State::kNotChecked ? ImVec4(1, 0.75f, 0.3f, 1)
                                                                        : ImVec4(0.5f, 0.9f, 0.5f, 1);
    const std::string line = "done: " + std::to_string(shown_->results.size()) + " backends; " + sum.line();
    const bool cut = text_elided(line, state_w, &colour);
    if (!cut && ImGui::IsItemHovered() && !shown_->replay.empty()) {
      std::string tip;
      for (const auto& r : shown_->replay)
        tip += r.backend + ": " + replay_state_name(r.state) + (r.why.empty() ? "" : " (why: " + r.why + ")") + "\n";
      ImGui::SetTooltip("%s", tip.c_str());
    }
  }
  // the frame counter at the right edge, only where the status text leaves room for it
  ImGui::SameLine();
  if (ImGui::GetCursorPosX() < ImGui::GetIO().DisplaySize.x - 240) {
    ImGui::SameLine(ImGui::GetIO().DisplaySize.x - 230);
    ImGui::Text("frame %.2f ms (max %.1f)", frame_stats_.recent(), frame_stats_.max());
  } else {
    ImGui::NewLine();
  }
  ImGui::End();
}

void App::draw_dialogs() {
  python_consent_.draw();
  if (!dialog_error_.empty()) ImGui::OpenPopup("Error");
  ImGui::SetNextWindowSize(ImVec2(640, 0));
  if (ImGui::BeginPopupModal("Error", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::TextWrapped("%s", dialog_error_.c_str());
    if (ImGui::Button("OK")) {
      dialog_error_.clear();
      ImGui::CloseCurrentPopup();
    }
    ImGui::EndPopup();
  }
}

void App::frame() {
  if (!drop_path_.empty()) {
    const std::string p = drop_path_;
    drop_path_.clear();
    open_case(p);
  }
  if (script_.active() && script_.frame(snap_.get(), want_gen_)) {  // --edit-latency: an edit through the editor's path
    const auto at = Clock::now();
    try {
      edit_ = parse_case(script_.next_case(case_to_json(edit_))).spec;
      apply_edit();
      script_.edited(want_gen_ + 1, at, plan_ms_);
    } catch (const std::exception& e) {  // a --drag path the case does not have, or a value it refuses
      script_error_ = e.what();
    }
  }
  // the backends run at the edit (no timer): a newer edit supersedes the run in flight
  // python: backends wait for the user's permission (python_consent.h); headless screenshots never ask
  if (run_pending_ && !python_consent_.holds_run(current_.spec.backends, !persistent())) {
    want_gen_ = runner_.submit(current_, {}, planned_);
    run_pending_ = false;
  }
  take_snapshot();

  const ImGuiIO& io = ImGui::GetIO();
  shortcuts();
  draw_menu();
  const float top = ImGui::GetFrameHeight(), bottom = ImGui::GetFrameHeight();
  // the sidebar's width: dragged at its right edge, kept in the settings
  settings_.sidebar = std::clamp(settings_.sidebar, 240.f, std::max(240.f, io.DisplaySize.x * 0.6f));
  const float side = persistent() ? settings_.sidebar : std::min(420.f, io.DisplaySize.x * 0.3f);
  ImGui::SetNextWindowPos(ImVec2(0, top));
  ImGui::SetNextWindowSize(ImVec2(side, io.DisplaySize.y - top - bottom));
  ImGui::Begin("Case", nullptr, ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse);
  std::string preset;
  if (editor_.draw(edit_, examples_, &preset)) apply_edit();
  if (!preset.empty()) open_case(preset);
  if (ui_.open_case_text) {  // a panel asked to open a case (a sweep point)
    try {
      const CaseFile f = parse_case_text(*ui_.open_case_text);
      adopt(f);
      history_.push(f);
    } catch (const CaseError& e) {
      dialog_error_ = std::string("Cannot open that case:\n\nerror: ") + e.what();
    }
    ui_.open_case_text.reset();
  }
  ImGui::End();

  ImGui::SetNextWindowPos(ImVec2(side, top));
  ImGui::SetNextWindowSize(ImVec2(io.DisplaySize.x - side, io.DisplaySize.y - top - bottom));
  ImGui::Begin("Views", nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoTitleBar);
  if (shown_ && (!shown_->stale.empty() || shown_->diffs_stale)) {  // never shown as current while stale
    std::string ids;
    for (const auto& id : shown_->stale) ids += (ids.empty() ? "" : ", ") + id;
    ImGui::TextColored(ImVec4(1, 0.75f, 0.3f, 1), "stale until this edit's results arrive: %s%s", ids.empty() ? "" : ids.c_str(),
                       shown_->diffs_stale ? (ids.empty() ? "the comparisons" : "; the comparisons") : "");
  }
  if (shown_ && shown_->shows_sampled())  // the sampled pass of a large reference: never shown as the full one
    ImGui::TextColored(ImVec4(0.55f, 0.85f, 1, 1), "%s", sampled_note(*shown_).c_str());
  if (ImGui::BeginTabBar("tabs")) {
    for (Tab t : kTabs) {
      // --tab: keep asking for the tab until the tab bar shows it (it takes effect a frame later)
      const bool select = (ui_.tab_forced && opt_.tab == t) || (switch_to_ && *switch_to_ == t);
      const ImGuiTabItemFlags flags = select ? ImGuiTabItemFlags_SetSelected : 0;
      if (ImGui::BeginTabItem(tab_title(t), nullptr, flags)) {
        ui_.tab = t;
        if (ui_.tab_forced && opt_.tab == t) ui_.tab_forced = false;
        if (switch_to_ && *switch_to_ == t) switch_to_.reset();
        if (shown_) draw_panel(t);
        ImGui::EndTabItem();
      }
    }
    ImGui::EndTabBar();
  }
  ImGui::End();
  {  // the splitter between the sidebar and the views
    ImGui::SetNextWindowPos(ImVec2(side - 3, top));
    ImGui::SetNextWindowSize(ImVec2(6, io.DisplaySize.y - top - bottom));
    ImGui::Begin("##splitter", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoBackground | ImGuiWindowFlags_NoMove);
    ImGui::InvisibleButton("##split", ImVec2(6, io.DisplaySize.y - top - bottom));
    if (ImGui::IsItemHovered() || ImGui::IsItemActive()) ImGui::SetMouseCursor(ImGuiMouseCursor_ResizeEW);
    if (ImGui::IsItemActive()) settings_.sidebar += io.MouseDelta.x;
    ImGui::End();
  }
  draw_status();
  draw_dialogs();
  draw_help();
}

void App::apply_edit() {
  try {
    validate_case(edit_, &registry_ids());
    CaseFile f = current_;
    f.spec = edit_;
    f.recorded = nullptr;  // an edited case no longer matches what a repro recorded
    const CaseSpec keep = edit_;
    adopt(f);
    history_.push(f);
    edit_ = keep;
  } catch (const CaseError& e) {
    edit_error_ = e.what();
  }
}

namespace {

// ImGui's state around a panel: what a panel that throws midway leaves open is closed again, down to
// this. (ErrorCheckEndFrameRecover would also end the tab bar the panel sits in.)
struct ImGuiDepth {
  ImGuiContext& g = *ImGui::GetCurrentContext();
  ImGuiWindow* window = g.CurrentWindow;
  ImGuiTable* table = g.CurrentTable;
  int windows = g.CurrentWindowStack.Size, ids = window->IDStack.Size, colours = g.ColorStack.Size, vars = g.StyleVarStack.Size,
      fonts = g.FontStack.Size, groups = g.GroupStack.Size, tree = window->DC.TreeDepth, widths = window->DC.ItemWidthStack.Size,
      wraps = window->DC.TextWrapPosStack.Size, disabled = g.DisabledStackSize;

  void restore() {
    while (g.CurrentWindowStack.Size > windows) {  // child windows, tooltips, popups the panel began
      ImGuiTabBar* const bar = g.CurrentTabBar;    // the panel's host's, not the child's to end
      g.CurrentTabBar = nullptr;
      ImGui::ErrorCheckEndWindowRecover(nullptr);
      g.CurrentTabBar = bar;
      if (g.CurrentWindow->Flags & ImGuiWindowFlags_ChildWindow)
        ImGui::EndChild();
      else
        ImGui::End();
    }
    while (g.CurrentTable && g.CurrentTable != table) ImGui::EndTable();
    if (window->DC.CurrentColumns) ImGui::EndColumns();
    while (window->DC.TreeDepth > tree) ImGui::TreePop();
    while (g.GroupStack.Size > groups) ImGui::EndGroup();
    while (window->IDStack.Size > ids) ImGui::PopID();
    while (g.DisabledStackSize > disabled) ImGui::EndDisabled();
    while (g.ColorStack.Size > colours) ImGui::PopStyleColor();
    while (g.StyleVarStack.Size > vars) ImGui::PopStyleVar();
    while (g.FontStack.Size > fonts) ImGui::PopFont();
    while (window->DC.ItemWidthStack.Size > widths) ImGui::PopItemWidth();
    while (window->DC.TextWrapPosStack.Size > wraps) ImGui::PopTextWrapPos();
  }
};

}  // namespace

void App::draw_panel(Tab t) {
  if (failed_tab_ == t && failed_for_ == shown_.get()) {
    ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "This view failed on this case and is off until the case changes:");
    ImGui::TextWrapped("%s", failed_what_.c_str());
    return;
  }
  ImGuiDepth depth;
  try {
    if (throw_in_ == t) {
      ImGui::BeginChild("half-drawn");  // left open, as a real failure would leave it
      ImGui::BeginTable("half-drawn table", 2);
      ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1, 0, 0, 1));
      throw std::runtime_error("test fault (the tests' throw_in_view_hook)");
    }
    switch (t) {
      case Tab::kMask:
        mask_.draw(*shown_, ui_);
        break;
      case Tab::kPages:
        pages_.draw(*shown_, ui_);
        break;
      case Tab::kLocal:
        local_.draw(*shown_, ui_);
        break;
      case Tab::kSplit:
        split_.draw(*shown_, ui_);
        break;
      case Tab::kSoftmax:
        softmax_.draw(*shown_, ui_);
        break;
      case Tab::kDiff:
        diff_.draw(*shown_, ui_);
        break;
      case Tab::kTiming:
        timing_.draw(*shown_, ui_);
        break;
      case Tab::kSweep:
        ImGui::RadioButton("sweep a case path", &sweep_mode_, 0);
        ImGui::SameLine();
        ImGui::RadioButton("planning cost per batch size", &sweep_mode_, 1);
        if (sweep_mode_ == 0)
          sweep_.draw(*shown_, ui_);
        else
          plan_cost_.draw(*shown_);
        break;
      case Tab::kConsistency:
        consistency_.draw(*shown_, ui_);
        break;
      case Tab::kEngine:
        engine_.draw(*shown_, ui_);
        break;
      case Tab::kMerge:
        merge_.draw(*shown_, ui_);
        break;
    }
  } catch (const std::exception& e) {  // no input may end the GUI: this view is turned off, the rest goes on
    depth.restore();
    failed_tab_ = t;
    failed_for_ = shown_.get();
    failed_what_ = e.what();
    report_failure(std::string("Internal error in the ") + tab_title(t) + " view: " + e.what());
  }
}

void App::report_failure(const std::string& what) {
  dialog_error_ = what + "\n\nattnscope keeps running; please report this with the case.";
  if (!persistent()) {
    std::fprintf(stderr, "attnscope: %s\n", what.c_str());
    exit_code_ = 1;
  }
}

void App::recover_from(const std::exception& e) {
  ImGui::ErrorCheckEndFrameRecover(nullptr);  // ends the windows, tables and tab bars the throw left open
  report_failure(std::string("Internal error: ") + e.what());
}

void App::take_snapshot() {
  auto latest = runner_.latest();
  if (!latest || latest == snap_ || (snap_ && latest->generation < snap_->generation)) return;
  runner_.retire(std::move(snap_));
  snap_ = latest;
  if (!snap_->session) return;  // an error snapshot keeps the last good session
  if (snap_->generation == want_gen_ || !planned_)
    show(snap_->session);
  else  // an older edit's results (a drag outruns the runner): shown stale beside this edit's plan
    show(with_stale_results(*planned_, *snap_->session));
}

void App::save_case() {
  if (save_path_.empty()) {
    dialog_error_ = "No save path: type one in the File menu's \"save as\" field.";
    return;
  }
  try {
    write_text_file(save_path_, case_to_text(current_.spec));
    remember_recent(save_path_);
    settings_.last_case = fs::absolute(save_path_).string();
  } catch (const std::exception& e) {
    dialog_error_ = e.what();
  }
}

void App::export_repro() {
  if (!(snap_ && snap_->done && snap_->session)) {
    dialog_error_ = "The results are not in yet: export the repro when the run is done.";
    return;
  }
  if (save_path_.empty()) {
    dialog_error_ = "No export path: type one in the File menu's \"save as / export to\" field.";
    return;
  }
  try {
    write_text_file(save_path_, case_file_to_json(make_repro(*snap_->session)).dump(2) + "\n");
  } catch (const std::exception& e) {
    dialog_error_ = e.what();
  }
}

void App::undo_redo(bool redo) {
  if (redo ? !history_.can_redo() : !history_.can_undo()) return;
  const CaseFile f = redo ? history_.redo() : history_.undo();
  adopt(f);  // not pushed: the history moves, it does not grow
}

void App::shortcuts() {
  const ImGuiIO& io = ImGui::GetIO();
  auto pressed = [](int glfw_key) { return ImGui::IsKeyPressed(glfw_key, false); };
  if (pressed(GLFW_KEY_F1)) help_ = !help_;
  if (!io.KeyCtrl) return;
  // text fields keep their own Ctrl+Z / Ctrl+S behaviour while they are being edited
  if (!io.WantTextInput) {
    if (pressed(GLFW_KEY_Z)) undo_redo(io.KeyShift);
    if (pressed(GLFW_KEY_Y)) undo_redo(true);
    if (pressed(GLFW_KEY_S)) save_case();
    if (pressed(GLFW_KEY_E)) export_repro();
  }
  if (pressed(GLFW_KEY_O)) ImGui::OpenPopup("Open case");
  const int n = static_cast<int>(std::size(kTabs));
  for (int i = 0; i < n && i < 9; ++i)
    if (pressed(GLFW_KEY_1 + i)) switch_to_ = kTabs[i];
  if (pressed(GLFW_KEY_TAB)) {
    int cur = 0;
    for (int i = 0; i < n; ++i)
      if (kTabs[i] == ui_.tab) cur = i;
    switch_to_ = kTabs[(cur + (io.KeyShift ? n - 1 : 1)) % n];
  }
}

void App::draw_help() {
  if (ImGui::BeginPopupModal("Open case", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::SetNextItemWidth(480);
    if (ImGui::IsWindowAppearing()) ImGui::SetKeyboardFocusHere();
    const bool enter =
        ImGui::InputTextWithHint("##openpath", "path/to/case.json", &open_path_, ImGuiInputTextFlags_EnterReturnsTrue);
    if (enter || ImGui::Button("Open")) {
      ImGui::CloseCurrentPopup();
      open_case(open_path_);
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel") || ImGui::IsKeyPressed(GLFW_KEY_ESCAPE)) ImGui::CloseCurrentPopup();
    for (const auto& r : recent_)
      if (ImGui::Selectable(r.c_str())) {
        ImGui::CloseCurrentPopup();
        open_case(r);
      }
    ImGui::EndPopup();
  }
  if (!help_) return;
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos(ImVec2(io.DisplaySize.x * 0.5f, io.DisplaySize.y * 0.5f), ImGuiCond_Always, ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowBgAlpha(0.94f);
  ImGui::Begin("Keyboard shortcuts (F1 closes)", &help_, ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoCollapse);
  if (ImGui::BeginTable("keys", 2, ImGuiTableFlags_RowBg)) {
    for (const auto& [k, what] : shortcut_list()) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextColored(ImVec4(1, 0.85f, 0.4f, 1), "%s", k.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(what.c_str());
    }
    ImGui::EndTable();
  }
  ImGui::End();
}

int App::run() {
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  if (!opt_.screenshot.empty()) glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
  win_ = glfwCreateWindow(opt_.width, opt_.height, "attnscope", nullptr, nullptr);
  if (!win_) {
    std::fprintf(stderr, "attnscope: cannot create an OpenGL 3.3 window; use attnscope-cli for headless runs\n");
    return 2;
  }
  glfwMakeContextCurrent(win_);
  runner_.set_wake([] { glfwPostEmptyEvent(); });  // thread-safe: a snapshot ends the event wait at once
  glfwSwapInterval(opt_.screenshot.empty() ? 1 : 0);
  glfwSetWindowUserPointer(win_, this);
  glfwSetDropCallback(win_, [](GLFWwindow* w, int n, const char** paths) {
    if (n > 0) static_cast<App*>(glfwGetWindowUserPointer(w))->queue_open(paths[0]);
  });
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // the layout is fixed; nothing to save
  ImGui::StyleColorsDark();
  ImGui_ImplGlfw_InitForOpenGL(win_, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");

  // the case named, else the last one (if it still exists), else an example
  std::error_code ec;
  const std::string first = !opt_.case_path.empty() ? opt_.case_path
                            : persistent() && !settings_.last_case.empty() && fs::exists(settings_.last_case, ec)
                                ? settings_.last_case
                                : std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/mixed-prefill-decode-fragmented.json";
  int code = 0;
  // a saved sweep without a case named: open the case it swept
  bool opened = false;
  if (opt_.case_path.empty() && opt_.sweep_report && opt_.sweep_report->base.is_object()) {
    try {
      const CaseFile f = parse_case(opt_.sweep_report->base);
      adopt(f);
      history_.reset(f);
      opened = true;
    } catch (const CaseError&) {
    }
  }
  if (!opened && !open_case(first) && !persistent()) {
    std::fprintf(stderr, "attnscope: %s\n", dialog_error_.c_str());
    code = 2;
  }
  auto t0 = Clock::now();
  while (code == 0 && !glfwWindowShouldClose(win_)) {
    // a frame at display rate at most while work is under way (a snapshot's wake ends the wait at
    // once); headless runs too, so a benchmark's frames do not take the core the worker needs
    glfwWaitEventsTimeout(!opt_.screenshot.empty() || runner_.busy() || run_pending_ ? 1.0 / 60 : 0.25);
    const auto f0 = Clock::now();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    try {
      frame();
    } catch (const std::exception& e) {  // no input may end the GUI: the view that threw is turned off
      recover_from(e);
    }
    ImGui::Render();
    int w, h;
    glfwGetFramebufferSize(win_, &w, &h);
    glViewport(0, 0, w, h);
    glClearColor(0.08f, 0.08f, 0.1f, 1);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - f0).count();
    frame_stats_.record(ms);
    if (frame_log_ && ms > 8)
      std::fprintf(stderr, "frame %d: %.2f ms (snapshot %s, runner %s)\n", frame_stats_.frames(), ms,
                   snap_ && snap_->done ? "done" : "partial", runner_.activity().c_str());
    if (!opt_.screenshot.empty()) {
      // the results are in, and the panel shown has nothing of its own still computing
      const bool results = snap_ && snap_->done && snap_->generation == want_gen_ && !run_pending_;
      const bool done = results && !(ui_.tab == Tab::kSoftmax && softmax_.busy()) &&
                        !(ui_.tab == Tab::kSweep && (sweep_.busy() || plan_cost_.busy())) &&
                        !(ui_.tab == Tab::kConsistency && consistency_.busy()) && !(ui_.tab == Tab::kPages && pages_.busy()) &&
                        !(ui_.tab == Tab::kMask && mask_.busy());
      if (!script_error_.empty()) {
        std::fprintf(stderr, "attnscope: --edit-latency: %s\n", script_error_.c_str());
        code = 2;
        break;
      }
      if (script_.active() && !script_.finished()) {
        if (script_.frame(snap_.get(), want_gen_), script_.finished()) {
          std::printf("%s", script_.report().c_str());
          std::fflush(stdout);
        }
        t0 = Clock::now();  // the time limit is per edit
      } else if (done) {
        ++frames_after_done_;
      }
      if (frames_after_done_ >= 4) {  // textures built and laid out
        const std::string err = write_screenshot(opt_.screenshot, w, h);
        if (!err.empty()) {
          std::fprintf(stderr, "attnscope: --screenshot %s\n", err.c_str());
          code = 2;  // checked before the window opened; what fails now is still the path asked for
        } else {
          std::printf(
              "screenshot %s (%dx%d, tab %s); frame time avg %.2f ms, max %.2f ms over %d frames (after %d warm-up); peak "
              "resident %.0f MiB\n",
              opt_.screenshot.c_str(), w, h, tab_id(ui_.tab), frame_stats_.mean(), frame_stats_.max(), frame_stats_.counted(),
              FrameStats::kWarmup, peak_resident_mib());
          code = exit_code_;
        }
        break;
      }
      if (std::chrono::duration<double>(Clock::now() - t0).count() > opt_.screenshot_timeout_s) {
        std::fprintf(stderr, "attnscope: results not ready after %.0f s; no screenshot\n", opt_.screenshot_timeout_s);
        code = 1;
        break;
      }
    }
    glfwSwapBuffers(win_);
  }
  if (persistent()) {
    glfwGetWindowSize(win_, &settings_.width, &settings_.height);
    settings_.palette = static_cast<int>(palette());
    save_settings(settings_path(), settings_);
  }
  runner_.set_wake(nullptr);  // GLFW ends before the runner's last snapshot
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(win_);
  return code;
}

}  // namespace attnscope::gui
