// GUI views of issue 28's shapes: the Mask tab's tree view (tree_parents), the Softmax tab's
// attention sink and the Pages tab's MLA latent layout, checked as draw items without a window, then as screenshots under Xvfb.
#include <gtest/gtest.h>
#include <stb/stb_image.h>  // the implementation is in test_gui.cpp

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "attnscope/mask.h"
#include "attnscope/mask_bits.h"
#include "case_json.h"
#include "explain.h"
#include "gui_shot.h"
#include "panels/mla_plan_view.h"
#include "panels/mla_view.h"
#include "panels/softmax_panel.h"
#include "panels/tree_view.h"
#include "session.h"

using namespace attnscope;
using namespace attnscope::gui;
namespace fs = std::filesystem;

namespace {

std::string example(const std::string& name) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/" + name; }

// The plan and the environment only: the tree view reads the plan's mask bits, no backend result.
std::shared_ptr<Session> planned(const CaseFile& f) { return begin_session(f, {}); }
std::shared_ptr<Session> planned(const std::string& name) { return planned(read_case_file(example(name))); }

bool ancestor_bit(const std::vector<uint64_t>& anc, int words, int i, int j) {
  return (anc[static_cast<size_t>(i) * words + (j >> 6)] >> (j & 63)) & 1;
}

}  // namespace

// Every new token is a node on its own row, with one edge (to its parent, or to the prefix root for
// parent -1) and a depth equal to its ancestor count; the layout column is depth + 1.
TEST(GuiTree, NodesEdgesAndDepthFollowTheParents) {
  auto s = planned("eagle-tree-verify.json");
  const CaseSpec& c = s->spec();
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    const RequestSpec& rq = c.requests[r];
    const TreeItems t = build_tree_items(*s, r);
    ASSERT_EQ(static_cast<int>(t.nodes.size()), rq.q_len) << r;
    ASSERT_EQ(t.edges.size(), t.nodes.size()) << "one edge per node below the prefix root, request " << r;
    EXPECT_EQ(t.prefix, rq.kv_len - rq.q_len);
    int words = 0;
    const std::vector<uint64_t> anc = tree_ancestors(rq.tree_parents, &words);
    int deepest = 0;
    for (int i = 0; i < rq.q_len; ++i) {
      const TreeNodeItem& n = t.nodes[i];
      int ancestors = -1;  // the row holds the token itself
      for (int w = 0; w < words; ++w) ancestors += std::popcount(anc[static_cast<size_t>(i) * words + w]);
      EXPECT_EQ(n.token, i);
      EXPECT_EQ(n.parent, rq.tree_parents[i]);
      EXPECT_EQ(n.depth, ancestors) << "request " << r << " token " << i;
      EXPECT_EQ(n.position, t.prefix + i);
      EXPECT_EQ(n.x, n.depth + 1.f);
      EXPECT_EQ(n.y, static_cast<float>(i));
      EXPECT_EQ(t.edges[i].child, i);
      EXPECT_EQ(t.edges[i].parent, rq.tree_parents[i]);
      deepest = std::max(deepest, ancestors);
    }
    EXPECT_EQ(t.max_depth, deepest);
  }
  // request 2 is a chain: token i has i ancestors
  const TreeItems chain = build_tree_items(*s, 2);
  for (const TreeNodeItem& n : chain.nodes) EXPECT_EQ(n.depth, n.token);
}

// The block beside the tree is the plan's mask over the new tokens' keys: under a causal mask exactly
// the token and its ancestors; the prefix column counts the prefix keys each token sees.
TEST(GuiTree, BlockIsThePlansBitsTheTokenAndItsAncestors) {
  auto s = planned("eagle-tree-verify.json");
  const CaseSpec& c = s->spec();
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    const TreeItems t = build_tree_items(*s, r);
    const int n = t.q_len;
    int words = 0;
    const std::vector<uint64_t> anc = tree_ancestors(c.requests[r].tree_parents, &words);
    const RowMask& rm = s->plan.masks[r];
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(t.prefix_seen[i], t.prefix) << "causal, no window: the whole prefix";
      for (int j = 0; j < n; ++j) {
        const bool bit = t.block[static_cast<size_t>(i) * n + j];
        EXPECT_EQ(bit, ancestor_bit(anc, words, i, j)) << r << ": " << i << ", " << j;
        EXPECT_EQ(bit, allowed(rm, q_abs_of(rm, i), t.prefix + j));
      }
      // the highlighted path is the same set: the keys the token sees among the new tokens
      const std::vector<int> path = tree_path(t, i);
      ASSERT_FALSE(path.empty());
      EXPECT_EQ(path.front(), i);
      EXPECT_EQ(t.nodes[path.back()].parent, -1) << "the path ends at the token attached to the prefix";
      EXPECT_EQ(static_cast<int>(path.size()), t.nodes[i].depth + 1);
      for (int a : path) EXPECT_TRUE(ancestor_bit(anc, words, i, a));
    }
  }
  const TreeItems t0 = build_tree_items(*s, 0);
  EXPECT_EQ(tree_path(t0, 15), (std::vector<int>{15, 12, 7, 2, 0}));
  EXPECT_TRUE(tree_path(t0, -1).empty());
  EXPECT_TRUE(tree_path(t0, t0.q_len).empty());
}

