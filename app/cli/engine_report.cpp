// Text and JSON of an engine's metadata view.
#include "engine_report.h"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace attnscope::cli {

namespace {

constexpr size_t kMaxValues = 16;  // per row, before eliding
constexpr int64_t kMaxRows = 8;

std::string row_text(const std::vector<int64_t>& v, size_t from, size_t count) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < count; ++i) {
    if (count > kMaxValues && i == 12) {
      o << "... (" << count - 14 << " more), ";
      i = count - 2;
    }
    o << v[from + i] << (i + 1 < count ? ", " : "");
  }
  o << "]";
  return o.str();
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

std::string engine_values_text(const EngineTensor& t) {
  if (t.shape.empty()) return std::to_string(t.values.at(0));
  if (t.shape.size() == 1) return row_text(t.values, 0, t.values.size());
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::string out;
  for (int64_t r = 0; r < rows; ++r) {
    if (rows > kMaxRows && r == kMaxRows - 2) {
      out += "... (" + std::to_string(rows - kMaxRows + 1) + " more rows)\n";
      r = rows - 1;
    }
    out += row_text(t.values, static_cast<size_t>(r * cols), static_cast<size_t>(cols)) + (r + 1 < rows ? "\n" : "");
  }
  return out;
}

void print_engine_view(std::ostream& o, const EngineView& v) {
  const EngineSource& s = engine_source(v.engine);
  o << "engine " << engine_id(v.engine) << ": " << s.repo << " " << s.file << " @ " << std::string(s.commit).substr(0, 12)
    << "\n";
  o << "mode: " << v.mode << (v.mode_reason.empty() ? "" : " (" + v.mode_reason + ")") << "\n";
  if (v.refusal) {
    o << "refused: " << *v.refusal << "\n";
    return;
  }
  if (!v.request_order.empty()) {
    o << "request order:";
    for (int r : v.request_order) o << " " << r;
    o << "\n";
  }
  size_t wn = 4, ws = 5;
  for (const auto& t : v.tensors) {
    wn = std::max(wn, t.name.size());
    ws = std::max(ws, shape_text(t.shape).size());
  }
  o << std::left << std::setw(static_cast<int>(wn)) << "name"
    << "  " << std::setw(5) << "dtype"
    << "  " << std::setw(static_cast<int>(ws)) << "shape"
    << "  values\n";
  const std::string indent(wn + ws + 11, ' ');
  for (const auto& t : v.tensors) {
    o << std::setw(static_cast<int>(wn)) << t.name << "  " << std::setw(5) << t.dtype << "  " << std::setw(static_cast<int>(ws))
      << shape_text(t.shape) << "  ";
    const std::string vals = engine_values_text(t);
    for (char ch : vals) o << ch << (ch == '\n' ? indent : "");
    o << "\n";
  }
  bool any_note = false;
  for (const auto& t : v.tensors)
    if (!t.note.empty()) {
      if (!any_note) o << "where:\n";
      any_note = true;
      o << "  " << t.name << ": " << t.note << "\n";
    }
  if (!v.mismatches.empty()) {
    o << "mismatches with attnscope's plan (" << v.mismatches.size() << "):\n";
    for (const auto& m : v.mismatches) o << "  " << m << "\n";
  }
  for (const auto& n : v.notes) o << "note: " << n << "\n";
}

nlohmann::ordered_json engine_view_to_json(const EngineView& v) {
  const EngineSource& s = engine_source(v.engine);
  nlohmann::ordered_json j;
  j["engine"] = engine_id(v.engine);
  j["source"] = {{"repo", s.repo}, {"file", s.file}, {"commit", s.commit}, {"also", s.also}};
  j["mode"] = v.mode;
  j["mode_reason"] = v.mode_reason;
  j["refusal"] = v.refusal ? nlohmann::ordered_json(*v.refusal) : nlohmann::ordered_json(nullptr);
  j["request_order"] = v.request_order;
  auto ts = nlohmann::ordered_json::array();
  for (const auto& t : v.tensors) {
    nlohmann::ordered_json e{{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"values", t.values}};
    if (t.table) e["cells"] = t.slots ? "token_slots" : "pages";
    if (!t.note.empty()) e["note"] = t.note;
    ts.push_back(e);
  }
  j["tensors"] = ts;
  j["mismatches"] = v.mismatches;
  j["notes"] = v.notes;
  // /engine ID in a case feeds them to the backends that engine drives (section 16); the DSA views are shown only
  j["fed_to_backends"] = engine_feeds_backends(v.engine);
  return j;
}

int plan_engine(const Args& a, const CaseSpec& c, const Plan& p) {
  const std::string id = *a.value("engine");
  const auto e = parse_engine(id);
  if (!e) throw UsageError("--engine: \"" + id + "\" is not an engine, must be one of " + kEngineIds);
  if (a.value("flex-block-mask")) throw UsageError("--engine: not with --flex-block-mask (one view per plan call)");
  const EngineView v = engine_metadata(*e, c, p);
  if (a.flag("json"))
    std::cout << engine_view_to_json(v).dump(2) << "\n";
  else
    print_engine_view(std::cout, v);
  return 0;
}

}  // namespace attnscope::cli
