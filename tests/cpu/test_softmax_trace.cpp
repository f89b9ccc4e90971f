// The softmax step-through (attnscope/softmax_trace.h): its last step is cpu.tiled's result bit for
// bit on every example and on seeded random cases (split or not, key-split ways, GQA, windows,
// chunked local attention, soft-cap, ALiBi, padding); the steps add up (the running max is the max
// of the tile maxima, the rescale is exp2(m_old - m_new)); a fully masked row ends in O = 0 and
// LSE = -inf (the sink's logit with sinks, which start the state of the row's output or first
// chunk); the exact softmax beside it is cpu.reference's row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "attnscope/registry.h"
#include "attnscope/softmax_trace.h"
#include "case_gen.h"
#include "case_json.h"

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

Result run(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w) {
  auto b = make_backend(id);
  return run_backend(*b, c, p, w, RunOptions{});
}

// The rows of a case worth tracing: first, middle and last query of each request, first and last head.
std::vector<std::array<int, 3>> rows_of(const CaseSpec& c) {
  std::vector<std::array<int, 3>> v;
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    const int q = c.requests[r].q_len;
    for (int qi : {0, q / 2, q - 1})
      for (int h : {0, c.num_qo_heads - 1}) v.push_back({r, qi, h});
  }
  return v;
}

// Every traced row's O and LSE against cpu.tiled's and cpu.reference's, and the steps' arithmetic.
int check_case(const CaseSpec& c) {
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result tiled = run("cpu.tiled", c, p, w), ref = run("cpu.reference", c, p, w);
  if (c.fp8_kv() && tiled.status == Status::kUnsupported) {  // an FP8 cache cpu.tiled does not take: no bits to end on
    std::cout << "[ refused  ] " << c.name << ": " << tiled.message << "\n";
    return 0;
  }
  EXPECT_TRUE(tiled.ok() && ref.ok()) << tiled.message << ref.message;
  const int Hq = c.num_qo_heads, Dv = c.head_dim_vo;
  int n = 0;
  for (const auto& [r, q, h] : rows_of(c)) {
    const SoftmaxTrace t = explain_row(c, p, w, r, q, h, /*sparse_checks=*/true);
    SCOPED_TRACE(c.name + " request " + std::to_string(r) + " query " + std::to_string(q) + " head " + std::to_string(h));
    const int64_t row = t.token * Hq + h;
    EXPECT_TRUE(same_bits(t.lse, tiled.lse[row])) << t.lse << " vs cpu.tiled " << tiled.lse[row];
    for (int d = 0; d < Dv; ++d)
      EXPECT_TRUE(same_bits(t.o[d], tiled.o[row * Dv + d])) << "O[" << d << "] " << t.o[d] << " vs " << tiled.o[row * Dv + d];
    // the exact softmax is cpu.reference's row (stored there as float)
    EXPECT_EQ(static_cast<float>(t.ref_lse), ref.lse[row]);
    for (int d = 0; d < Dv; ++d) EXPECT_EQ(static_cast<float>(t.ref_o[d]), ref.o[row * Dv + d]);
    if (c.is_sparse() && !c.attention.score_mod) EXPECT_FALSE(t.gathered.empty()) << "cpu.tiled runs this /sparse row gathered";
    // a /sparse row's checks: the kept tokens' exact LSE is the dense one plus ln(recall of mass)
    EXPECT_EQ(t.sparse.has_value(), c.is_sparse());
    if (t.sparse) EXPECT_EQ(t.sparse->plain_logits, c.attention.score_mod.has_value()) << "dsa-index-bug has a score_mod";
    if (t.sparse && t.sparse->recall > 0 && !t.sparse->plain_logits)
      EXPECT_NEAR(t.ref_lse, t.sparse->dense_lse + std::log(t.sparse->recall), 1e-9 * (1 + std::fabs(t.ref_lse)));
    // the steps add up: per way, m is the running max of the tile maxima, rescale exp2(m_old - m_new)
    for (const TileStep& s : t.steps) {
      EXPECT_EQ(s.m_new, std::max(s.m_old, s.tile_max));
      // the plain path takes the max of q.k and scales it once: the same float as the max of the
      // shown (scaled, rounded) logits, since rounding is monotonic
      float shown = -INFINITY;
      // (a gathered /sparse row's steps number its kept tokens by rank: t.gathered holds their positions)
      for (int k = s.kv_begin; k < s.kv_end; ++k)
        shown = std::max(shown, t.logits[(t.gathered.empty() ? k : t.gathered[k]) - t.keys.front()]);
      EXPECT_TRUE(same_bits(s.tile_max, shown)) << "keys [" << s.kv_begin << ", " << s.kv_end << ")";
      if (!s.skipped) {
        EXPECT_EQ(s.rescale, std::exp2(s.m_old - s.m_new));
      }
      EXPECT_LE(s.visible, s.kv_end - s.kv_begin);
    }
    // a sink has no step of its own: every way of the row's output or first chunk starts from m = the
    // sink (docs/conventions.md section 12), the other chunks from -inf; one merge per later chunk
    EXPECT_EQ(std::isinf(t.sink2), !c.has_sinks());
    for (size_t i = 0; i < t.steps.size(); ++i) {
      const TileStep& s = t.steps[i];
      if (i > 0 && t.steps[i - 1].chunk == s.chunk && t.steps[i - 1].way == s.way) continue;
      const bool sink = c.has_sinks() && (!t.split || s.chunk == 0);
      EXPECT_EQ(s.m_old, sink ? t.sink2 : -INFINITY) << "chunk " << s.chunk << " way " << s.way;
    }
    EXPECT_EQ(t.partials.size(), t.split ? t.merges.size() + 1 : 1u);
    if (t.visible == 0) {  // a fully masked row: LSE -inf, or the sink's logit
      if (c.has_sinks()) {
        EXPECT_NEAR(t.lse, t.sink, 1e-5 * (1 + std::fabs(t.sink)));
      } else {
        EXPECT_EQ(t.lse, -INFINITY);
      }
      for (float x : t.o) EXPECT_EQ(x, 0.f);
    }
    double pr = 0;
    for (double x : t.probs) pr += x;
    if (t.visible > 0) {
      EXPECT_NEAR(pr + t.sink_prob, 1.0, 1e-9) << "exact probabilities (the sink's share included) sum to 1";
      if (c.has_sinks()) {
        EXPECT_GT(t.sink_prob, 0.0);
      }
    }
    ++n;
  }
  return n;
}

}  // namespace

