// The Merge tab (issue 44 item 6): its numbers checked without a window on the four /parallel examples
// (shares, the merge's weights, the errors against the reference's partials, the bases), then the tab
// drawn under Xvfb for each example, the base-mix example showing its wrong base in red.
#include <gtest/gtest.h>
#include <stb/stb_image.h>  // the implementation is in test_gui.cpp
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "attnscope/partition.h"
#include "case_json.h"
#include "gui_shot.h"
#include "live_session.h"
#include "panels/merge_panel.h"
#include "session.h"

using namespace attnscope;
using namespace attnscope::gui;
namespace fs = std::filesystem;

namespace {

std::string example(const std::string& name) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/" + name; }

std::shared_ptr<Session> session_of(const std::string& name) { return run_session(read_case_file(example(name))); }

const char* const kExamples[] = {"dcp-decode-interleave.json", "cascade-shared-prefix.json", "lse-base-mixup.json",
                                 "dcp-fully-masked-shard.json"};

const MergeBaseRow* base_of(const MergeItems& it, const std::string& id) {
  for (const auto& b : it.bases)
    if (b.backend == id) return &b;
  return nullptr;
}
const MergeRowBackend* row_of(const MergeRowItems& it, const std::string& id) {
  for (const auto& b : it.backends)
    if (b.backend == id) return &b;
  return nullptr;
}

}  // namespace

// keys_in counts without visiting the keys; partition_of_key visits them: the two agree on every range
// of several context layouts (c, i) and of a cascade, including ranges that start and end mid-run.
TEST(MergeGui, KeysInCountsWhatPartitionOfKeySays) {
  CaseSpec c = read_case_file(example("dcp-decode-interleave.json")).spec;
  auto check = [&](const std::string& what) {
    for (int64_t k0 : {0, 1, 7, 15, 16, 63, 100})
      for (int64_t k1 : {k0 + 1, k0 + 5, k0 + 64, k0 + 333, int64_t{1000}}) {
        if (k1 <= k0) continue;
        const std::vector<int64_t> n = keys_in(c, 0, k0, k1);
        std::vector<int64_t> want(n.size(), 0);
        for (int64_t k = k0; k < k1; ++k) ++want.at(partition_of_key(c, 0, k));
        ASSERT_EQ(n, want) << what << " keys [" << k0 << ", " << k1 << ")";
      }
  };
  for (int ranks : {2, 3, 4, 8})
    for (int il : {1, 4, 16, 64}) {
      c.parallel->context = ContextParallelSpec{ranks, il};
      check("context " + std::to_string(ranks) + " x " + std::to_string(il));
    }
  c.parallel->context.reset();
  c.parallel->cascade = CascadeSpec{32};
  check("cascade 32");
}

// Each example: one key count per partition and request, summing to the request's keys; the picked
// row's shares sum to 1, an empty partial has share and weight 0, nothing is NaN, and a merge read in
// its own base gives each partial its share.
TEST(MergeGui, EveryExampleHasItsPartitionsSharesAndErrors) {
  for (const char* name : kExamples) {
    SCOPED_TRACE(name);
    auto s = session_of(name);
    const MergeItems it = build_merge_items(*s);
    ASSERT_TRUE(it.layout.partitioned);
    const size_t parts = it.layout.labels.size();
    ASSERT_GE(parts, 2u);
    for (size_t r = 0; r < s->spec().requests.size(); ++r) {
      int64_t sum = 0;
      for (int64_t k : it.layout.keys[r]) sum += k;
      EXPECT_EQ(sum, s->spec().requests[r].kv_len) << "request " << r;
    }
    ASSERT_FALSE(it.timings.empty()) << "the host backends ran over the partitions";
    for (const auto& t : it.timings) EXPECT_EQ(t.part_ms.size(), parts) << t.backend;
    const RowPick w = worst_merged_row(*s);
    const MergeRowItems row = build_merge_row(*s, w.request, w.query, w.head);
    ASSERT_FALSE(row.reference.empty());
    ASSERT_GE(row.backends.size(), 2u) << "the reference and at least one other";
    for (const MergeRowBackend& b : row.backends) {
      SCOPED_TRACE(b.backend);
      ASSERT_EQ(b.parts.size(), parts);
      double share = 0, weight = 0;
      for (const MergePartial& q : b.parts) {
        EXPECT_FALSE(std::isnan(q.share) || std::isnan(q.weight) || std::isnan(q.lse));
        if (q.keys == 0) {
          EXPECT_EQ(q.lse, -INFINITY) << "a partial with no key of the row";
          EXPECT_EQ(q.share, 0.0);
          EXPECT_EQ(q.weight, 0.0);
        }
        if (b.reference) {
          EXPECT_EQ(q.err, -1) << "the reference's partials are the ones compared against";
        } else if (q.keys > 0) {
          EXPECT_GE(q.err, 0);
        }
        share += q.share;
        weight += q.weight;
      }
      EXPECT_NEAR(share, 1.0, 1e-9);
      EXPECT_NEAR(weight, 1.0, 1e-9);
      EXPECT_EQ(b.merged_err >= 0, !b.reference);
    }
    // the row shown first is the one with the largest merged error, and it is that backend's error
    const MergeRowBackend* worst = row_of(row, w.backend);
    ASSERT_NE(worst, nullptr);
    EXPECT_DOUBLE_EQ(worst->merged_err, w.err);
  }
}

