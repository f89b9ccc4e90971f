// DeepSeek sparse attention's GUI views (issue 46 item 5, app/gui/panels/sparse_data.h, sparse_view.h):
// the selection per row, its slots in the pool and its share of the dense softmax mass, checked on
// values written by hand and against the model's recall_of_mass; then the three tabs as screenshots
// under Xvfb, whose pixels must show kept and dropped keys, selected pages and per-head bars.
#include <gtest/gtest.h>
#include <stb/stb_image.h>  // the implementation is in test_gui.cpp

#include <cmath>
#include <string>
#include <vector>

#include "attnscope/plan.h"
#include "attnscope/softmax_trace.h"
#include "attnscope/sparse.h"
#include "attnscope/workload.h"
#include "case_json.h"
#include "draw/colormap.h"
#include "gui_shot.h"
#include "panels/softmax_panel.h"
#include "panels/sparse_data.h"
#include "panels/sparse_view.h"

using namespace attnscope;
using namespace attnscope::gui;

namespace {

std::string source(const std::string& path) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/" + path; }

// Two query rows (positions 6 and 7) over 8 keys, the selection given: row 0 keeps 0, 5, 2; row 1 keeps
// 7, 3 and pads with -1. Page size 4: two pages.
CaseSpec given_case(bool absorbed = true) {
  const std::string mla = absorbed ? R"("mla": {})" : R"("mla": {"absorbed": false})";
  return parse_case_text(R"({"schema": "attnscope/case@1", "requests": [{"q_len": 2, "kv_len": 8}], "heads": {"qo": 4},
    )" + mla + R"(, "dtype": "bf16", "kv_cache": {"page_size": 4},
    "sparse": {"top_k": 3, "indices": [[[0, 5, 2], [7, 3, -1]]]}})")
      .spec;
}

// The indexer's case: 3 rows over 40 keys, top_k 16, so every row drops some keys.
CaseSpec indexer_case(bool absorbed) {
  return parse_case_text(R"({"schema": "attnscope/case@1", "requests": [{"q_len": 3, "kv_len": 40}, {"q_len": 1, "kv_len": 9}],
    "heads": {"qo": 4}, "mla": {"absorbed": )" +
                         std::string(absorbed ? "true" : "false") + R"(}, "dtype": "bf16",
    "sparse": {"top_k": 16, "index_heads": 4, "index_head_dim": 32, "scoring": "fp64"}})")
      .spec;
}

}  // namespace