TEST(SoftmaxTrace, EveryExampleEndsOnCpuTiledsBits) {
  int rows = 0;
  for (const auto& e : fs::directory_iterator(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".json") continue;
    rows += check_case(read_case_file(e.path().string()).spec);
  }
  EXPECT_GE(rows, 50);
}

TEST(SoftmaxTrace, RandomCasesEndOnCpuTiledsBits) {
  int split = 0, ways = 0;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    CaseSpec c = attnscope::testing::random_case(seed);
    check_case(c);
    const Plan p = make_plan(c);
    split += p.split.split_kv;
    ways += p.split.kv_warp_split > 1;
  }
  // the random cases reach the paths the trace has: split rows and key-split ways
  EXPECT_GT(split, 5);
  EXPECT_GE(ways, 3);
}

TEST(SoftmaxTrace, BadRowsAreRefusedWithTheArgument) {
  CaseSpec c = attnscope::testing::random_case(3);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  EXPECT_THROW(explain_row(c, p, w, static_cast<int>(c.requests.size()), 0, 0), std::invalid_argument);
  EXPECT_THROW(explain_row(c, p, w, 0, c.requests[0].q_len, 0), std::invalid_argument);
  EXPECT_THROW(explain_row(c, p, w, 0, 0, c.num_qo_heads), std::invalid_argument);
  try {
    explain_row(c, p, w, 0, 0, c.num_qo_heads);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--head"), std::string::npos) << e.what();
  }
}
