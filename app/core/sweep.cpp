// Parameter sweeps (sweep.h).
#include "sweep.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "attnscope/compare.h"
#include "attnscope/plan.h"
#include "bench.h"
#include "report_json.h"

namespace attnscope {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) v.push_back(cur);
  if (!s.empty() && s.back() == sep) v.push_back("");
  return v;
}

constexpr size_t kMaxValues = 10000;

// A list's values: split at the commas outside "..." (a JSON string, with \ escapes) and outside
// (...), [...] and {...}, so an expression or a JSON array with commas in it is one value.
std::vector<std::string> split_values(const std::string& rhs, const std::string& arg) {
  const std::string hint = " (a comma inside \"...\", (...), [...] or {...} is part of a value)";
  std::vector<std::string> out;
  std::string cur, open;
  bool in_str = false, esc = false;
  for (char ch : rhs) {
    if (in_str) {
      cur += ch;
      if (esc)
        esc = false;
      else if (ch == '\\')
        esc = true;
      else if (ch == '"')
        in_str = false;
      continue;
    }
    if (ch == '"') {
      in_str = true;
    } else if (ch == '(' || ch == '[' || ch == '{') {
      open += ch;
    } else if (ch == ')' || ch == ']' || ch == '}') {
      const char want = ch == ')' ? '(' : ch == ']' ? '[' : '{';
      if (open.empty() || open.back() != want)
        throw std::invalid_argument("--set " + arg + ": an unmatched " + std::string(1, ch) + hint);
      open.pop_back();
    } else if (ch == ',' && open.empty()) {
      out.push_back(cur);
      cur.clear();
      if (out.size() > kMaxValues)
        throw std::invalid_argument("--set " + arg.substr(0, arg.find('=')) + ": more than 10000 values");
      continue;
    }
    cur += ch;
  }
  if (in_str) throw std::invalid_argument("--set " + arg + ": an unclosed \"" + hint);
  if (!open.empty()) throw std::invalid_argument("--set " + arg + ": an unclosed " + std::string(1, open.back()) + hint);
  out.push_back(cur);
  if (out.size() > kMaxValues) throw std::invalid_argument("--set " + arg.substr(0, arg.find('=')) + ": more than 10000 values");
  return out;
}

bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// Segments of a JSON path ("/requests/0/kv_len": 3).
size_t depth(const std::string& path) { return static_cast<size_t>(std::count(path.begin(), path.end(), '/')); }

double number(const std::string& t, const std::string& arg) {
  try {
    size_t used = 0;
    const double v = std::stod(t, &used);
    if (used == t.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument("--set " + arg + ": \"" + t +
                              "\" is not a number (a range is START:STOP:xFACTOR or START:STOP:+STEP)");
}

// An integer stays an integer in the case JSON (q_len 64, not 64.0).
nlohmann::json as_value(double v) {
  if (std::fabs(v - std::round(v)) < 1e-9 && std::fabs(v) < 9e15) return static_cast<int64_t>(std::llround(v));
  return v;
}

void set_at(nlohmann::json& j, const std::vector<std::string>& parts, size_t i, const std::string& where, const std::string& path,
            const nlohmann::json& value) {
  if (i == parts.size()) {
    j = value;
    return;
  }
  const std::string& p = parts[i];
  const std::string here = where + "/" + p;
  if (p == "#") {  // the array's length: cut, or extended with copies of its last element
    if (i + 1 != parts.size()) throw std::invalid_argument("--set " + path + ": # (an array's length) must be the last segment");
    if (!j.is_array() || j.empty())
      throw std::invalid_argument("--set " + path + ": # needs a non-empty array at " + (where.empty() ? "/" : where));
    if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > (1 << 20))
      throw std::invalid_argument("--set " + path + ": the length " + value.dump() + " is not an integer in [1, 1048576]");
    const nlohmann::json last = j.back();
    const size_t n = value.get<size_t>();
    while (j.size() > n) j.erase(j.size() - 1);
    while (j.size() < n) j.push_back(last);
    return;
  }
  if (j.is_array()) {
    if (p == "*") {
      if (j.empty()) throw std::invalid_argument("--set " + path + ": " + (where.empty() ? "/" : where) + " is an empty array");
      for (size_t k = 0; k < j.size(); ++k) set_at(j[k], parts, i + 1, where + "/" + std::to_string(k), path, value);
      return;
    }
    size_t k = 0;
    try {
      size_t used = 0;
      k = std::stoul(p, &used);
      if (used != p.size()) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw std::invalid_argument("--set " + path + ": " + (where.empty() ? "/" : where) +
                                  " is an array: use an index or *, not \"" + p + "\"");
    }
    if (k >= j.size())
      throw std::invalid_argument("--set " + path + ": " + (where.empty() ? "/" : where) + " has " + std::to_string(j.size()) +
                                  " elements, no index " + p);
    set_at(j[k], parts, i + 1, here, path, value);
    return;
  }
  if (j.is_null()) j = nlohmann::json::object();
  if (!j.is_object())
    throw std::invalid_argument("--set " + path + ": " + (where.empty() ? "/" : where) + " is a " + j.type_name() +
                                ", it has no \"" + p + "\"");
  if (p == "*") throw std::invalid_argument("--set " + path + ": * stands for array elements, " + where + " is an object");
  set_at(j[p], parts, i + 1, here, path, value);
}

}  // namespace