// lse-base-mixup merges cpu.tiled's natural-log partials as base 2: the tab shows the base it was read in
// beside its own (a mismatch), the base check's verdict (its own base merges right), the merge's weights
// off the partials' shares and a merged LSE off their mass. cpu.reference, read in its own base, shows
// none of it; nor does a case that names no merge base.
TEST(MergeGui, TheBaseMixupShowsItsWrongBase) {
  auto s = session_of("lse-base-mixup.json");
  const MergeItems it = build_merge_items(*s);
  const MergeBaseRow* tiled = base_of(it, "cpu.tiled");
  const MergeBaseRow* ref = base_of(it, "cpu.reference");
  ASSERT_TRUE(tiled && ref);
  EXPECT_TRUE(tiled->mismatch);
  EXPECT_EQ(tiled->native, "e");
  EXPECT_EQ(tiled->read, "2");
  ASSERT_TRUE(tiled->checked);
  EXPECT_GT(tiled->err_2, 10 * tiled->err_e) << "the wrong base's merge is far off the reference";
  EXPECT_NE(tiled->verdict.find("base e"), std::string::npos) << tiled->verdict;
  EXPECT_FALSE(tiled->check_disagrees) << "its descriptor is right; the case's merge_base is what is wrong";
  EXPECT_FALSE(ref->mismatch);
  EXPECT_FALSE(ref->checked);

  const RowPick w = worst_merged_row(*s);
  EXPECT_EQ(w.backend, "cpu.tiled");
  const MergeRowItems row = build_merge_row(*s, w.request, w.query, w.head);
  const MergeRowBackend* b = row_of(row, "cpu.tiled");
  ASSERT_NE(b, nullptr);
  bool differs = false;
  for (const auto& q : b->parts) differs |= q.weight_differs;
  EXPECT_TRUE(differs) << "the merge's weights are not the partials' shares";
  EXPECT_TRUE(b->lse_differs);
  const MergeRowBackend* r = row_of(row, "cpu.reference");
  ASSERT_NE(r, nullptr);
  for (const auto& q : r->parts) EXPECT_FALSE(q.weight_differs);
  EXPECT_FALSE(r->lse_differs);

  auto right = session_of("dcp-decode-interleave.json");
  const MergeItems ok = build_merge_items(*right);
  for (const auto& x : ok.bases) EXPECT_FALSE(x.mismatch) << x.backend;
  const RowPick wr = worst_merged_row(*right);
  for (const auto& x : build_merge_row(*right, wr.request, wr.query, wr.head).backends) {
    EXPECT_FALSE(x.lse_differs) << x.backend;
    for (const auto& q : x.parts) EXPECT_FALSE(q.weight_differs) << x.backend;
  }
}

