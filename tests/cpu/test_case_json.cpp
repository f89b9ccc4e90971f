// The case format: round trip, defaults, and the broken cases of tests/data/broken.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "case_gen.h"
#include "case_json.h"

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

std::vector<std::pair<std::string, std::string>> expected_errors() {
  std::vector<std::pair<std::string, std::string>> out;
  std::ifstream in(std::string(ATTNSCOPE_SOURCE_DIR) + "/tests/data/broken/EXPECTED.tsv");
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    out.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return out;
}

}  // namespace

TEST(CaseJson, RoundTripIsExact) {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    CaseSpec c = attnscope::testing::random_case(seed);
    c.description = "round trip " + std::to_string(seed);
    if (seed % 3 == 0) c.data.outlier_channels = {0, 1};
    if (seed % 5 == 0) c.sample_rows = 3;
    if (seed % 7 == 0) c.attention.sm_scale = 0.1 + 1.0 / (seed + 3);  // a non-representable decimal
    if (seed % 4 == 0) c.comparisons = {{"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 0.01, 1e-5, "cpu.lowp"}};
    const std::string text = case_to_text(c);
    const CaseFile f = parse_case_text(text);
    ASSERT_EQ(f.spec, c) << text;
    ASSERT_EQ(case_to_text(f.spec), text);
  }
}

TEST(CaseJson, DefaultsAreDocumentedValues) {
  const CaseFile f = parse_case_text(R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 5}],
    "heads": {"qo": 2, "kv": 1}, "head_dim": 64, "dtype": "fp16"})");
  const CaseSpec& c = f.spec;
  EXPECT_EQ(c.head_dim_qk, 64);
  EXPECT_EQ(c.head_dim_vo, 64);
  EXPECT_EQ(c.kv_cache.page_size, 16);
  EXPECT_TRUE(c.kv_cache.null_page);
  EXPECT_TRUE(c.attention.causal);
  EXPECT_EQ(c.split.planner, Planner::kFlashInfer);
  EXPECT_EQ(c.split.num_sms, 132);
  EXPECT_EQ(c.backends, (std::vector<std::string>{"cpu.reference", "cpu.lowp", "cpu.tiled"}));
  const CaseFile r = parse_case_text(R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 5}],
    "heads": {"qo": 2, "kv": 1}, "head_dim": 64, "dtype": "fp16", "kv_cache": {"storage": "ragged"}})");
  EXPECT_EQ(r.spec.kv_cache.page_size, 1);
  EXPECT_FALSE(r.spec.kv_cache.null_page);
}

TEST(CaseJson, BrokenCasesNameThePathAndTheRule) {
  const auto cases = expected_errors();
  ASSERT_GE(cases.size(), 10u);
  for (const auto& [file, want] : cases) {
    SCOPED_TRACE(file);
    try {
      read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/tests/data/broken/" + file);
      ADD_FAILURE() << "accepted a broken case";
    } catch (const CaseError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(want, 0), 0u) << msg;
      EXPECT_GT(e.rule().size(), 8u) << "the rule must say what is required: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line";
    }
  }
}

TEST(CaseJson, EveryExampleParsesAndRoundTrips) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    const CaseFile f = read_case_file(e.path().string());
    EXPECT_FALSE(f.spec.name.empty());
    EXPECT_FALSE(f.spec.description.empty());
    EXPECT_EQ(parse_case_text(case_to_text(f.spec)).spec, f.spec);
    ++n;
  }
  EXPECT_GE(n, 8);
}

TEST(CaseJson, MissingFileIsACaseError) { EXPECT_THROW(read_case_file("/nonexistent/case.json"), CaseError); }

TEST(CaseJson, ReproFieldsAreKept) {
  const CaseFile f = parse_case_text(R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 5}],
    "heads": {"qo": 2, "kv": 1}, "head_dim": 64, "dtype": "fp16",
    "environment": {"host": "x"}, "recorded": {"digests": {"cpu.reference": "00c0ffee00c0ffee"}}})");
  EXPECT_EQ(f.environment["host"], "x");
  const auto j = case_file_to_json(f);
  EXPECT_EQ(j["recorded"]["digests"]["cpu.reference"], "00c0ffee00c0ffee");
}
