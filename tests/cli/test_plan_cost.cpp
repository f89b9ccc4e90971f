// Host planning cost (`bench --plan-only`, app/core/plan_cost.h): the batch-size grammar, the report's
// columns and points on an example, the batch the case is cut or extended to, and the refusals naming
// the option and the rule.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "case_json.h"
#include "cli_run.h"
#include "plan_cost.h"
#include "shell.h"

using namespace attnscope;
using attnscope::testing::cli;
using attnscope::testing::src;

TEST(PlanCost, BatchSizesParseAsTheSweepsValues) {
  EXPECT_EQ(parse_batches("1:1024:x2"), (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}));
  EXPECT_EQ(parse_batches("3,7,100"), (std::vector<int>{3, 7, 100}));
  EXPECT_EQ(parse_batches("1:10:+4"), (std::vector<int>{1, 5, 9}));
  for (const char* bad : {"0", "1,2.5", "abc", "70000", "-4"}) {
    SCOPED_TRACE(bad);
    try {
      parse_batches(bad);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--batches"), std::string::npos) << e.what();
    }
  }
}

// Every column is timed at every size of a valid case; the yardstick is the case's own planner model at 256.
TEST(PlanCost, EveryPlannerIsTimedAtEverySize) {
  const nlohmann::json base =
      nlohmann::json::parse(case_to_json(read_case_file(src("examples/gqa-decode-long.json")).spec).dump());
  PlanCostOptions opt;
  opt.batches = {1, 3, 256};
  opt.reps = 2;
  const PlanCostReport r = run_plan_cost(base, opt);
  ASSERT_GE(r.columns.size(), 3u);
  EXPECT_EQ(r.columns[0].name, "split:flashinfer");
  EXPECT_EQ(r.columns[1].name, "split:flash_attn");
  EXPECT_EQ(r.columns[2].name, "make_plan");
  ASSERT_EQ(r.points.size(), 3u);
  for (const auto& p : r.points) {
    EXPECT_TRUE(p.error.empty()) << p.error;
    ASSERT_EQ(p.us.size(), r.columns.size());
    for (size_t k = 0; k < p.us.size(); ++k)
      EXPECT_GT(p.us[k], 0) << r.columns[k].name << " at " << p.batch << ": " << p.notes[k];
  }
  EXPECT_EQ(r.split_us_at_256, r.points[2].us[0]) << "the case plans with flashinfer: its model's time at 256";
  // a larger batch plans more units: the whole plan does not get cheaper from 1 to 256 requests
  EXPECT_GT(r.points[2].us[2], r.points[0].us[2]);
}

TEST(PlanCost, CliTableJsonAndRefusals) {
  const std::string ex = src("examples/gqa-decode-long.json");
  const auto t = cli("bench " + ex + " --plan-only --batches 1,16 --reps 2");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("planning cost of gqa-decode-long (host, median of 2 calls"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("split:flashinfer"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("at batch 256"), std::string::npos) << "no 256 in the sizes: no yardstick line";
  const auto j = cli("bench " + ex + " --plan-only --batches 256 --reps 2 --json");
  ASSERT_EQ(j.code, 0) << j.err;
  const auto js = nlohmann::json::parse(j.out);
  EXPECT_EQ(js["schema"], "attnscope/plan-cost@1");
  EXPECT_EQ(js["points"][0]["batch"], 256);
  EXPECT_GT(js["points"][0]["us"]["make_plan"].get<double>(), 0);
  EXPECT_GT(js["split_us_at_256"].get<double>(), 0);
  const auto bad = cli("bench " + ex + " --plan-only --batches 0");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--batches 0: 0 is not a batch size"), std::string::npos) << bad.err;
  const auto alone = cli("bench " + ex + " --batches 4");
  EXPECT_EQ(alone.code, 2);
  EXPECT_NE(alone.err.find("--batches: only with --plan-only"), std::string::npos) << alone.err;
  const auto be = cli("bench " + ex + " --plan-only --backends cpu.reference");
  EXPECT_EQ(be.code, 2);
  EXPECT_NE(be.err.find("--backends: bench --plan-only times the planners"), std::string::npos) << be.err;
}
