// A /parallel case on the command line (issue 44, docs/partitions.md): `plan` lists the partitions,
// `run` the partials, merges and base check, and `--export-script` writes merge.py, whose NumPy merge
// reproduces attnscope's and finds the base the reference agrees with.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "shell.h"

namespace fs = std::filesystem;
using attnscope::testing::numpy_python;
using attnscope::testing::sh;
using attnscope::testing::src;

namespace {

attnscope::testing::ShellOut cli(const std::string& args) { return sh(std::string(ATTNSCOPE_CLI) + " " + args); }

}  // namespace

TEST(PartitionCli, PlanListsEachRanksKeysAndPlan) {
  const auto o = cli("plan " + src("examples/dcp-decode-interleave.json"));
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("partitions  context parallel: 4 ranks, interleave 16"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  rank 3: keys per request 240 744 0 1744; its plan:"), std::string::npos) << o.out;
}

TEST(PartitionCli, MergeScriptReproducesTheBaseMix) {
  const std::string py = numpy_python();
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy here (setup-deps.sh installs python3-numpy)";
  const fs::path dir = fs::temp_directory_path() / ("attnscope-merge-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto run =
      cli("run " + src("examples/lse-base-mixup.json") + " --export-script " + dir.string() + " --script-backend cpu.tiled");
  EXPECT_EQ(run.code, 1) << run.out;  // the base-mix comparison fails
  EXPECT_NE(run.out.find("base check cpu.tiled: its partials merge into the reference's answer in base e"), std::string::npos)
      << run.out;
  ASSERT_TRUE(fs::exists(dir / "merge.py")) << run.out;
  const auto m = sh(py + " " + (dir / "merge.py").string());
  EXPECT_EQ(m.code, 0) << m.out;
  EXPECT_NE(m.out.find("the reference agrees with the merge reading base e"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("reproduced: attnscope's merge = the merge reading base 2"), std::string::npos) << m.out;
  fs::remove_all(dir);
}
