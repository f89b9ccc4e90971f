#include "desktop.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace attnscope::gui {

void EditHistory::reset(const CaseFile& f) {
  v_.assign(1, f);
  pos_ = 0;
}

void EditHistory::push(const CaseFile& f) {
  if (v_.empty()) return reset(f);
  v_.resize(pos_ + 1);  // an edit after undo drops the redo branch, as every editor does
  v_.push_back(f);
  if (v_.size() > cap_) v_.erase(v_.begin(), v_.begin() + static_cast<long>(v_.size() - cap_));
  pos_ = v_.size() - 1;
}

const CaseFile& EditHistory::undo() { return v_[--pos_]; }
const CaseFile& EditHistory::redo() { return v_[++pos_]; }

std::string settings_path() {
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + "/.config/attnscope/settings.json" : "";
}

Settings load_settings(const std::string& path) {
  Settings s;
  std::ifstream in(path);
  if (!in) return s;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception&) {
    return s;
  }
  auto get_int = [&](const char* k, int lo, int hi, int* out) {
    if (j.contains(k) && j[k].is_number_integer() && j[k].get<int>() >= lo && j[k].get<int>() <= hi) *out = j[k].get<int>();
  };
  get_int("width", 320, 16384, &s.width);
  get_int("height", 240, 16384, &s.height);
  get_int("palette", 0, 1, &s.palette);
  if (j.contains("sidebar") && j["sidebar"].is_number() && j["sidebar"].get<float>() >= 200 && j["sidebar"].get<float>() <= 4000)
    s.sidebar = j["sidebar"].get<float>();
  if (j.contains("last_case") && j["last_case"].is_string()) s.last_case = j["last_case"].get<std::string>();
  return s;
}

void save_settings(const std::string& path, const Settings& s) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const nlohmann::json j = {
      {"width", s.width}, {"height", s.height}, {"sidebar", s.sidebar}, {"palette", s.palette}, {"last_case", s.last_case}};
  std::ofstream(path) << j.dump(2) << "\n";
}

std::vector<std::pair<std::string, std::string>> shortcut_list() {
  return {{"Ctrl+O", "open a case (File menu, path field)"},
          {"Ctrl+S", "save the case to the File menu's save path"},
          {"Ctrl+E", "export a repro (case + environment + results)"},
          {"Ctrl+Z", "undo the last case edit"},
          {"Ctrl+Shift+Z / Ctrl+Y", "redo"},
          {"Ctrl+1 .. Ctrl+8", "switch to tab 1 .. 8 (Mask, Pages, Local batches, Split-KV, Softmax, Diff, Timing, Sweep)"},
          {"Ctrl+Tab / Ctrl+Shift+Tab", "next / previous tab"},
          {"Left / Right, Home / End", "Softmax tab: step back / forward, first / last step"},
          {"Ctrl + mouse wheel, drag", "Mask tab: zoom, pan"},
          {"F1", "this overlay"}};
}

namespace {

bool term_holds(const RequestSpec& r, const std::string& field, const std::string& op, long v) {
  const long x = field == "q" ? r.q_len : r.kv_len;
  if (op == "<") return x < v;
  if (op == "<=") return x <= v;
  if (op == ">") return x > v;
  if (op == ">=") return x >= v;
  if (op == "=" || op == "==") return x == v;
  return x != v;  // "!="
}

}  // namespace

std::vector<int> request_rows(const CaseSpec& c, int col, bool ascending, const std::string& filter, std::string* error) {
  struct Term {
    std::string field, op;
    long v;
  };
  std::vector<Term> terms;
  std::istringstream in(filter);
  if (error) error->clear();
  for (std::string t; in >> t;) {
    size_t f = t.rfind("kv", 0) == 0 ? 2 : t.rfind("q", 0) == 0 ? 1 : 0;
    size_t o = f;
    while (o < t.size() && (t[o] == '<' || t[o] == '>' || t[o] == '=' || t[o] == '!')) ++o;
    const std::string op = t.substr(f, o - f);
    char* end = nullptr;
    const long v = o < t.size() ? std::strtol(t.c_str() + o, &end, 10) : 0;
    const bool ok = f > 0 && (op == "<" || op == "<=" || op == ">" || op == ">=" || op == "=" || op == "==" || op == "!=") &&
                    o < t.size() && end && *end == '\0';
    if (!ok) {
      if (error) *error = "\"" + t + "\" is not a filter term (q<op>N or kv<op>N, op one of < <= > >= = !=)";
      return {};
    }
    terms.push_back({t.substr(0, f), op, v});
  }
  std::vector<int> rows;
  for (int i = 0; i < static_cast<int>(c.requests.size()); ++i) {
    bool keep = true;
    for (const auto& t : terms) keep = keep && term_holds(c.requests[i], t.field, t.op, t.v);
    if (keep) rows.push_back(i);
  }
  auto key = [&](int i) -> long { return col == 1 ? c.requests[i].q_len : col == 2 ? c.requests[i].kv_len : i; };
  std::stable_sort(rows.begin(), rows.end(), [&](int a, int b) { return ascending ? key(a) < key(b) : key(a) > key(b); });
  return rows;
}

double peak_resident_mib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  return -1;
}

}  // namespace attnscope::gui