SweepSpec parse_sweep_set(const std::string& arg) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument("--set " + arg + ": expected PATH=V1,V2,... or PATH=START:STOP:xFACTOR");
  // the values go into the case and its reports, which are JSON: UTF-8 text only
  if (!valid_utf8(arg)) throw std::invalid_argument("--set: the argument is not valid UTF-8 text");
  SweepSpec s;
  s.path = arg.substr(0, eq);
  if (s.path[0] != '/') throw std::invalid_argument("--set " + arg + ": the path starts with / (e.g. /requests/*/kv_len)");
  const std::string rhs = arg.substr(eq + 1);
  if (rhs.empty()) throw std::invalid_argument("--set " + arg + ": no values after =");
  // a range has no quotes or brackets (those are list values: a JSON string may hold a colon)
  const bool plain = rhs.find_first_of("\"[{") == std::string::npos;
  const auto range = plain ? split(rhs, ':') : std::vector<std::string>{rhs};
  if (range.size() == 3) {
    const double a = number(range[0], arg), b = number(range[1], arg);
    const std::string& st = range[2];
    if (st.size() < 2 || (st[0] != 'x' && st[0] != '+'))
      throw std::invalid_argument("--set " + arg + ": the step is xFACTOR (geometric) or +STEP (arithmetic), not \"" + st + "\"");
    const double f = number(st.substr(1), arg);
    if (st[0] == 'x' && !(f > 1 && a > 0))
      throw std::invalid_argument("--set " + arg + ": a geometric range needs START > 0 and FACTOR > 1");
    if (st[0] == '+' && !(f > 0)) throw std::invalid_argument("--set " + arg + ": an arithmetic range needs STEP > 0");
    if (b < a) throw std::invalid_argument("--set " + arg + ": STOP is below START");
    for (double v = a; v <= b * (1 + 1e-12); v = st[0] == 'x' ? v * f : v + f) {
      s.values.push_back(as_value(v));
      if (s.values.size() > kMaxValues) throw std::invalid_argument("--set " + arg + ": more than 10000 values");
    }
    return s;
  }
  if (range.size() != 1) throw std::invalid_argument("--set " + arg + ": a range is START:STOP:xFACTOR or START:STOP:+STEP");
  for (const auto& t : split_values(rhs, arg)) {
    if (t.empty()) throw std::invalid_argument("--set " + arg + ": an empty value in the list");
    try {
      s.values.push_back(nlohmann::json::parse(t));
    } catch (const nlohmann::json::exception&) {
      s.values.push_back(t);  // a bare word: a string value (e.g. a planner name)
    }
  }
  return s;
}

SweepSpec prepare_sweep(const nlohmann::json& base, const std::string& arg) {
  SweepSpec s = parse_sweep_set(arg);
  nlohmann::json probe = base;
  set_case_path(probe, s.path, s.values.front());
  // A key the case format does not have (a typo, /requests/*/kvlen) is created by set_case_path and
  // refused by the reader as an unknown key at the path or above it. An unknown key below the path
  // is inside the value itself (an object), which makes that value's row invalid like any other.
  try {
    (void)parse_case(probe);
  } catch (const CaseError& e) {
    if (e.rule().rfind("unknown key", 0) == 0 && depth(e.path()) <= depth(s.path))
      throw std::invalid_argument("--set " + s.path + ": not a path of the case format (" + e.what() + ")");
  }
  return s;
}

void set_case_path(nlohmann::json& j, const std::string& path, const nlohmann::json& value) {
  if (path.empty() || path[0] != '/') throw std::invalid_argument("--set " + path + ": the path starts with /");
  auto parts = split(path.substr(1), '/');
  for (const auto& p : parts)
    if (p.empty()) throw std::invalid_argument("--set " + path + ": an empty path segment");
  set_at(j, parts, 0, "", path, value);
}