// A window shorter than the prefix: the tree view reads the plan's bits, so the prefix column shows
// the keys the window leaves, not the whole prefix.
TEST(GuiTree, AWindowHidesPrefixKeysInTheView) {
  CaseFile f = read_case_file(example("eagle-tree-verify.json"));
  f.spec.attention.window = 300;
  auto s = planned(f);
  const TreeItems t = build_tree_items(*s, 0);
  const RowMask& rm = s->plan.masks[0];
  ASSERT_FALSE(t.empty());
  for (int i = 0; i < t.q_len; ++i) {
    EXPECT_LT(t.prefix_seen[i], t.prefix) << i;
    EXPECT_GT(t.prefix_seen[i], 0) << i;
    EXPECT_EQ(t.prefix_seen[i], allowed_in(rm, q_abs_of(rm, i), 0, t.prefix)) << i;
  }
}

// A tree over kMaxTreeNodes tokens is not drawn cell by cell: the view says so instead.
TEST(GuiTree, ATreeTooLargeToDrawSaysSo) {
  CaseFile f = read_case_file(example("eagle-tree-verify.json"));
  RequestSpec& rq = f.spec.requests[2];
  rq.q_len = kMaxTreeNodes + 100;
  rq.kv_len = rq.q_len + 50;
  rq.tree_parents.resize(rq.q_len);
  for (int i = 0; i < rq.q_len; ++i) rq.tree_parents[i] = i - 1;  // a chain
  auto s = planned(f);
  const TreeItems t = build_tree_items(*s, 2);
  EXPECT_TRUE(t.too_large);
  EXPECT_TRUE(t.empty());
  EXPECT_NE(t.note.find(std::to_string(rq.q_len)), std::string::npos) << t.note;
  EXPECT_TRUE(tree_path(t, 5).empty());
  EXPECT_FALSE(build_tree_items(*s, 0).too_large);
}

TEST(GuiTree, NoTreeNoNodesAndTheGeometryHoldsTheRows) {
  auto plain = planned("gpt-oss-sinks-sliding.json");
  EXPECT_TRUE(build_tree_items(*plain, 0).empty());
  EXPECT_FALSE(build_tree_items(*plain, 0).too_large);

  auto s = planned("eagle-tree-verify.json");
  const TreeItems t = build_tree_items(*s, 0);
  for (float avail : {1e9f, 400.f, 120.f}) {
    const TreeGeometry g = tree_geometry(t, avail, 60, 80);
    EXPECT_GE(g.row, 6.f);
    EXPECT_LE(g.row, 22.f);
    if (avail < 1e8f && g.row > 6.f) {
      EXPECT_LE(g.height, avail + 0.5f);
    }
    // left to right without overlap: tree columns, labels, block (square cells), prefix column
    for (const TreeNodeItem& n : t.nodes) {
      EXPECT_GT(g.node_x(n), 0.f);
      EXPECT_LT(g.node_x(n), g.tree_w);
      EXPECT_GE(g.row_y(n.token), g.top + g.row);  // row -1 is the prefix root's
      EXPECT_LE(g.row_y(n.token) + g.row, g.height + 0.01f);
    }
    EXPECT_GE(g.label_x, g.tree_w);
    EXPECT_GE(g.block_x, g.label_x + g.label_w);
    EXPECT_GE(g.prefix_x, g.block_x + t.q_len * g.row);
    EXPECT_GE(g.width, g.prefix_x + g.prefix_w);
    // hovering a row picks its token: the node's centre, a row's edges; the root's row and below pick none
    for (const TreeNodeItem& n : t.nodes) {
      EXPECT_EQ(tree_row_at(g, t.q_len, g.row_y(n.token) + g.row / 2), n.token);
      EXPECT_EQ(tree_row_at(g, t.q_len, g.row_y(n.token) + 0.01f), n.token);
      EXPECT_EQ(tree_row_at(g, t.q_len, g.row_y(n.token) + g.row - 0.01f), n.token);
    }
    EXPECT_EQ(tree_row_at(g, t.q_len, g.row_y(-1) + g.row / 2), -1);
    EXPECT_EQ(tree_row_at(g, t.q_len, 1.f), -1);
    EXPECT_EQ(tree_row_at(g, t.q_len, g.height + 1), -1);
  }
}

