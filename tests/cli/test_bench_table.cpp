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
