// The merge registry (attnscope/merge.h): attnscope's host merge, then each compiled family's mergers.
#include "attnscope/merge.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "attnscope/registry.h"

namespace attnscope {

std::vector<Merger> mergers() {
  std::vector<Merger> m;
  m.push_back({"attnscope", "attnscope's merge on the host: partials folded in order, LSE read as partition.h says", false,
               [](const MergeInput& in) {
                 MergeRun r;
                 r.id = "attnscope";
                 merge_partials(in.parts, in.rows, in.dv, in.dtype, in.native, in.read, &r.o, &r.lse);
                 return r;
               }});
  for (const auto& f : backend_families())
    if (f.compiled && f.mergers)
      for (auto& x : f.mergers()) m.push_back(std::move(x));
  return m;
}

namespace {

// "bit-identical", or where and how much a merge's rows differ from attnscope's.
std::string versus(const MergeRun& a, const MergeRun& ref, int dv) {
  if (a.o.size() != ref.o.size() || a.lse.size() != ref.lse.size()) return "not compared: sizes differ";
  double mo = 0, ml = 0;
  int64_t first = -1;
  for (size_t i = 0; i < a.o.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a.o[i], 4);
    std::memcpy(&y, &ref.o[i], 4);
    if (x == y) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    const double e = std::fabs(static_cast<double>(a.o[i]) - ref.o[i]);
    mo = std::isnan(e) ? INFINITY : std::max(mo, e);
  }
  for (size_t i = 0; i < a.lse.size(); ++i) {
    if (a.lse[i] == ref.lse[i]) continue;
    if (first < 0) first = static_cast<int64_t>(i) * dv;
    const double e = std::fabs(static_cast<double>(a.lse[i]) - ref.lse[i]);
    ml = std::isnan(e) ? INFINITY : std::max(ml, e);
  }
  if (first < 0) return "bit-identical";
  std::ostringstream s;
  s << "max |diff| " << mo << " (O), " << ml << " (LSE); first at row " << first / dv << " d " << first % dv;
  return s.str();
}

}  // namespace

std::vector<MergeRun> run_merges(const MergeInput& in) {
  std::vector<MergeRun> out;
  for (const Merger& m : mergers()) {
    MergeRun r;
    try {
      r = m.run(in);
    } catch (const std::exception& e) {
      r.status = Status::kError;
      r.message = e.what();
    }
    r.id = m.id;
    if (!out.empty() && r.status == Status::kOk) r.vs_attnscope = versus(r, out.front(), in.dv);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace attnscope
