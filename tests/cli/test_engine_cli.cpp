// `attnscope-cli plan CASE --engine ID [--json]`: the engine's tensors as a table and as JSON, and
// the errors that name --engine.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
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
    for (const char* engine : {"sglang-fa", "vllm-flashinfer", "sglang-nsa", "vllm-flashmla-sparse"}) {
      SCOPED_TRACE(e.path().string() + " " + engine);
      const Out o = cli("plan " + e.path().string() + " --engine " + engine + " --json");
      ASSERT_EQ(o.code, 0) << o.err;
      const auto j = nlohmann::json::parse(o.out);
      EXPECT_EQ(j["engine"], engine);
      EXPECT_EQ(j["source"]["commit"].get<std::string>().size(), 40u);
      const bool fed = std::string(engine) == "sglang-fa" || std::string(engine) == "vllm-flashinfer";
      EXPECT_EQ(j["fed_to_backends"].get<bool>(), fed) << "the DSA views feed no backend";
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
  EXPECT_GE(views, 23);  // the three /sparse examples' DSA views among them
  EXPECT_GE(refusals, 5);
}

TEST(EngineCli, ErrorsNameTheOptionAndTheRule) {
  const std::string ex = src("examples/gqa-decode-long.json");
  Out o = cli("plan " + ex + " --engine flash");
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err,
            "error: --engine: \"flash\" is not an engine, must be one of sglang-fa, vllm-flashinfer, sglang-nsa, "
            "vllm-flashmla-sparse\n");
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

// dsa-short-context (page 64, contiguous pages behind the null page): a 300-token decode, an 8-token extend
// at positions 2044..2051 and a decode at 2048 keys; top_k 2048, so the short rows carry -1 padding.
TEST(EngineCli, DsaViewsPrintTheIndexBuffersWithTheirPadding) {
  const std::string ex = src("examples/dsa-short-context.json");
  Out o = cli("plan " + ex + " --engine sglang-nsa");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("nsa_backend.py @ 005e8bf8abf4\nmode: extend"), std::string::npos) << o.out;
  EXPECT_NE(line_of(o.out, "nsa_cache_seqlens_int32").find("[300, 2045, 2046, 2047, 2048, 2048, 2048, 2048, 2048, 2048]"),
            std::string::npos)
      << o.out;
  EXPECT_NE(line_of(o.out, "page_table_1.transformed").find("int32  [10, 2048]"), std::string::npos) << o.out;
  // 300 + 2045 + 2046 + 2047 + 6 x 2048 kept of 10 x 2048
  EXPECT_NE(o.out.find("18726 kept and 1754 -1 padding of 20480 entries (kept per row: 300, 2045, 2046, 2047, 2048"),
            std::string::npos)
      << o.out;
  EXPECT_EQ(o.out.find("mismatches"), std::string::npos) << o.out;
  o = cli("plan " + ex + " --engine vllm-flashmla-sparse --json");
  ASSERT_EQ(o.code, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_FALSE(j["fed_to_backends"].get<bool>());
  // every converted entry is block_table[req, i // 64] * 64 + i % 64 of its logical one, -1 kept
  std::map<std::string, nlohmann::json> t;
  for (const auto& x : j["tensors"]) t[x["name"]] = x;
  const auto& logical = t["topk_indices_buffer"]["values"];
  const auto& slots = t["topk_indices"]["values"];
  const auto& req = t["req_id_per_token"]["values"];
  const auto& table = t["block_table"];
  const int64_t width = table["shape"][1], topk = 2048;
  ASSERT_EQ(slots.size(), 10u * topk);
  int64_t pad = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t l = logical[i], r = req[i / topk];
    const int64_t want = l < 0 ? -1 : table["values"][r * width + l / 64].get<int64_t>() * 64 + l % 64;
    ASSERT_EQ(slots[i].get<int64_t>(), want) << "entry " << i;
    pad += l < 0;
  }
  EXPECT_EQ(pad, 1754);
  EXPECT_EQ(t["topk_length"]["values"], nlohmann::json({300, 2045, 2046, 2047, 2048, 2048, 2048, 2048, 2048, 2048}));
  o = cli("plan " + ex + " --engine sglang-fa");
  EXPECT_NE(o.out.find("refused: /sparse: SGLang serves DeepSeek sparse attention through its nsa backend"), std::string::npos)
      << o.out;
}