SweepReport run_sweep(const nlohmann::json& base, const SweepSpec& spec, const SweepOptions& opt) {
  SweepReport rep;
  rep.path = spec.path;
  rep.case_name = base.value("name", std::string("case"));
  rep.base = base;
  const int n = static_cast<int>(spec.values.size());
  for (int i = 0; i < n; ++i) {
    if (opt.cancel && opt.cancel->load()) break;
    if (opt.progress) opt.progress(i, n);
    SweepPoint pt;
    pt.value = spec.values[i];
    nlohmann::json j = base;
    set_case_path(j, spec.path, pt.value);
    CaseFile f;
    try {
      f = parse_case(j);
    } catch (const CaseError& e) {
      pt.error = e.what();
      rep.points.push_back(pt);
      continue;
    }
    SessionOptions so = opt.session;
    so.cancel = opt.cancel;
    const auto s = run_session(f, so);
    const SplitPlan& sp = s->plan.split;
    pt.tile = sp.cta_tile_q;
    pt.chunk_pages = sp.chunk_pages;
    pt.items = sp.num_items;
    pt.padded_items = sp.padded_items;
    pt.split_kv = sp.split_kv;
    pt.plan_us = s->plan.plan_us;
    const CaseSpec& c = s->spec();
    const WorkCounts work = work_counts(c, s->plan);
    for (const Result& r : s->results) {
      SweepBackend b;
      b.backend = r.backend;
      b.status = r.ok() ? "ok" : std::string(status_name(r.status)) + (r.message.empty() ? "" : ": " + r.message);
      if (r.ok()) {
        b.digest = result_digest(r);
        b.host_ms = r.timing.host_ms;
        b.device_ms = r.timing.device_ms;
        const double ms = b.device_ms > 0 ? b.device_ms : b.host_ms;
        if (ms > 0) {
          b.tflops = work.flops / (ms * 1e-3) / 1e12;
          b.gbps = work.bytes / (ms * 1e-3) / 1e9;
        }
      }
      pt.backends.push_back(b);
    }
    for (size_t i = 0; i < s->diffs.size(); ++i) {
      const DiffReport& d = s->diffs[i];
      SweepComparison k;
      k.name = comparison_label(c.comparisons.at(i));
      k.verdict = d.verdict.pass ? "PASS" : d.verdict.skipped ? "SKIP" : "FAIL";
      k.max_abs = d.o.max_abs;
      k.rel_l2 = d.o.rel_l2;
      pt.comparisons.push_back(k);
    }
    rep.points.push_back(pt);
  }
  if (opt.progress) opt.progress(static_cast<int>(rep.points.size()), n);
  return rep;
}

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

// A value as text; bytes that are not UTF-8 (none from parse_sweep_set) are replaced, never thrown.
std::string value_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A JSON copy of a JSON value (through text: the two types are different); errors' bytes replaced
nlohmann::ordered_json ordered(const nlohmann::json& v) {
  return nlohmann::ordered_json::parse(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// every digit of the double: a CSV value reads back as the value itself
std::string g(double v) {
  std::ostringstream o;
  o.precision(17);
  o << v;
  return o.str();
}

}  // namespace

std::string sweep_to_csv(const SweepReport& r) {
  // the columns: the backends and comparisons of the first valid point (every point runs the same lists)
  const SweepPoint* first = nullptr;
  for (const auto& p : r.points)
    if (p.error.empty()) {
      first = &p;
      break;
    }
  std::ostringstream o;
  o << csv_field(r.path) << ",error,tile,chunk_pages,items,padded_items,split_kv,plan_us";
  if (first) {
    for (const auto& b : first->backends)
      for (const char* col : {"status", "digest", "host_ms", "device_ms", "tflops", "gbps"}) o << "," << b.backend << " " << col;
    for (const auto& k : first->comparisons)
      for (const char* col : {"verdict", "max_abs", "rel_l2"}) o << "," << csv_field(k.name + " " + col);
  }
  o << "\n";
  for (const auto& p : r.points) {
    o << csv_field(value_text(p.value)) << "," << csv_field(p.error);
    if (!p.error.empty()) {
      o << "\n";
      continue;
    }
    o << "," << p.tile << "," << p.chunk_pages << "," << p.items << "," << p.padded_items << "," << (p.split_kv ? 1 : 0) << ","
      << g(p.plan_us);
    for (const auto& b : p.backends)
      o << "," << csv_field(b.status) << "," << b.digest << "," << g(b.host_ms) << "," << g(b.device_ms) << "," << g(b.tflops)
        << "," << g(b.gbps);
    for (const auto& k : p.comparisons) o << "," << k.verdict << "," << g(k.max_abs) << "," << g(k.rel_l2);
    o << "\n";
  }
  return o.str();
}

nlohmann::ordered_json sweep_to_json(const SweepReport& r) {
  nlohmann::ordered_json j;
  j["schema"] = "attnscope/sweep@1";
  j["case"] = r.case_name;
  j["path"] = r.path;
  j["base_case"] = ordered(r.base);
  nlohmann::ordered_json pts = nlohmann::ordered_json::array();
  for (const auto& p : r.points) {
    nlohmann::ordered_json x;
    x["value"] = ordered(p.value);
    if (!p.error.empty()) {
      x["error"] = p.error;
      pts.push_back(x);
      continue;
    }
    x["plan"] = {{"cta_tile_q", p.tile},           {"chunk_pages", p.chunk_pages}, {"num_items", p.items},
                 {"padded_items", p.padded_items}, {"split_kv", p.split_kv},       {"plan_us", p.plan_us}};
    nlohmann::ordered_json bs = nlohmann::ordered_json::array();
    for (const auto& b : p.backends)
      bs.push_back({{"backend", b.backend},
                    {"status", b.status},
                    {"digest", b.digest},
                    {"host_ms", b.host_ms},
                    {"device_ms", b.device_ms},
                    {"tflops", b.tflops},
                    {"gbps", b.gbps}});
    x["backends"] = bs;
    nlohmann::ordered_json ks = nlohmann::ordered_json::array();
    for (const auto& k : p.comparisons)
      ks.push_back({{"comparison", k.name}, {"verdict", k.verdict}, {"max_abs", k.max_abs}, {"rel_l2", k.rel_l2}});
    x["comparisons"] = ks;
    pts.push_back(x);
  }
  j["points"] = pts;
  return j;
}

namespace {

// a field of a sweep report, with the JSON path in the error
template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw std::invalid_argument(where + "/" + key + ": missing");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument(where + "/" + key + ": wrong type (" + j.at(key).type_name() + ")");
  }
}

}  // namespace

