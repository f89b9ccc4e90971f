// tests/peer/bench_table.py --from-json: the benchmark tables rendered again from a saved H100 run
// (docs/bench/), without a GPU or PyTorch. Checks issue 10's table: the peer each shape is measured
// against (SDPA FA2 for prefill, compiled flex_attention where SDPA has no such mask, SDPA cuDNN for
// decode) and the ratio peer time / cuda.flash time, against numbers computed by hand from the file.
#include <gtest/gtest.h>

#include <string>

#include "shell.h"

using Out = attnscope::testing::ShellOut;
using attnscope::testing::sh;
using attnscope::testing::src;

TEST(BenchTable, RendersIssue10sRatiosFromASavedRun) {
  const Out o =
      sh("python3 " + src("tests/peer/bench_table.py") + " --from-json " + src("docs/bench/h100-2026-11-24-dd0f26b.json"));
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("Device: NVIDIA H100 80GB HBM3"), std::string::npos) << o.out;
  // 1.586 / 2.224 = 0.713; TFLOP/s = the case's FLOPs / ms / 1e9
  EXPECT_NE(o.out.find("| prefill-noncausal | 2.224 | 247 | sdpa_fa2 | 1.586 | 0.71 |"), std::string::npos) << o.out;
  // a mask SDPA cannot express: compiled flex_attention, 1.277 / 3.132 = 0.408
  EXPECT_NE(o.out.find("| prefill-window-maskmod | 3.132 | 132 | flex_compiled | 1.277 | 0.41 |"), std::string::npos) << o.out;
  // decode: SDPA cuDNN, 0.718 / 0.772 = 0.930 (FA2 ran too and is not the peer)
  EXPECT_NE(o.out.find("| decode-paged | 0.772 | 11 | sdpa_cudnn | 0.718 | 0.93 |"), std::string::npos) << o.out;
}

TEST(BenchTable, WithoutCasesOrASavedRunItSaysWhatItNeeds) {
  const Out o = sh("python3 " + src("tests/peer/bench_table.py"));
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("give case files, or --from-json RUN.json"), std::string::npos) << o.out;
}

// --before: issue 10's table with an earlier run's cuda.flash time and ratio per case (how docs/performance.md's
// "before" column is made); a case the earlier run lacks shows '-', a file that is not a run is refused.
TEST(BenchTable, BeforeColumnComesFromTheEarlierRun) {
  const std::string now = src("docs/bench/h100-2026-11-25-2026a0d.json"), was = src("docs/bench/h100-2026-11-25-82a6819.json");
  const Out o = sh("python3 " + src("tests/peer/bench_table.py") + " --from-json " + now + " --before " + was);
  ASSERT_EQ(o.code, 0) << o.out;
  // 82a6819: 1.167 ms against flex 1.137 = 0.97; 2026a0d: 1.122 / 1.113 = 1.01
  EXPECT_NE(o.out.find("| prefill-window-maskmod | 1.113 | 371 | flex_compiled | 1.122 | 1.01 | 1.167, 0.97 |"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("| decode-paged | 0.750 | 11 | sdpa_cudnn | 0.730 | 0.97 | 0.751, 0.97 |"), std::string::npos) << o.out;
  // an earlier run with only its first row: every other case has no "before"
  const std::string one = ::testing::TempDir() + "/bench_before_one_row.json";
  ASSERT_EQ(sh("python3 -c \"import json; d = json.load(open('" + was + "')); d['rows'] = d['rows'][:1]; json.dump(d, open('" +
               one + "', 'w'))\"")
                .code,
            0);
  const Out p = sh("python3 " + src("tests/peer/bench_table.py") + " --from-json " + now + " --before " + one);
  ASSERT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("| prefill-causal | 0.712 | 386 | sdpa_fa2 | 0.923 | 1.30 | 0.715, 1.30 |"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("| decode-paged | 0.750 | 11 | sdpa_cudnn | 0.730 | 0.97 | - |"), std::string::npos) << p.out;
  const Out bad = sh("python3 " + src("tests/peer/bench_table.py") + " --from-json " + now + " --before " + src("README.md"));
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--before"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("not a saved run"), std::string::npos) << bad.out;
}