// The sink is a term of its own: one step, the first, that starts the row's state (m = s_h x log2(e),
// d = 1); its share of the mass beside the keys' probabilities (together 1), and its term inside d at
// every tile whose d holds it.
TEST(GuiSoftmax, SinkStartsTheRowWithItsShareOfTheMass) {
  const CaseSpec c = read_case_file(example("gpt-oss-sinks-sliding.json")).spec;
  const SoftmaxTrace t = explain_case(c, 0, 0, 0);
  ASSERT_FALSE(std::isinf(t.sink));
  const SoftmaxView v = build_softmax_view(t, -1);
  ASSERT_TRUE(v.has_sink);
  EXPECT_EQ(v.events.size(), 1 + t.steps.size() + t.partials.size() + t.merges.size() + 1);
  EXPECT_EQ(std::count_if(v.events.begin(), v.events.end(), [](const SoftmaxEvent& e) { return e.kind == SoftmaxEvent::kSink; }),
            1);
  ASSERT_EQ(v.events[0].kind, SoftmaxEvent::kSink) << "the sink starts the row, before any key";
  ASSERT_FALSE(t.steps.empty());
  EXPECT_EQ(t.steps[0].m_old, t.sink2);
  EXPECT_EQ(v.sink2, t.sink2);
  EXPECT_NEAR(v.sink2, t.sink * std::log2(std::exp(1.0)), 1e-5);
  EXPECT_NE(v.events[0].text.find("no value"), std::string::npos) << v.events[0].text;
  EXPECT_NE(v.events[0].state.find("d = 1"), std::string::npos) << v.events[0].state;
  EXPECT_EQ(v.sink_logit, t.sink);
  EXPECT_EQ(v.sink_prob, t.sink_prob);
  EXPECT_GT(v.sink_prob, 0.0);
  double keys = 0;
  for (float p : v.probs) keys += p;
  EXPECT_NEAR(keys + v.sink_prob, 1.0, 1e-5);
  EXPECT_LT(keys, 1.0 - v.sink_prob / 2) << "the keys alone no longer sum to 1";
  // the line names the sink's logit, its start of the state and its share, in the header and the final state
  char share[32];
  std::snprintf(share, sizeof share, "%.5g", t.sink_prob);
  EXPECT_NE(v.sink_line.find(share), std::string::npos) << v.sink_line;
  EXPECT_NE(v.sink_line.find("starts the row's state"), std::string::npos) << v.sink_line;
  EXPECT_NE(v.header.find(v.sink_line), std::string::npos);
  EXPECT_NE(v.events.back().state.find(v.sink_line), std::string::npos);
  // per tile: the sink's term inside d where d holds it (way 0 of the output), else not drawn
  ASSERT_EQ(v.sink_series.size(), v.d_series.size());
  int held = 0;
  for (size_t i = 0; i < v.sink_series.size(); ++i) {
    if (t.steps[i].way != 0) {
      EXPECT_TRUE(std::isnan(v.sink_series[i]));
      continue;
    }
    ++held;
    EXPECT_NEAR(v.sink_series[i], std::exp2(v.sink2 - t.steps[i].m_new), 1e-6 * v.sink_series[i]);
    EXPECT_LE(v.sink_series[i], v.d_series[i] * (1 + 1e-6));
  }
  EXPECT_GT(held, 0);
  for (const SoftmaxEvent& e : v.events)
    if (e.kind == SoftmaxEvent::kTile) {
      EXPECT_NE(e.state.find("sink's term"), std::string::npos) << e.state;
    }
}

