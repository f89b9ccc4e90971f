// The merge registry (attnscope/merge.h): attnscope's host merge first, then each compiled family's
// mergers in family order, and run_merges, which runs them all and says how each differs from the first.
#include "attnscope/merge.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "attnscope/registry.h"

namespace attnscope {

std::vector<Merger> mergers() {
  std::vector<Merger> m;
  m.push_back({.id = "attnscope",
               .summary = "attnscope's merge on the host (merge_partials): partials folded in order 0, 1, ... in base 2, O "
                          "rounded to the dtype once, LSE read in the case's merge base",
               .gpu = false,
               .run = [](const MergeInput& in) {
                 MergeRun r;
                 merge_partials(in.parts, in.rows, in.dv, in.dtype, in.native, in.read, &r.o, &r.lse);
                 r.message = std::string("partials' LSE read in base ") + lse_base_name(in.read);
                 return r;
               }});
  for (const BackendFamily& f : backend_families()) {
    if (!f.compiled || !f.mergers) continue;
    try {
      for (Merger& x : f.mergers()) m.push_back(std::move(x));
    } catch (const std::exception& e) {  // the family's list failed: one entry saying so, the others still run
      const std::string why = std::string("listing the ") + f.name + " family's mergers failed: " + e.what();
      m.push_back({.id = f.name + ".mergers", .summary = why, .run = [why](const MergeInput&) {
                     MergeRun r;
                     r.status = Status::kError;
                     r.message = why;
                     return r;
                   }});
    }
  }
  return m;
}

namespace {

bool same_bits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

// |a - b|, infinite where either is NaN or they are infinities of different signs or one is infinite
double abs_diff(float a, float b) {
  const double e = std::fabs(static_cast<double>(a) - static_cast<double>(b));
  return std::isnan(e) ? INFINITY : e;
}

std::string sci(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2g", x);
  return b;
}

// The largest difference of a against ref and the index of the first element whose bits differ (-1: none).
struct Gap {
  double max = 0;
  int64_t first = -1;
};
Gap gap(const std::vector<float>& a, const std::vector<float>& ref) {
  Gap g;
  for (size_t i = 0; i < a.size(); ++i) {
    if (same_bits(a[i], ref[i])) continue;
    if (g.first < 0) g.first = static_cast<int64_t>(i);
    g.max = std::max(g.max, abs_diff(a[i], ref[i]));
  }
  return g;
}

}  // namespace

std::string merge_versus(const MergeRun& a, const MergeRun& ref, int dv) {
  if (a.o.size() != ref.o.size() || a.lse.size() != ref.lse.size())
    return "not compared: " + std::to_string(a.o.size()) + " O and " + std::to_string(a.lse.size()) + " LSE values against " +
           std::to_string(ref.o.size()) + " and " + std::to_string(ref.lse.size());
  const Gap o = gap(a.o, ref.o), l = gap(a.lse, ref.lse);
  if (o.first < 0 && l.first < 0) return "bit-identical";
  std::string s = o.first < 0 ? "O bit-identical"
                              : "max |diff| " + sci(o.max) + " (O), first at row " + std::to_string(o.first / std::max(dv, 1)) +
                                    " d " + std::to_string(o.first % std::max(dv, 1));
  s += l.first < 0 ? "; LSE bit-identical" : "; LSE max |diff| " + sci(l.max) + ", first at row " + std::to_string(l.first);
  return s;
}

std::vector<MergeRun> run_merges(const MergeInput& in) {
  std::vector<MergeRun> out;
  for (const Merger& m : mergers()) {
    MergeRun r;
    try {
      r = m.run(in);
    } catch (const std::exception& e) {
      r = MergeRun{};
      r.status = Status::kError;
      r.message = e.what();
    } catch (...) {
      r = MergeRun{};
      r.status = Status::kError;
      r.message = "unknown exception";
    }
    r.id = m.id;
    if (r.status != Status::kOk) {
      r.o.clear();
      r.lse.clear();
    } else if (!out.empty() && out.front().status == Status::kOk) {
      r.vs_attnscope = merge_versus(r, out.front(), in.dv);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace attnscope
