// Host planning cost per batch size (plan_cost.h).
#include "plan_cost.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "case_json.h"
#include "sweep.h"

namespace attnscope {

namespace {

constexpr int kMaxBatch = 65536;

// Median wall time of `reps` calls of f, after one untimed call (which pays for first allocations).
template <class F>
double median_us(int reps, F&& f) {
  f();
  std::vector<double> t;
  t.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

const char* planner_id(Planner p) { return p == Planner::kFlashAttn ? "flash_attn" : "flashinfer"; }

std::vector<PlanCostColumn> columns_for() {
  std::vector<PlanCostColumn> cols = {
      {"split:flashinfer", "attnscope's model of FlashInfer's PrefillPlan alone (make_split_plan)"},
      {"split:flash_attn", "attnscope's model of FlashAttention's num_splits alone (make_split_plan)"},
      {"make_plan", "attnscope's whole plan: page table, masks, units, split plan, block map"}};
  for (const auto& f : backend_families())
    if (f.library_plan && f.compiled)
      cols.push_back({f.name + " (library)", f.name + "'s own planner on the same units: " + f.note});
  return cols;
}

// One batch size: the case with its requests cut or extended to `batch`, each column timed.
PlanCostPoint time_point(const nlohmann::json& base, int batch, const std::vector<PlanCostColumn>& cols, int reps) {
  PlanCostPoint pt;
  pt.batch = batch;
  pt.us.assign(cols.size(), -1.0);
  pt.notes.assign(cols.size(), "");
  CaseSpec c;
  try {
    nlohmann::json j = base;
    set_case_path(j, "/requests/#", batch);
    c = parse_case(j).spec;
  } catch (const std::exception& e) {
    pt.error = e.what();
    return pt;
  }
  const Plan whole = make_plan(c);
  for (size_t k = 0; k < cols.size(); ++k) {
    const std::string& name = cols[k].name;
    try {
      if (name.rfind("split:", 0) == 0) {
        CaseSpec m = c;
        m.split.planner = name == "split:flash_attn" ? Planner::kFlashAttn : Planner::kFlashInfer;
        pt.us[k] = median_us(reps, [&] { (void)make_split_plan(m, whole.units, whole.masks); });
      } else if (name == "make_plan") {
        pt.us[k] = median_us(reps, [&] { (void)make_plan(c); });
      } else {
        for (const auto& f : backend_families())
          if (f.name + " (library)" == name)
            pt.us[k] = median_us(reps, [&] {
              LibraryPlans lib;
              f.library_plan(c, whole.units, &lib);
            });
      }
    } catch (const std::exception& e) {
      pt.us[k] = -1.0;
      pt.notes[k] = e.what();
    }
  }
  return pt;
}

}  // namespace

std::vector<int> parse_batches(const std::string& arg) {
  SweepSpec s;
  try {
    s = parse_sweep_set("/requests/#=" + arg);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--batches " + arg + ": " + e.what());
  }
  std::vector<int> out;
  for (const auto& v : s.values) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxBatch)
      throw std::invalid_argument("--batches " + arg + ": " + v.dump() + " is not a batch size, must be an integer in [1, " +
                                  std::to_string(kMaxBatch) + "]");
    out.push_back(v.get<int>());
  }
  return out;
}