// A split row (a decode row over KV chunks): the sink starts the first chunk's state, so its step
// comes first, its partial carries it and the merges count it once.
TEST(GuiSoftmax, SplitRowStartsTheFirstChunkAtTheSink) {
  const CaseSpec c = read_case_file(example("gpt-oss-sinks-full.json")).spec;
  const SoftmaxTrace t = explain_case(c, 1, 0, 3);
  ASSERT_TRUE(t.split);
  const SoftmaxView v = build_softmax_view(t, -1);
  ASSERT_TRUE(v.has_sink);
  int sinks = 0, first_merge = -1, sink_at = -1;
  for (int i = 0; i < static_cast<int>(v.events.size()); ++i) {
    if (v.events[i].kind == SoftmaxEvent::kMerge && first_merge < 0) first_merge = i;
    if (v.events[i].kind == SoftmaxEvent::kSink) ++sinks, sink_at = i;
  }
  EXPECT_EQ(sinks, 1);
  EXPECT_GT(first_merge, 0);
  EXPECT_EQ(sink_at, 0);
  EXPECT_EQ(t.merges.size() + 1, t.partials.size());
  EXPECT_NE(v.sink_line.find("first chunk"), std::string::npos) << v.sink_line;
  for (size_t i = 0; i < t.steps.size(); ++i) {
    const bool first = i == 0 || t.steps[i - 1].chunk != t.steps[i].chunk || t.steps[i - 1].way != t.steps[i].way;
    if (first) {
      EXPECT_EQ(t.steps[i].m_old, t.steps[i].chunk == 0 ? t.sink2 : -INFINITY) << "step " << i;
    }
    EXPECT_EQ(std::isnan(v.sink_series[i]), t.steps[i].chunk != 0 || t.steps[i].way != 0) << "step " << i;
  }
  double keys = 0;
  for (float p : v.probs) keys += p;
  EXPECT_NEAR(keys + v.sink_prob, 1.0, 1e-5);
}

TEST(GuiSoftmax, NoSinkNoSinkItems) {
  const CaseSpec c = read_case_file(example("gemma2-window-softcap.json")).spec;
  const SoftmaxView v = build_softmax_view(explain_case(c, 0, 0, 0), -1);
  EXPECT_FALSE(v.has_sink);
  EXPECT_TRUE(v.sink_series.empty());
  EXPECT_TRUE(v.sink_line.empty());
  EXPECT_EQ(v.header.find("sink"), std::string::npos);
  for (const SoftmaxEvent& e : v.events) EXPECT_NE(e.kind, SoftmaxEvent::kSink);
}

namespace {

struct Shot {
  int w = 0, h = 0;
  std::vector<unsigned char> px;
  int64_t count(bool (*pred)(const unsigned char*)) const {
    int64_t n = 0;
    for (size_t i = 0; i + 3 < px.size(); i += 4) n += pred(&px[i]);
    return n;
  }
};

bool screenshot(const std::string& case_file, const std::string& tab, Shot* img, std::string* log) {
  attnscope::testing::GuiShot s =
      attnscope::testing::gui_screenshot(ATTNSCOPE_GUI, case_file + " --size 1280x800 --tab " + tab, "st_" + tab);
  *log = s.log;
  img->w = s.w, img->h = s.h, img->px = std::move(s.px);
  return s.rc == 0 && !img->px.empty();
}

bool near(const unsigned char* p, int r, int g, int b) {
  return std::abs(p[0] - r) < 14 && std::abs(p[1] - g) < 14 && std::abs(p[2] - b) < 14;
}

}  // namespace

