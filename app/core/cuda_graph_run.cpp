#include "cuda_graph_run.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "attnscope/compare.h"
#include "attnscope/graph_replay.h"
#include "attnscope/registry.h"

namespace attnscope {

namespace {
constexpr int kGraphTimeReps = 20;  // replays timed beside the eager launch's median (a measurement)
}  // namespace

void attach_graph_replay(const std::string& id, const CaseSpec& c, const Plan& p, Result* r) {
  if (!c.cuda_graph) return;
  GraphReplayReport g;
  auto b = make_backend(id);
  auto* cap = dynamic_cast<GraphReplayable*>(b.get());
  if (!r->ok()) {
    g.not_captured = "the eager run did not run: " + r->message;
  } else if (!cap) {
    g.not_captured = is_gpu_backend(id) ? id + " has no capture/replay here (engines capture cuda.flash and flashinfer.*; "
                                               "docs/planners.md's CUDA-graph section lists the backends this build captures)"
                                        : "a CPU backend (engines capture their GPU kernels)";
  } else {
    try {
      if (r->timing.reps > 0) cap->set_graph_time_reps(kGraphTimeReps);  // a timed run: time the replay too
      g = cap->capture_replay(c, p, cuda_graph_pad(c, p.pages));
      if (g.replay_reps > 0) g.eager_ms = r->timing.device_ms;
    } catch (const std::exception& e) {
      g.captured = true;
      g.checks.push_back({"capture and replay", false, false, std::string("error: ") + e.what()});
    }
  }
  g.engine = graph_engine_name(c.cuda_graph->engine);
  g.bucket = c.cuda_graph->bucket;
  g.live = static_cast<int>(c.requests.size());
  r->graph = std::move(g);
}

namespace {

// Elements whose bits differ (NaN equal to NaN), over the rows both computed.
int64_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::max(a.size(), b.size()));
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  }
  return n;
}

}  // namespace

GraphCheck real_rows_check(const CaseSpec& c, const Result& eager, const GraphReplayReport& g, const ResultLookup& result) {
  GraphCheck k;
  k.what = "real rows";
  Result replay = eager;
  replay.backend = eager.backend + " (graph replay)";
  replay.graph.reset();
  replay.o = g.o;
  replay.lse = g.lse;
  if (c.split.planner == Planner::kFixed && g.bits_differ_why.empty()) {  // a fixed split: the same chunks, the same bits
    const int64_t d = bit_differences(replay.o, eager.o) + bit_differences(replay.lse, eager.lse);
    k.pass = d == 0;
    k.detail =
        k.pass ? "bit-identical to the eager run (fixed split size)"
               : std::to_string(d) + " elements of O and LSE differ from the eager run (fixed split size promises the same bits)";
    return k;
  }
  // the planner sizes the KV chunks to the batch (bucket vs live): the twice_lowp rule
  ComparisonSpec rule;
  rule.backend = replay.backend;
  rule.rule = CompareRule::kTwiceLowp;
  const Result *ref = nullptr, *lowp = nullptr;
  for (const auto& id : backends_with_role(Role::kReference))
    if (!ref && result(id) && result(id)->ok()) ref = result(id);
  for (const auto& id : backends_with_role(Role::kLowp))
    if (!lowp && result(id) && result(id)->ok()) lowp = result(id);
  for (const auto& m : c.comparisons)  // the case's own twice_lowp comparison of this backend, if any
    if (m.backend == eager.backend && m.rule == CompareRule::kTwiceLowp && result(m.baseline) && result(m.lowp)) {
      rule = m;
      ref = result(m.baseline);
      lowp = result(m.lowp);
    }
  if (!ref || !lowp || !ref->ok() || !lowp->ok()) {
    k.skipped = true;
    k.detail =
        "not checked: the split differs from the eager run's and the twice_lowp rule needs a reference and a "
        "low-precision baseline in the run";
    return k;
  }
  rule.baseline = ref->backend;
  rule.lowp = lowp->backend;
  const DiffReport d = compare_results(c, replay, *ref, rule, lowp);
  const DiffReport e = diff_only(c, replay, eager);
  k.pass = d.verdict.pass;
  k.detail = (g.bits_differ_why.empty() ? "" : g.bits_differ_why + ": ") + "twice_lowp vs " + ref->backend + ": " +
             d.verdict.detail + "; vs the eager run max |diff| " + std::to_string(e.o.max_abs) + ", " +
             std::to_string(e.o.bit_identical) + " of " + std::to_string(e.o.count) + " elements bit-identical";
  return k;
}

