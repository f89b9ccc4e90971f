#include "edit_script.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runner.h"
#include "sweep.h"

namespace attnscope::gui {

namespace {

double ms_between(EditScript::Clock::time_point a, EditScript::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string fmt(const char* f, double a, double b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

}  // namespace

std::optional<DragSpec> parse_drag(const std::string& arg, std::string* why) {
  const auto eq = arg.find('='), colon = arg.rfind(':');
  if (eq == std::string::npos || eq == 0 || arg[0] != '/' || colon == std::string::npos || colon < eq) {
    *why = "expected PATH=A:B, e.g. /attention/window=64:4096";
    return std::nullopt;
  }
  DragSpec d;
  d.path = arg.substr(0, eq);
  const std::string a = arg.substr(eq + 1, colon - eq - 1), b = arg.substr(colon + 1);
  char extra = 0;
  if (std::sscanf(a.c_str(), "%lf%c", &d.from, &extra) != 1 || std::sscanf(b.c_str(), "%lf%c", &d.to, &extra) != 1 ||
      !std::isfinite(d.from) || !std::isfinite(d.to)) {
    *why = "A and B are numbers (" + a + ", " + b + ")";
    return std::nullopt;
  }
  d.integer = a.find_first_of(".eE") == std::string::npos && b.find_first_of(".eE") == std::string::npos;
  return d;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

bool EditScript::frame(const Snapshot* snap, uint64_t newest_gen) {
  if (finished_ || !active()) return false;
  const auto now = Clock::now();
  if (snap && snap->done && snap->session && snap->session.get() != last_shown_) {  // a finished run's stages
    last_shown_ = snap->session.get();
    if (!edits_.empty() && snap->generation >= edits_.front().first)
      for (const auto& st : snap->session->stages) {
        stage_ms_[st.stage].push_back(st.ms);
        ++(st.reused ? stage_reused_ : stage_runs_)[st.stage];
        saw_sampled_ |= st.stage.ends_with(" (sampled)");
      }
  }
  // finished results of a newer edit reached the screen in this frame (alone, or standing in for a
  // run under way)
  const uint64_t finished = snap ? snap->finished_gen : 0;
  if (finished > last_finished_ && next_unanswered_ < edits_.size() && finished >= edits_[next_unanswered_].first) {
    ++updates_;
    last_update_ = now;
    stage_ms_["hand-over to the frame"].push_back(ms_between(snap->made, now));
    while (next_unanswered_ < edits_.size() && edits_[next_unanswered_].first <= finished)
      latency_.push_back(ms_between(edits_[next_unanswered_++].second, now));
  }
  last_finished_ = std::max(last_finished_, finished);
  const uint64_t first = snap ? snap->first_gen : 0;  // the same for first results, sampled ones counting
  // a sampled pass on screen, or in a finished run (its snapshot may have been replaced before a frame)
  saw_sampled_ |= snap && (snap->sampled || (snap->session && snap->session->shows_sampled()));
  if (first > last_first_)
    while (next_first_ < edits_.size() && edits_[next_first_].first <= first)
      first_latency_.push_back(ms_between(edits_[next_first_++].second, now));
  last_first_ = std::max(last_first_, first);
  const bool current = snap && snap->done && snap->session && snap->generation == newest_gen;
  if (done_ == n_) {
    finished_ = next_unanswered_ == edits_.size();
    return false;
  }
  if (edits_.empty() || !drag_) return current;  // the first edit, and each seed edit, once results are shown
  return ms_between(edits_.back().second, now) >= 1000.0 / 60.0;
}

nlohmann::json EditScript::next_case(const nlohmann::json& now) const {
  nlohmann::json j = now;
  if (!drag_) {
    j["data"]["seed"] = j["data"]["seed"].get<int64_t>() + 1;  // new data each time: a seed seen before is a cache hit
    return j;
  }
  const double x = n_ == 1 ? drag_->to : drag_->from + (drag_->to - drag_->from) * done_ / (n_ - 1);
  set_case_path(j, drag_->path, drag_->integer ? nlohmann::json(std::llround(x)) : nlohmann::json(x));
  return j;
}

void EditScript::edited(uint64_t gen, Clock::time_point at, double plan_ms) {
  if (edits_.empty()) first_edit_ = at;
  edits_.push_back({gen, at});
  plan_ms_.push_back(plan_ms);
  ++done_;
}

std::string EditScript::report() const {
  std::string s;
  char b[256];
  if (drag_) {
    const double span = ms_between(first_edit_, edits_.back().second), until = ms_between(first_edit_, last_update_);
    std::snprintf(b, sizeof b, "drag %s %g -> %g: %d edits at 60 Hz over %.0f ms; %d result updates in %.0f ms (%.1f per s)\n",
                  drag_->path.c_str(), drag_->from, drag_->to, n_, span, updates_, until,
                  until > 0 ? updates_ * 1000.0 / until : 0.0);
    s += b;
  } else {
    std::snprintf(b, sizeof b,
                  "edit latency: %d edits (the data seed stepped to a new value, each once the last one's results were shown)\n",
                  n_);
    s += b;
  }
  s += "  edit to results (the first frame showing finished results of that edit or a later one): p50 " +
       fmt("%.1f ms, p95 %.1f ms", percentile(latency_, 50), percentile(latency_, 95)) + "\n  per edit:";
  for (double v : latency_) s += fmt(" %.1f", v, 0);
  s += " ms\n";
  if (saw_sampled_) {  // the live run sampled the references first: the time to those results, then to every row's (above)
    s += "  edit to first results (sampled rows; every row's follow, above): p50 " +
         fmt("%.1f ms, p95 %.1f ms", percentile(first_latency_, 50), percentile(first_latency_, 95)) + "\n  per edit (first):";
    for (double v : first_latency_) s += fmt(" %.1f", v, 0);
    s += " ms\n";
  }
  s += "  stages, p50 / p95 ms (runs, reused from the cache):\n    plan (in the frame of the edit) " +
       fmt("%.2f / %.2f", percentile(plan_ms_, 50), percentile(plan_ms_, 95)) + "\n";
  for (const auto& [stage, v] : stage_ms_) {
    s += "    " + stage + " " + fmt("%.2f / %.2f", percentile(v, 50), percentile(v, 95));
    auto runs = stage_runs_.find(stage), reused = stage_reused_.find(stage);
    if (runs != stage_runs_.end() || reused != stage_reused_.end())
      s += " (" + std::to_string(runs == stage_runs_.end() ? 0 : runs->second) + " runs, " +
           std::to_string(reused == stage_reused_.end() ? 0 : reused->second) + " reused)";
    s += "\n";
  }
  return s;
}

}  // namespace attnscope::gui