// The Mask tab of a tree case draws the tree (node blue), and the selected token's path (orange).
TEST(GuiTreeShot, MaskTabDrawsTheTreeAndAPath) {
  if (!attnscope::testing::have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  Shot img;
  std::string log;
  ASSERT_TRUE(screenshot(example("eagle-tree-verify.json"), "mask", &img, &log)) << log;
  const int64_t nodes = img.count([](const unsigned char* p) { return near(p, 80, 120, 185); });
  const int64_t path = img.count([](const unsigned char* p) { return near(p, 255, 150, 40); });
  std::printf("tree node pixels %lld, path pixels %lld\n", static_cast<long long>(nodes), static_cast<long long>(path));
  EXPECT_GT(nodes, 800) << "the tree's nodes";
  EXPECT_GT(path, 800) << "the highlighted path";
}

// The Softmax tab of a sinks case draws the sink's bar and its d + e^(s_h - m) line (magenta).
TEST(GuiSoftmaxShot, SoftmaxTabDrawsTheSink) {
  if (!attnscope::testing::have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  Shot img;
  std::string log;
  ASSERT_TRUE(screenshot(example("gpt-oss-sinks-sliding.json"), "softmax", &img, &log)) << log;
  const int64_t sink = img.count([](const unsigned char* p) { return near(p, 235, 110, 235); });
  std::printf("sink pixels %lld\n", static_cast<long long>(sink));
  EXPECT_GT(sink, 300) << "the sink's bar and line";
}

// The MLA view's numbers: the absorbed form reads the latent row once (576 x 2 bytes in bf16); the
// same model as per-head K and V would store 128 x (192 + 128) x 2; the non-absorbed form reads those.
TEST(GuiMla, LatentLayoutCountsBytesPerTokenAndPool) {
  auto d = planned("deepseek-v3-decode.json");
  const MlaLayoutItems a = build_mla_layout(*d);
  ASSERT_TRUE(a.mla);
  EXPECT_TRUE(a.absorbed);
  EXPECT_EQ(a.latent_bytes, 1152);
  EXPECT_EQ(a.kernel_bytes, 1152);
  EXPECT_EQ(a.per_head_bytes, 128 * (192 + 128) * 2);
  EXPECT_NEAR(a.ratio, 81920.0 / 1152.0, 1e-9);
  EXPECT_EQ(a.tokens, static_cast<int64_t>(d->plan.pages.num_pages) * 64);
  auto p = planned("deepseek-v3-prefill.json");
  const MlaLayoutItems n = build_mla_layout(*p);
  EXPECT_FALSE(n.absorbed);
  EXPECT_EQ(n.kernel_bytes, 128 * (192 + 128) * 2);
  EXPECT_FALSE(build_mla_layout(*planned("eagle-tree-verify.json")).mla);
}

// The Pages tab of an MLA case draws the latent row: its ckv part (blue) far wider than its kpe (amber).
TEST(GuiMlaShot, PagesTabDrawsTheLatentRow) {
  if (!attnscope::testing::have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  Shot img;
  std::string log;
  // the example's heads and latent, shorter requests: the screenshot waits for the CPU backends
  CaseSpec c = read_case_file(example("deepseek-v3-decode.json")).spec;
  c.requests = {{1, 700}, {1, 300}, {1, 65}};
  c.backends = {"cpu.reference"};
  c.comparisons.clear();
  const fs::path file = fs::temp_directory_path() / ("attnscope_mla_" + std::to_string(::getpid()) + ".json");
  write_text_file(file.string(), case_to_text(c));
  const bool shot = screenshot(file.string(), "pages", &img, &log);
  fs::remove(file);
  ASSERT_TRUE(shot) << log;
  const int64_t ckv = img.count([](const unsigned char* p) { return near(p, 110, 170, 230); });
  const int64_t kpe = img.count([](const unsigned char* p) { return near(p, 235, 180, 90); });
  std::printf("ckv pixels %lld, kpe pixels %lld\n", static_cast<long long>(ckv), static_cast<long long>(kpe));
  EXPECT_GT(kpe, 500) << "the kpe part";
  EXPECT_GT(ckv, 5 * kpe) << "ckv is 512 of the row's 576 dims";
}

// The Split-KV tab's MLA view: one lane per cluster whose items cover every request's keys once per
// query tile; FlashInfer's own plan where the family is compiled (then it agrees), else the model's.
TEST(GuiMla, SplitKvLanesCoverEveryTilesKeys) {
  auto d = planned("deepseek-v3-decode.json");
  const MlaPlanItems it = build_mla_plan_items(*d);
  ASSERT_TRUE(it.mla);
  ASSERT_FALSE(it.lanes.empty());
  int64_t keys = 0, want = 0;
  for (const auto& lane : it.lanes)
    for (const auto& w : lane) keys += w.kv_end - w.kv_start;
  const int tile = 64 * it.cluster_size;
  for (const auto& r : d->spec().requests) want += static_cast<int64_t>(r.kv_len) * ((r.q_len * 128 + tile - 1) / tile);
  EXPECT_EQ(keys, want);
  EXPECT_FALSE(it.line.empty());
  if (it.available) {
    EXPECT_TRUE(it.agrees) << it.line;
  }
  EXPECT_FALSE(build_mla_plan_items(*planned("deepseek-v3-prefill.json")).mla) << "the non-absorbed form has no MLAPlan";
}