PlanCostReport run_plan_cost(const nlohmann::json& base, const PlanCostOptions& opt) {
  if (opt.batches.empty()) throw std::invalid_argument("--batches: no batch size given");
  for (int b : opt.batches)
    if (b < 1 || b > kMaxBatch)
      throw std::invalid_argument("--batches: " + std::to_string(b) + " is not in [1, " + std::to_string(kMaxBatch) + "]");
  PlanCostReport r;
  r.case_name = base.contains("name") && base["name"].is_string() ? base["name"].get<std::string>() : "";
  r.reps = std::max(1, opt.reps);
  r.columns = columns_for();
  CaseSpec first;
  try {
    first = parse_case(base).spec;
  } catch (const std::exception&) {
  }
  const std::string yard = std::string("split:") + planner_id(first.split.planner);
  for (size_t i = 0; i < opt.batches.size(); ++i) {
    if (opt.cancel && opt.cancel->load()) break;
    if (opt.progress) opt.progress(static_cast<int>(i), static_cast<int>(opt.batches.size()));
    r.points.push_back(time_point(base, opt.batches[i], r.columns, r.reps));
    const PlanCostPoint& pt = r.points.back();
    if (pt.batch == 256)
      for (size_t k = 0; k < r.columns.size(); ++k)
        if (r.columns[k].name == yard) r.split_us_at_256 = pt.us[k];
  }
  return r;
}

nlohmann::ordered_json plan_cost_to_json(const PlanCostReport& r) {
  nlohmann::ordered_json j;
  j["schema"] = "attnscope/plan-cost@1";
  j["case"] = r.case_name;
  j["reps"] = r.reps;
  j["unit"] = "microseconds, median per call, host";
  nlohmann::ordered_json cols = nlohmann::ordered_json::array();
  for (const auto& c : r.columns) cols.push_back({{"name", c.name}, {"what", c.what}});
  j["columns"] = cols;
  nlohmann::ordered_json pts = nlohmann::ordered_json::array();
  for (const auto& p : r.points) {
    nlohmann::ordered_json o;
    o["batch"] = p.batch;
    if (!p.error.empty()) o["error"] = p.error;
    nlohmann::ordered_json us = nlohmann::ordered_json::object(), notes = nlohmann::ordered_json::object();
    for (size_t k = 0; k < p.us.size(); ++k) {
      us[r.columns[k].name] = p.us[k] >= 0 ? nlohmann::ordered_json(p.us[k]) : nlohmann::ordered_json();
      if (!p.notes[k].empty()) notes[r.columns[k].name] = p.notes[k];
    }
    o["us"] = us;
    if (!notes.empty()) o["notes"] = notes;
    pts.push_back(o);
  }
  j["points"] = pts;
  j["split_us_at_256"] = r.split_us_at_256 >= 0 ? nlohmann::ordered_json(r.split_us_at_256) : nlohmann::ordered_json();
  return j;
}

std::string plan_cost_table(const PlanCostReport& r) {
  std::ostringstream o;
  o << "planning cost of " << r.case_name << " (host, median of " << r.reps << " calls, microseconds per call)\n";
  char buf[64];
  o << "  batch";
  for (const auto& c : r.columns) o << "  " << c.name;
  o << "\n";
  for (const auto& p : r.points) {
    std::snprintf(buf, sizeof buf, "%7d", p.batch);
    o << buf;
    if (!p.error.empty()) {
      o << "  invalid at this size: " << p.error << "\n";
      continue;
    }
    for (size_t k = 0; k < p.us.size(); ++k) {
      const int w = static_cast<int>(r.columns[k].name.size());
      if (p.us[k] < 0)
        std::snprintf(buf, sizeof buf, "  %*s", w, "-");
      else
        std::snprintf(buf, sizeof buf, "  %*.1f", w, p.us[k]);
      o << buf;
    }
    o << "\n";
  }
  for (const auto& p : r.points)
    for (size_t k = 0; k < p.notes.size(); ++k)
      if (!p.notes[k].empty()) o << "  batch " << p.batch << ", " << r.columns[k].name << ": not timed: " << p.notes[k] << "\n";
  for (const auto& c : r.columns) o << "  " << c.name << ": " << c.what << "\n";
  if (r.split_us_at_256 >= 0) {
    std::snprintf(buf, sizeof buf, "%.1f", r.split_us_at_256);
    o << "the split plan alone at batch 256: " << buf << " us\n";
  }
  return o.str();
}

}  // namespace attnscope