// The live run (the GUI's) makes the base check too, and an edit's first frame shows the previous
// edit's results and checks marked stale; a sampled pass's marked sampled.
TEST(MergeGui, StaleAndSampledResultsAreMarked) {
  const CaseFile f = read_case_file(example("lse-base-mixup.json"));
  LiveOptions o;
  auto live = run_live(f, o);
  ASSERT_TRUE(live);
  ASSERT_FALSE(live->merge_checks.empty()) << "the live run checks the bases as the CLI's does";
  const MergeItems fresh = build_merge_items(*live);
  for (const auto& b : fresh.bases) EXPECT_FALSE(b.stale) << b.backend;
  ASSERT_TRUE(base_of(fresh, "cpu.tiled") && base_of(fresh, "cpu.tiled")->checked);

  CaseFile edited = f;
  edited.spec.data.seed = 7;
  auto planned = begin_session(edited, {});
  auto shown = with_stale_results(*planned, *live);
  const MergeItems stale = build_merge_items(*shown);
  ASSERT_FALSE(stale.bases.empty());
  for (const auto& b : stale.bases) EXPECT_TRUE(b.stale) << b.backend;
  for (const auto& t : stale.timings) EXPECT_TRUE(t.stale) << t.backend;
  ASSERT_TRUE(base_of(stale, "cpu.tiled")->checked) << "the previous edit's check, shown stale";
  const MergeRowItems row = build_merge_row(*shown, 0, 0, 0);
  for (const auto& b : row.backends) EXPECT_TRUE(b.stale) << b.backend;

  Session sampled = *live;
  sampled.sampled = {"cpu.reference"};
  sampled.diffs_sampled = true;
  const MergeItems si = build_merge_items(sampled);
  for (const auto& t : si.timings) EXPECT_EQ(t.sampled, t.backend == "cpu.reference") << t.backend;
  for (const auto& b : si.bases) EXPECT_TRUE(b.sampled) << b.backend;
}

// A case without /parallel: the tab has no partitions, and its one line says what /parallel is and
// where it is documented.
TEST(MergeGui, WithoutParallelItSaysWhatParallelIs) {
  auto s = session_of("prefix-lm.json");
  EXPECT_FALSE(build_merge_items(*s).layout.partitioned);
  const std::string line = kNotPartitionedLine;
  EXPECT_NE(line.find("/parallel"), std::string::npos);
  EXPECT_NE(line.find("docs/partitions.md"), std::string::npos);
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line";
}

// --- the tab drawn under Xvfb ---

namespace {

struct Shot {
  int rc = -1;
  std::string log;
  int w = 0, h = 0;
  std::vector<unsigned char> px;
  int64_t count(bool (*pred)(const unsigned char*)) const {
    int64_t n = 0;
    for (int y = 40; y < h - 30; ++y)  // the panel: not the menu, the tab bar or the status bar (its FAILED is red)
      for (int x = w * 30 / 100; x < w; ++x) n += pred(px.data() + (static_cast<size_t>(y) * w + x) * 4);
    return n;
  }
};

Shot shoot_merge(const std::string& file) {
  attnscope::testing::GuiShot g =
      attnscope::testing::gui_screenshot(ATTNSCOPE_GUI, example(file) + " --size 1280x800 --tab merge", "merge");
  Shot s;
  s.rc = g.rc, s.log = std::move(g.log), s.w = g.w, s.h = g.h, s.px = std::move(g.px);
  return s;
}

// The panel's partition colours 0 and 1 (Tableau blue and orange) and its "wrong base" red text.
bool rank0(const unsigned char* p) { return std::abs(p[0] - 31) < 8 && std::abs(p[1] - 119) < 8 && std::abs(p[2] - 180) < 8; }
bool rank1(const unsigned char* p) { return p[0] > 245 && std::abs(p[1] - 127) < 8 && p[2] < 30; }
bool wrong(const unsigned char* p) { return p[0] > 230 && p[1] > 95 && p[1] < 135 && p[2] > 70 && p[2] < 110; }

}  // namespace

class MergeScreenshot : public ::testing::TestWithParam<const char*> {};

// The tab draws every example without a view failing (a view that throws makes the screenshot run exit 1
// naming it), with its key axes and bars in the partitions' colours; only the base-mix example has red.
TEST_P(MergeScreenshot, DrawsWithoutError) {
  if (!attnscope::testing::have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const std::string file = GetParam();
  const Shot s = shoot_merge(file);
  ASSERT_EQ(s.rc, 0) << s.log;
  EXPECT_EQ(s.log.find("Internal error"), std::string::npos) << s.log;
  EXPECT_NE(s.log.find("tab merge"), std::string::npos) << s.log;
  ASSERT_EQ(s.w, 1280);
  EXPECT_GT(s.count(rank0), 3000) << "rank 0 / level 0 on the key axes and the bars";
  EXPECT_GT(s.count(rank1), 1500) << "rank 1 / level 1 (few keys in the fully masked example)";
  if (file == "lse-base-mixup.json")
    EXPECT_GT(s.count(wrong), 300) << "the wrong base, the merge's weights and the merged LSE in red";
  else
    EXPECT_LT(s.count(wrong), 50) << "nothing is read in the wrong base here";
}

INSTANTIATE_TEST_SUITE_P(ParallelExamples, MergeScreenshot, ::testing::ValuesIn(kExamples), [](const auto& info) {
  std::string n = info.param;
  n = n.substr(0, n.find('.'));
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
});