// The row's counts and kept flags are the given indices; the mass is a softmax (sums to 1) and the
// kept share is the sum over keys 0, 5, 2 (row 0) and 7, 3 (row 1).
TEST(GuiSparse, RowOfGivenIndicesByHand) {
  const CaseSpec c = given_case();
  const Plan p = make_plan(c);
  const SparseSelection& sel = (*p.sparse)[0];
  const SparseRow r0 = sparse_row(c, sel, 0, 0, 1, true);
  EXPECT_EQ(r0.q_abs, 6);
  EXPECT_EQ(r0.visible, 7);
  EXPECT_EQ(r0.kept, 3);
  EXPECT_EQ(r0.padding, 0);
  EXPECT_EQ(r0.is_kept, (std::vector<uint8_t>{1, 0, 1, 0, 0, 1, 0}));
  ASSERT_EQ(r0.mass.size(), 7u);
  double sum = 0;
  for (double m : r0.mass) sum += m;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_NEAR(r0.kept_mass, r0.mass[0] + r0.mass[2] + r0.mass[5], 1e-15);
  const SparseRow r1 = sparse_row(c, sel, 0, 1, 1, true);
  EXPECT_EQ(r1.visible, 8);
  EXPECT_EQ(r1.kept, 2);
  EXPECT_EQ(r1.padding, 1);
  EXPECT_EQ(r1.is_kept, (std::vector<uint8_t>{0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_NEAR(r1.kept_mass, r1.mass[3] + r1.mass[7], 1e-15);
  EXPECT_TRUE(sparse_row(c, sel, 0, 1, 1, false).mass.empty()) << "no mass asked, none computed";
  EXPECT_NE(sparse_row_line(r1).find("kept 2 of 8 visible tokens (top_k 3, given indices), 1 x -1 padding"), std::string::npos)
      << sparse_row_line(r1);
}

// Every head's recall is the model's recall_of_mass over the workload's Q and K (the GUI derives the
// rows itself), in both MLA forms; the head asked for is `kept_mass`.
TEST(GuiSparse, RecallIsTheModelsRecallOfMass) {
  for (bool absorbed : {true, false}) {
    const CaseSpec c = indexer_case(absorbed);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    for (int r = 0; r < 2; ++r)
      for (int q = 0; q < c.requests[r].q_len; ++q) {
        const SparseSelection& sel = (*p.sparse)[r];
        const SparseRow row = sparse_row(c, sel, r, q, 2, true, true);
        const std::vector<double> want = recall_of_mass(c, p.pages, w, r, q, sel.row(q), sel.top_k);
        ASSERT_EQ(row.recall.size(), want.size());
        for (size_t h = 0; h < want.size(); ++h) EXPECT_NEAR(row.recall[h], want[h], 1e-12) << absorbed << r << q << h;
        EXPECT_EQ(row.kept_mass, row.recall[2]);
        if (r == 1) {
          EXPECT_NEAR(row.kept_mass, 1.0, 1e-12) << "9 visible keys <= top_k 16: all kept";
        }
        if (r == 0) {
          EXPECT_LT(row.kept_mass, 1.0) << "38+ visible keys, 16 kept";
        }
      }
  }
}

// The Mask tab's grid, one cell per key: row 0 (position 6) kept at 0, 2, 5, dropped at 1, 3, 4, 6,
// masked at 7; row 1 kept at 3, 7, dropped elsewhere. A kept cell's mass is its key's.
TEST(GuiSparse, MaskGridByHand) {
  const CaseSpec c = given_case();
  const Plan p = make_plan(c);
  const SparseMaskItems m = build_sparse_mask_items(c, (*p.sparse)[0], 0, 1, 0);
  ASSERT_EQ(m.rows, 2);
  ASSERT_EQ(m.cols, 8);
  EXPECT_EQ(m.cls, (std::vector<uint8_t>{2, 1, 2, 1, 1, 2, 1, 0, 1, 1, 1, 2, 1, 1, 1, 2}));
  EXPECT_EQ(m.rows_with_mass, 2);
  EXPECT_EQ(m.row.query, 1) << "the explained row";
  const SparseRow r0 = sparse_row(c, (*p.sparse)[0], 0, 0, 0, true);
  for (int k = 0; k < 8; ++k) {
    if (m.cls[k] == 2)
      EXPECT_FLOAT_EQ(m.mass[k], static_cast<float>(r0.mass[k])) << k;
    else
      EXPECT_TRUE(std::isnan(m.mass[k])) << k;
  }
  const std::vector<uint32_t> px = sparse_mask_pixels(m);
  EXPECT_EQ(px[7], sparse_masked_colour());
  EXPECT_EQ(px[1], sparse_dropped_colour());
  float mx = 0;
  for (float v : m.mass)
    if (!std::isnan(v)) mx = std::max(mx, v);
  for (int i : {0, 2, 5, 11, 15}) EXPECT_EQ(px[i], sparse_mass_colour(m.mass[i], mx)) << i;
  // pooled, 8 keys into 4 columns of 2: a cell is kept when any of its keys is; row 0's keys 6, 7 are
  // dropped and masked (dropped wins), row 1 keeps only 3 and 7
  const SparseMaskItems pooled = build_sparse_mask_items(c, (*p.sparse)[0], 0, 0, 0, 4);
  EXPECT_EQ(pooled.cls, (std::vector<uint8_t>{2, 2, 2, 1, 1, 2, 1, 2}));
  EXPECT_EQ(build_sparse_mask_items(c, (*p.sparse)[0], 0, 0, 0, 1).cls, (std::vector<uint8_t>{2})) << "one cell of both rows";
  EXPECT_NE(sparse_shade_line(m, 2).find("head 0's dense fp64 softmax"), std::string::npos);
  EXPECT_NE(sparse_shade_line(m, 2).find("for every row"), std::string::npos);
}

// Log scale over four decades: the largest mass is the ramp's top, 10^-2 of it halfway (0.2 + 0.8 x
// 0.5), 10^-4 and less the bottom used (0.2).
TEST(GuiSparse, MassColourScale) {
  EXPECT_EQ(sparse_mass_colour(0.3, 0.3), pack_abgr(ramp(1.f)));
  EXPECT_EQ(sparse_mass_colour(0.003, 0.3), pack_abgr(ramp(0.6f)));
  EXPECT_EQ(sparse_mass_colour(0.3e-4, 0.3), pack_abgr(ramp(0.2f)));
  EXPECT_EQ(sparse_mass_colour(1e-9, 0.3), pack_abgr(ramp(0.2f)));
  EXPECT_EQ(sparse_mass_colour(0, 0.3), pack_abgr(ramp(0.2f)));
}

// A page table written by hand: page size 4, request 0 on pages [3, 1], request 1 on page [2]; page 0
// the null page.
static PageTable hand_table() {
  PageTable pt;
  pt.page_size = 4;
  pt.num_pages = 4;
  pt.indptr = {0, 2, 3};
  pt.indices = {3, 1, 2};
  pt.last_page_len = {4, 3};
  pt.owner = {kPageNull, 0, 1, 0};
  return pt;
}

// Slots through hand_table(): kept 5 -> 1*4+1 = 5, 0 -> 3*4+0 = 12, 2 -> 14.
TEST(GuiSparse, SlotsByHand) {
  PageTable pt = hand_table();
  const int row[] = {5, 0, 2, -1, -1};
  const SparseSlots s = sparse_slots_of_row(pt, 0, 0, row, 5);
  EXPECT_EQ(s.kept, 3);
  EXPECT_EQ(s.padding, 2);
  EXPECT_EQ(s.outside, 0);
  EXPECT_EQ(s.page_count, (std::vector<int>{0, 1, 0, 2}));
  EXPECT_EQ(s.pages_touched, 2);
  EXPECT_EQ(s.first_slot, (std::vector<int64_t>{5, 12, 14}));
  EXPECT_NE(sparse_slots_line(s).find("3 slots in 2 pages"), std::string::npos) << sparse_slots_line(s);
  EXPECT_NE(sparse_slots_line(s).find("2 x -1 padding"), std::string::npos);
  EXPECT_NE(sparse_slots_line(s).find("5 -> 5, 0 -> 12, 2 -> 14"), std::string::npos);
  EXPECT_NE(sparse_slots_line(s).find("none outside"), std::string::npos);
  // index bugs: a table entry pointing at request 1's page 2 (a translation off by a page), and an
  // index past the request's pages
  pt.indices = {3, 2, 2};
  const int bad[] = {4, 9, -1};
  const SparseSlots b = sparse_slots_of_row(pt, 0, 0, bad, 3);
  EXPECT_EQ(b.kept, 2);
  EXPECT_EQ(b.outside, 2);
  EXPECT_EQ(b.page_count, (std::vector<int>{0, 0, 1, 0}));
  EXPECT_EQ(b.page_outside, (std::vector<uint8_t>{0, 0, 1, 0}));
  EXPECT_EQ(b.first_slot, (std::vector<int64_t>{8, -1}));
  EXPECT_NE(sparse_slots_line(b).find("2 OUTSIDE the request's pages"), std::string::npos) << sparse_slots_line(b);
}

// The pictures' pixels by hand. Strip: 4 keys of mass 0.1, 0.2, 0.3, 0.4, keys 0 and 2 kept, in 2
// columns: column 0 kept 0.1 under dropped 0.2, column 1 kept 0.3 under dropped 0.4; the largest column
// 0.7 fills 7 rows, so column 0 has 1 kept row and 2 dropped, column 1 3 and 4; a rug row under both.
TEST(GuiSparse, ImagesByHand) {
  SparseRow r;
  r.visible = 4;
  r.mass = {0.1, 0.2, 0.3, 0.4};
  r.is_kept = {1, 0, 1, 0};
  double mx = 0;
  const SparseImage st = sparse_strip_image(r, 2, 7, 1, &mx);
  ASSERT_EQ(st.w, 2);
  ASSERT_EQ(st.h, 7 + 2 + 1);
  EXPECT_NEAR(mx, 0.7, 1e-12);
  auto at = [](const SparseImage& im, int x, int y) { return im.px[static_cast<size_t>(y) * im.w + x]; };
  const uint32_t k0 = sparse_mass_colour(0.1, 0.3), k1 = sparse_mass_colour(0.3, 0.3), d = sparse_dropped_colour();
  const std::vector<uint32_t> col0 = {0, 0, 0, 0, d, d, k0, 0, 0, sparse_kept_colour()};
  const std::vector<uint32_t> col1 = {d, d, d, d, k1, k1, k1, 0, 0, sparse_kept_colour()};
  for (int y = 0; y < st.h; ++y) {
    EXPECT_EQ(at(st, 0, y), col0[y]) << y;
    EXPECT_EQ(at(st, 1, y), col1[y]) << y;
  }
  // heads: recall 0.5 and 1 over 4 rows, head 1 the one shown (yellow)
  r.recall = {0.5, 1.0};
  r.head = 1;
  const SparseImage hd = sparse_head_image(r, 4);
  const uint32_t yellow = pack_abgr({253, 231, 37, 255});
  EXPECT_EQ((std::vector<uint32_t>{at(hd, 0, 0), at(hd, 0, 1), at(hd, 0, 2), at(hd, 0, 3)}),
            (std::vector<uint32_t>{d, d, sparse_kept_colour(), sparse_kept_colour()}));
  for (int y = 0; y < 4; ++y) EXPECT_EQ(at(hd, 1, y), yellow) << y;
  // slots: SlotsByHand's table [3, 1], kept tokens 5, 0, 2: column 0 (tokens 0-3) rows 0 and 2,
  // column 1 (tokens 4-7) row 1
  const PageTable pt = hand_table();
  const int row[] = {5, 0, 2, -1};
  const SparseImage sl = sparse_slot_image(sparse_slots_of_row(pt, 0, 0, row, 4));
  ASSERT_EQ(sl.w, 2);
  ASSERT_EQ(sl.h, 4);
  for (int y = 0; y < 4; ++y) {
    EXPECT_EQ(at(sl, 0, y) == kSlotSelected, y == 0 || y == 2) << y;
    EXPECT_EQ(at(sl, 1, y) == kSlotSelected, y == 1) << y;
  }
  EXPECT_EQ(kSlotSelected, pack_abgr({120, 230, 255, 255}));
}

// The Softmax tab's summary of three heads' recall written by hand: min 0.5 (head 0), mean 0.7, max 0.9 (head 1).
TEST(GuiSparse, MassLinesByHand) {
  SparseRow r;
  r.request = 1;
  r.query = 2;
  r.q_abs = 9;
  r.visible = 10;
  r.top_k = 4;
  r.kept = 4;
  r.head = 2;
  r.heads = 3;
  r.mass.assign(10, 0.1);
  r.kept_mass = 0.7;
  r.recall = {0.5, 0.9, 0.7};
  const std::vector<std::string> l = sparse_mass_lines(r);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_NE(l[0].find("kept 4 of 10 visible tokens (top_k 4), 0 x -1 padding."), std::string::npos) << l[0];
  EXPECT_NE(sparse_row_line(r).find("0 x -1 padding; recall of mass (head 2) 0.7000, dropped 0.3000"), std::string::npos);
  EXPECT_NE(l[1].find("kept 0.7000, dropped 0.3000"), std::string::npos) << l[1];
  EXPECT_NE(l[2].find("all 3 heads: min 0.5000 (head 0), mean 0.7000, max 0.9000 (head 1)"), std::string::npos) << l[2];
  r.heads = 8;
  EXPECT_NE(sparse_mass_lines(r)[2].find("heads 0-2 of 8 (the rest past the GUI's budget)"), std::string::npos);
}

// The budgets: dsa-short-context's 2052-key rows fit every head in the Mask tab's (128 x 2052 x 576 <
// 2^28), deepseek-v32-dsa-decode's 8192 keys every head in the Softmax tab's (128 x 8192 x 576 < 2^30);
// the non-absorbed form's K rows cost 128 x 512 more per key.
TEST(GuiSparse, BudgetPerHead) {
  const CaseSpec c = read_case_file(source("examples/dsa-short-context.json")).spec;
  EXPECT_EQ(sparse_head_macs(c, 2052), 2052 * 576);
  EXPECT_LE(sparse_head_macs(c, 2052) * c.num_qo_heads, kSparseMassMacs);
  const CaseSpec v32 = read_case_file(source("examples/deepseek-v32-dsa-decode.json")).spec;
  EXPECT_LE(sparse_head_macs(v32, 8192) * v32.num_qo_heads, kSparseHeadsMacs) << "the Softmax tab's every head, 8192 keys";
  const CaseSpec n = indexer_case(false);
  EXPECT_EQ(sparse_head_macs(n, 10), 10 * (n.head_dim_qk + 128 * 512));
}

// dsa-short-context as its description counts: 300 kept + 1748 padding; position 2044 keeps its 2045
// visible tokens + 3 padding; position 2051 keeps 2048 of 2052; recall 1 exactly where all are kept.
// The Softmax tab's step-through of a /sparse row follows cpu.tiled's gathered form: its tiles are ranks
// among the kept tokens (row 1 of given_case keeps 7 then 3, in that order), and the header says so.
TEST(GuiSparse, StepThroughOfAGatheredRowNamesRanks) {
  const CaseSpec c = given_case();
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const SoftmaxTrace t = explain_row(c, p, w, 0, 1, 0);
  EXPECT_EQ(t.gathered, (std::vector<int>{7, 3}));
  EXPECT_FALSE(t.sparse) << "the Softmax tab's trace skips explain's sparse checks (its own job has the mass)";
  const SoftmaxView v = build_softmax_view(t, 0);
  EXPECT_NE(v.header.find("gathered (as the engines run sparse MLA): 2 kept tokens in rank order"), std::string::npos)
      << v.header;
  bool kept_label = false;
  for (const SoftmaxEvent& e : v.events) {
    EXPECT_EQ(e.text.find("  keys ["), std::string::npos) << e.text;
    kept_label = kept_label || e.text.find("  kept [0, 2)") != std::string::npos;
  }
  EXPECT_TRUE(kept_label);
}

TEST(GuiSparse, ShortContextExampleCounts) {
  const CaseSpec c = read_case_file(source("examples/dsa-short-context.json")).spec;
  const Plan p = make_plan(c);
  const SparseRow a = sparse_row(c, (*p.sparse)[0], 0, 0, 0, true);
  EXPECT_EQ(a.kept, 300);
  EXPECT_EQ(a.padding, 1748);
  EXPECT_NEAR(a.kept_mass, 1.0, 1e-12);
  const SparseRow b = sparse_row(c, (*p.sparse)[1], 1, 0, 0, false);
  EXPECT_EQ(b.q_abs, 2044);
  EXPECT_EQ(b.kept, 2045);
  EXPECT_EQ(b.padding, 3);
  const SparseRow d = sparse_row(c, (*p.sparse)[1], 1, 7, 0, true);
  EXPECT_EQ(d.visible, 2052);
  EXPECT_EQ(d.kept, 2048);
  EXPECT_EQ(d.padding, 0);
  EXPECT_LT(d.kept_mass, 1.0);
  EXPECT_GT(d.kept_mass, 0.9) << "4 of 2052 keys dropped";
}

namespace {

struct Shot {
  attnscope::testing::GuiShot s;
  int64_t count(int r, int g, int b, int tol = 6) const {
    int64_t n = 0;
    for (size_t i = 0; i + 3 < s.px.size(); i += 4)
      n += std::abs(s.px[i] - r) <= tol && std::abs(s.px[i + 1] - g) <= tol && std::abs(s.px[i + 2] - b) <= tol;
    return n;
  }
};

Shot shot(const std::string& tab) {
  return {attnscope::testing::gui_screenshot(
      ATTNSCOPE_GUI, source("tests/data/gui/dsa-dropped.json") + " --size 1280x800 --tab " + tab, "sparse_" + tab)};
}

}  // namespace

// The Mask tab: the dropped keys' grey (mask row and strip), the kept rug's teal and the explained row's
// legend drawn; a blank or plain-mask render has none of the grey.
TEST(GuiSparseShot, MaskTabDrawsKeptAndDroppedKeys) {
  if (!attnscope::testing::have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const Shot s = shot("mask");
  ASSERT_EQ(s.s.rc, 0) << s.s.log;
  ASSERT_FALSE(s.s.px.empty()) << s.s.log;
  const int64_t dropped = s.count(92, 92, 100, 3), rug = s.count(33, 145, 140, 3);
  std::printf("dropped-grey pixels %lld, kept-rug pixels %lld\n", static_cast<long long>(dropped), static_cast<long long>(rug));
  EXPECT_GT(dropped, 2000) << "dropped keys in the mask row and the strip";
  EXPECT_GT(rug, 300) << "the kept rug under the strip";
}

// The Pages tab: the selected pages outlined white with a cyan bar of their selected share.
TEST(GuiSparseShot, PagesTabOutlinesTheSelectedPages) {
  if (!attnscope::testing::have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const Shot s = shot("pages");
  ASSERT_EQ(s.s.rc, 0) << s.s.log;
  ASSERT_FALSE(s.s.px.empty()) << s.s.log;
  const int64_t bar = s.count(120, 230, 255, 3);
  std::printf("selected-share bar pixels %lld\n", static_cast<long long>(bar));
  EXPECT_GT(bar, 40) << "a bar in each page holding selected slots";
  EXPECT_EQ(s.count(255, 170, 0, 3), 0) << "no slot outside the request's pages (crossed orange)";
}

// The Softmax tab: one bar per head, kept (teal, head 0 yellow) under dropped (grey).
TEST(GuiSparseShot, SoftmaxTabDrawsKeptAndDroppedMassPerHead) {
  if (!attnscope::testing::have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const Shot s = shot("softmax");
  ASSERT_EQ(s.s.rc, 0) << s.s.log;
  ASSERT_FALSE(s.s.px.empty()) << s.s.log;
  const int64_t kept = s.count(33, 145, 140, 3), dropped = s.count(92, 92, 100, 3), head0 = s.count(253, 231, 37, 3);
  std::printf("kept %lld, dropped %lld, head-0 %lld pixels\n", static_cast<long long>(kept), static_cast<long long>(dropped),
              static_cast<long long>(head0));
  EXPECT_GT(kept, 1000);
  EXPECT_GT(dropped, 300);
  EXPECT_GT(head0, 50);
}

// The Engine tab's DSA view (--view sglang-nsa): SGLang's buffers for dsa-short-context, the real page
// table's grid in the three requests' owner colours (the Pages tab's), the refusal line absent.
TEST(GuiSparseShot, EngineTabShowsSglangsIndexBuffers) {
  if (!attnscope::testing::have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const Shot s{attnscope::testing::gui_screenshot(
      ATTNSCOPE_GUI, source("examples/dsa-short-context.json") + " --size 1280x800 --tab engine --view sglang-nsa",
      "dsa_engine")};
  ASSERT_EQ(s.s.rc, 0) << s.s.log;
  ASSERT_FALSE(s.s.px.empty()) << s.s.log;
  for (int r = 0; r < 3; ++r) {
    const Rgba c = owner_colour(r);
    const int64_t n = s.count(c.r, c.g, c.b, 3);
    std::printf("request %d's owner colour: %lld pixels\n", r, static_cast<long long>(n));
    EXPECT_GT(n, 500) << "request " << r << "'s pages in real_page_table's grid";
  }
}
