// The CPU backends' bits on every example are those recorded in tests/data/cpu-digests.json, taken at
// a280bf7, before the case model and the backends moved into model/ and backends/ (issue 26). A move,
// a rename or a registry change must not change a bit; a numeric change must update the file on purpose.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"

namespace {

using attnscope::testing::cli;
namespace fs = std::filesystem;

TEST(Digests, EveryExampleKeepsItsCpuBits) {
  std::ifstream in(std::string(ATTNSCOPE_SOURCE_DIR) + "/tests/data/cpu-digests.json");
  ASSERT_TRUE(in) << "tests/data/cpu-digests.json is missing";
  const nlohmann::json want = nlohmann::json::parse(in);
  int examples = 0;
  for (const auto& e : fs::directory_iterator(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".json") continue;
    const std::string name = e.path().filename().string();
    SCOPED_TRACE(name);
    ASSERT_TRUE(want.contains(name)) << "a new example: add its digests to tests/data/cpu-digests.json";
    const auto o = cli("run " + e.path().string() + " --backends cpu.reference,cpu.lowp,cpu.tiled --json");
    // 3 where the case compares backends left out here; the digests are what this test reads
    ASSERT_TRUE(o.code == 0 || o.code == 1 || o.code == 3) << o.code << " " << o.err;
    const nlohmann::json j = nlohmann::json::parse(o.out);
    int seen = 0;
    for (const auto& r : j.at("results")) {
      const std::string b = r.at("backend");
      ASSERT_TRUE(want[name].contains(b)) << b;
      // a backend that did not run has no digest: its status is recorded in its place ("(unsupported)")
      const std::string got =
          r.contains("digest") ? r.at("digest").get<std::string>() : "(" + r.at("status").get<std::string>() + ")";
      EXPECT_EQ(got, want[name][b].get<std::string>()) << b;
      ++seen;
    }
    EXPECT_EQ(seen, static_cast<int>(want[name].size()));
    ++examples;
  }
  EXPECT_EQ(examples, static_cast<int>(want.size())) << "an example listed in cpu-digests.json is gone";
}

}  // namespace