std::string graph_pad_text(const CaseSpec& c, const Plan& p) {
  if (!c.cuda_graph) return "";
  const CudaGraphPad g = cuda_graph_pad(c, p.pages);
  auto pages = [](const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size() && i < 6; ++i) s.append(i ? " " : "").append(std::to_string(v[i]));  // GCC 12: -Wrestrict
    if (v.size() > 6) s += " ... (" + std::to_string(v.size()) + ")";
    return s + "]";
  };
  std::string s = "\nCUDA GRAPH  bucket " + std::to_string(g.bucket) + ": " + std::to_string(g.live) + " live + " +
                  std::to_string(g.bucket - g.live) + " padded entries of " + std::to_string(g.tokens_per_entry) +
                  " query token(s), " + graph_engine_name(g.engine) + " padding\n";
  const bool local = c.attention.local_chunk && g.local_unmodelled.empty();  // virtual batches: their first key
  s += std::string("  entry  request  seq_len  position  ") + (local ? "from_key  " : "") + "pages\n";
  bool gap = false;
  for (int b = 0; b < g.bucket; ++b) {
    // the first live entries, the last two live ones, the first padded ones and the last entry
    if (!(b < 6 || (b >= g.live - 2 && b < g.live + 3) || b == g.bucket - 1)) {
      if (!gap) s += "  ...\n";
      gap = true;
      continue;
    }
    gap = false;
    const GraphPadEntry& e = g.entries[b];
    char line[96];
    std::snprintf(line, sizeof line, "  %-6d %-8s %-8d %-9d ", b, e.padding() ? "pad" : std::to_string(e.request).c_str(),
                  e.seq_len, e.position);
    s += line;
    if (local) {
      std::snprintf(line, sizeof line, "%-9d ", e.chunk_begin);
      s += line;
    }
    s += pages(e.pages) + "\n";
  }
  s += "  padded rows: " + g.expect_text + "\n";
  const GraphPadEntry& c0 = g.capture[0];
  s += "  captured with " + std::to_string(g.bucket) + " entries of seq_len " + std::to_string(c0.seq_len) + " on pages " +
       pages(c0.pages) + "\n";
  for (const auto& n : g.notes) s += "  - " + n + "\n";
  return s;
}

std::string graph_time_text(const GraphReplayReport& g) {
  char b[160];
  std::snprintf(b, sizeof b, "graph replay median %.4f ms (%d replays), eager launch median %.4f ms", g.replay_ms, g.replay_reps,
                g.eager_ms);
  return b;
}

std::string graph_report_text(const Result& r) {
  if (!r.graph) return "";
  const GraphReplayReport& g = *r.graph;
  std::string s = "graph  " + r.backend + ": ";
  if (!g.captured) return s + "not captured: " + g.not_captured + "\n";
  s += "captured at bucket " + std::to_string(g.bucket) + " (" + std::to_string(g.live) + " live, " + g.engine +
       " padding)\n       captured: " + graph_grid_text(g.captured_grid) + "\n";
  if (g.replay_grid.entries > 0) s += "       replayed: " + graph_grid_text(g.replay_grid) + "\n";
  for (const auto& k : g.checks)
    s += std::string("       ") + (k.skipped ? "NOT CHECKED " : k.pass ? "ok " : "FAIL ") + k.what + ": " + k.detail + "\n";
  if (g.replay_reps > 0) s += "       time: " + graph_time_text(g) + "\n";
  for (const auto& n : g.notes) s += "       note: " + n + "\n";
  return s;
}

}  // namespace attnscope
