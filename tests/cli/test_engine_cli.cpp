// `attnscope-cli plan CASE --engine ID [--json]`: the engine's tensors as a table and as JSON, and
// the errors that name --engine.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli_run.h"

namespace fs = std::filesystem;
using attnscope::testing::cli;
using Out = attnscope::testing::CliOut;

namespace {

std::string src(const std::string& rel) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/" + rel; }

// The table line of one tensor: "name  dtype  shape  values".
std::string line_of(const std::string& out, const std::string& name) {
  std::smatch m;
  const std::regex re("(^|\n)(" + std::regex_replace(name, std::regex(R"([.\[\]])"), R"(\$&)") + " [^\n]*)");
  return std::regex_search(out, m, re) ? m[2].str() : "";
}

}  // namespace

// llama4-chunked-local: requests (q 300, kv 1000), (40, 600), (1, 900), chunk 256, page 16. By hand:
// request 0 has 700 cached keys, 700 % 256 = 188, so 68 queries finish its chunk and 232 start the
// next, whose keys end at 1000 % 256 = 232; request 1: 40 queries in one chunk of 600 % 256 = 88
// keys; request 2: one query over 900 % 256 = 132 keys.
TEST(EngineCli, TableNamesTheSourceTheModeAndTheTensors) {
  const Out o = cli("plan " + src("examples/llama4-chunked-local.json") + " --engine sglang-fa");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("flashattention_backend.py @ 756596d14cbf"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("mode: extend+local"), std::string::npos);
  EXPECT_NE(line_of(o.out, "cache_seqlens_int32").find("int32  [3]      [1000, 600, 900]"), std::string::npos) << o.out;
  EXPECT_NE(line_of(o.out, "local_attn_metadata.local_seqused_k").find("[256, 232, 88, 132]"), std::string::npos) << o.out;
  EXPECT_NE(line_of(o.out, "local_attn_metadata.local_query_start_loc").find("[0, 68, 300, 340, 341]"), std::string::npos);
  // page_table rows are 63 pages wide: elided with a count
  EXPECT_NE(line_of(o.out, "page_table").find("... (49 more), "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("mismatches with attnscope's plan (4):"), std::string::npos);  // page_size 16: token slots
  EXPECT_TRUE(o.err.empty()) << o.err;
}

TEST(EngineCli, JsonHoldsEveryValueForEveryExampleAndEngine) {
  int views = 0, refusals = 0;
  for (const auto& e : fs::directory_iterator(src("examples"))) {
    if (e.path().extension() != ".json") continue;
    for (const char* engine : {"sglang-fa", "vllm-flashinfer"}) {
      SCOPED_TRACE(e.path().string() + " " + engine);
      const Out o = cli("plan " + e.path().string() + " --engine " + engine + " --json");
      ASSERT_EQ(o.code, 0) << o.err;
      const auto j = nlohmann::json::parse(o.out);
      EXPECT_EQ(j["engine"], engine);
      EXPECT_EQ(j["source"]["commit"].get<std::string>().size(), 40u);
      EXPECT_TRUE(j["fed_to_backends"].get<bool>());
      if (!j["refusal"].is_null()) {
        ++refusals;
        EXPECT_EQ(j["refusal"].get<std::string>()[0], '/') << "a refusal starts with the case path";
        EXPECT_TRUE(j["tensors"].empty());
        continue;
      }
      ++views;
      ASSERT_FALSE(j["tensors"].empty());
      for (const auto& t : j["tensors"]) {
        size_t n = 1;
        for (const auto& d : t["shape"]) n *= d.get<size_t>();
        EXPECT_EQ(t["values"].size(), n) << t["name"];
      }
    }
  }
  EXPECT_GE(views, 20);
  EXPECT_GE(refusals, 5);
}

TEST(EngineCli, ErrorsNameTheOptionAndTheRule) {
  const std::string ex = src("examples/gqa-decode-long.json");
  Out o = cli("plan " + ex + " --engine flash");
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "error: --engine: \"flash\" is not an engine, must be one of sglang-fa, vllm-flashinfer\n");
  EXPECT_TRUE(o.out.empty());
  o = cli("plan " + ex + " --engine sglang-fa --flex-block-mask 64");
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err.rfind("error: --engine: not with --flex-block-mask", 0), 0u) << o.err;
  o = cli("plan " + ex + " --engine");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("--engine needs a value"), std::string::npos);
}

TEST(EngineCli, ARefusalIsPrintedWithItsRule) {
  const Out o = cli("plan " + src("examples/prefix-lm.json") + " --engine vllm-flashinfer");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("mode: none\nrefused: /attention/prefix_lm: "), std::string::npos) << o.out;
}
