// The Consistency tab: its chart's data from a report (no window), and a screenshot under Xvfb of the
// check run from the command line (attnscope --consistency N), with pixel checks on the verdicts.
#include <gtest/gtest.h>
#include <stb/stb_image.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gui_shot.h"
#include "panels/consistency_panel.h"

using namespace attnscope;
using namespace attnscope::gui;
namespace fs = std::filesystem;

namespace {

BackendConsistency ran(const std::string& id, std::vector<double> max_abs, std::vector<int64_t> identical,
                       std::vector<int64_t> nonfinite) {
  BackendConsistency b;
  b.backend = id;
  b.verdict = ConsistencyVerdict::kDiffers;
  b.max_abs = std::move(max_abs);
  b.rows_identical = std::move(identical);
  b.nonfinite = std::move(nonfinite);
  b.rows_per_position = 4;
  return b;
}

TEST(ConsistencyPanel, PlotKindsAndDecades) {
  ConsistencyReport r;
  r.n = 4;
  r.backends.push_back(ran("a", {0, 3e-5, 0, 2e-2}, {4, 2, 3, 1}, {0, 0, 0, 1}));
  BackendConsistency off;
  off.backend = "b";
  off.verdict = ConsistencyVerdict::kNotRun;  // no number: not a series
  r.backends.push_back(off);
  r.backends.push_back(ran("c", {0, 0, 0, 0}, {4, 4, 4, 4}, {0, 0, 0, 0}));
  const ConsistencyPlot p = build_consistency_plot(r);
  ASSERT_EQ(p.series.size(), 2u);
  EXPECT_EQ(p.series[0].backend, "a");
  EXPECT_EQ(p.series[1].index, 2);
  // position 0 identical, 1 a number, 2 bits differ at |diff| 0, 3 NaN/Inf
  EXPECT_EQ(p.series[0].kind, (std::vector<uint8_t>{0, 1, 2, 3}));
  EXPECT_NEAR(p.series[0].y[1], std::log10(3e-5), 1e-12);
  EXPECT_EQ(p.series[1].kind, (std::vector<uint8_t>{0, 0, 0, 0}));
  EXPECT_EQ(p.y_lo, -5);  // 3e-5 .. 3e-5 (the NaN position's number is not drawn)
  EXPECT_EQ(p.y_hi, -4);
  EXPECT_TRUE(p.any_difference);
  r.backends.pop_back();
  r.backends.erase(r.backends.begin());
  const ConsistencyPlot q = build_consistency_plot(r);
  EXPECT_TRUE(q.series.empty());
  EXPECT_FALSE(q.any_difference);
  EXPECT_LT(q.y_lo, q.y_hi);
}

TEST(ConsistencyPanel, ScreenshotShowsVerdictsAndChart) {
  attnscope::testing::GuiShot s = attnscope::testing::gui_screenshot(
      ATTNSCOPE_GUI,
      std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/fully-masked-rows.json --size 1280x800 --tab consistency --consistency 32",
      "consistency");
  ASSERT_EQ(s.rc, 0) << s.log;
  EXPECT_NE(s.log.find("tab consistency"), std::string::npos) << s.log;
  ASSERT_FALSE(s.px.empty());
  const int w = s.w, h = s.h;
  const unsigned char* px = s.px.data();
  // the verdicts' colours: green "bit-identical" (cpu.reference, cpu.lowp), amber "differs" (cpu.tiled)
  int64_t green = 0, amber = 0;
  for (int y = 0; y < h; ++y)
    for (int x = w * 27 / 100; x < w; ++x) {
      const unsigned char* p = px + (static_cast<size_t>(y) * w + x) * 4;
      green += p[1] > 180 && p[0] < 150 && p[2] < 150;
      amber += p[0] > 230 && p[1] > 170 && p[1] < 220 && p[2] < 110;
    }
  EXPECT_GT(green, 200);
  EXPECT_GT(amber, 200);
}

}  // namespace