SweepReport sweep_from_json(const nlohmann::json& j) {
  if (field<std::string>(j, "schema", "") != "attnscope/sweep@1")
    throw std::invalid_argument("/schema: \"" + j["schema"].get<std::string>() + "\" is not attnscope/sweep@1");
  SweepReport r;
  r.case_name = field<std::string>(j, "case", "");
  r.path = field<std::string>(j, "path", "");
  if (j.contains("base_case")) r.base = j["base_case"];
  const auto pts = field<nlohmann::json>(j, "points", "");
  if (!pts.is_array()) throw std::invalid_argument("/points: not an array");
  for (size_t i = 0; i < pts.size(); ++i) {
    const std::string w = "/points/" + std::to_string(i);
    const nlohmann::json& x = pts[i];
    SweepPoint p;
    p.value = field<nlohmann::json>(x, "value", w);
    if (x.contains("error")) {
      p.error = field<std::string>(x, "error", w);
      r.points.push_back(p);
      continue;
    }
    const auto plan = field<nlohmann::json>(x, "plan", w);
    p.tile = field<int>(plan, "cta_tile_q", w + "/plan");
    p.chunk_pages = field<int>(plan, "chunk_pages", w + "/plan");
    p.items = field<int>(plan, "num_items", w + "/plan");
    p.padded_items = field<int>(plan, "padded_items", w + "/plan");
    p.split_kv = field<bool>(plan, "split_kv", w + "/plan");
    p.plan_us = field<double>(plan, "plan_us", w + "/plan");
    const auto bs = field<nlohmann::json>(x, "backends", w);
    for (size_t k = 0; k < bs.size(); ++k) {
      const std::string wb = w + "/backends/" + std::to_string(k);
      SweepBackend b;
      b.backend = field<std::string>(bs[k], "backend", wb);
      b.status = field<std::string>(bs[k], "status", wb);
      b.digest = field<std::string>(bs[k], "digest", wb);
      b.host_ms = field<double>(bs[k], "host_ms", wb);
      b.device_ms = field<double>(bs[k], "device_ms", wb);
      b.tflops = field<double>(bs[k], "tflops", wb);
      b.gbps = field<double>(bs[k], "gbps", wb);
      p.backends.push_back(b);
    }
    const auto ks = field<nlohmann::json>(x, "comparisons", w);
    for (size_t k = 0; k < ks.size(); ++k) {
      const std::string wk = w + "/comparisons/" + std::to_string(k);
      SweepComparison c;
      c.name = field<std::string>(ks[k], "comparison", wk);
      c.verdict = field<std::string>(ks[k], "verdict", wk);
      c.max_abs = field<double>(ks[k], "max_abs", wk);
      c.rel_l2 = field<double>(ks[k], "rel_l2", wk);
      p.comparisons.push_back(c);
    }
    r.points.push_back(p);
  }
  return r;
}

}  // namespace attnscope
