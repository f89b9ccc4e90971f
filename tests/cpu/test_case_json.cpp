// The case format: round trip, defaults, and the broken cases of tests/data/broken.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "case_gen.h"
#include "case_json.h"
#include "json_strict.h"

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

namespace {

// A case whose /requests array holds n requests, followed by `tail` where the file would go on.
std::string many_requests(size_t n, const std::string& tail) {
  std::string s = R"({"schema": "attnscope/case@1", "heads": {"qo": 1, "kv": 1}, "head_dim": 16, "dtype": "fp32", "requests": [)";
  for (size_t i = 0; i < n; ++i) s += i ? R"(, {"q_len": 1, "kv_len": 16})" : R"({"q_len": 1, "kv_len": 16})";
  return s + tail;
}

std::string error_of_text(const std::string& text) {
  try {
    parse_case_text(text);
  } catch (const CaseError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// The reader refuses the first request past the limit and reads no further: what follows is not
// even valid JSON, yet the error is the limit's, naming index 4096 (the old reader read all of a
// 1,000,000-request file, in time quadratic in its length, before refusing it).
TEST(CaseJson, RequestsPastTheLimitStopTheRead) {
  const std::string garbage = ", {\"q_len\": 1, \"kv_len\": 16}" + std::string(200000, '!');
  EXPECT_EQ(error_of_text(many_requests(kMaxRequests + 1, garbage)),
            "/requests/4096: one past the limit: at most 4096 requests are allowed (reading stopped here)");
  // 200,000 requests: the same error, at the same index
  EXPECT_EQ(error_of_text(many_requests(200000, "]}")).rfind("/requests/4096: one past the limit", 0), 0u);
  // at the limit the case is read
  EXPECT_EQ(error_of_text(many_requests(kMaxRequests, "]}")), "");
  EXPECT_EQ(parse_case_text(many_requests(kMaxRequests, "]}")).spec.requests.size(), static_cast<size_t>(kMaxRequests));
}

TEST(CaseJson, ArrayLimitsMatchWildcardPaths) {
  const std::vector<JsonArrayLimit> limits = {{"/a/*/b", 3, "bees"}};
  EXPECT_NO_THROW(parse_json_strict(R"({"a": [{"b": [1, 2, 3]}, {"b": [1]}], "b": [1, 2, 3, 4]})", limits));
  try {
    parse_json_strict(R"({"a": [{"b": [1]}, {"c": 0, "b": [1, 2, 3, [4]]}]})", limits);
    ADD_FAILURE();
  } catch (const CaseError& e) {
    EXPECT_EQ(e.path(), "/a/1/b/3");
    EXPECT_EQ(e.rule(), "one past the limit: at most 3 bees are allowed (reading stopped here)");
  }
}

// A number past a double's range is named at its path with the rule, like every other bad number
// (nlohmann's own text was "[json.exception.out_of_range.406] number overflow").
TEST(CaseJson, NumberOverflowNamesThePathAndTheRule) {
  const std::string rule = " is not allowed, a number must be finite (at most about 1.8e308 in magnitude)";
  const std::vector<std::pair<std::string, std::string>> cases = {{R"({"a": [{"b": [1, 2, -1e999]}]})", "/a/0/b/2: -1e999"},
                                                                  {R"({"a": {"x~y": 1E+400}})", "/a/x~0y: 1E+400"},
                                                                  {"1e999", "/: 1e999"}};
  for (const auto& [text, want] : cases) {
    try {
      parse_json_strict(text);
      ADD_FAILURE() << text;
    } catch (const CaseError& e) {
      EXPECT_EQ(std::string(e.what()), want + rule);
    }
  }
  EXPECT_EQ(parse_json_strict("[1e308]")[0].get<double>(), 1e308);
}

// Nesting deeper than any case needs is refused while reading, at its path (a deep value used to
// reach recursive dumps and copies of the parsed value).
TEST(CaseJson, DeepNestingIsRefusedAtItsPath) {
  const std::string deep =
      R"({"schema": "attnscope/case@1", "requests": [{"q_len": )" + std::string(100000, '[') + std::string(100000, ']') + "}]}";
  std::string path = "/requests/0/q_len";
  for (size_t d = 3; d < kMaxJsonDepth; ++d) path += "/0";
  EXPECT_EQ(error_of_text(deep), path + ": nested more than 64 levels deep; no case needs that many");
}

// Keys and values that reach a message keep it whole: a NUL is escaped, not a terminator.
TEST(CaseJson, MessagesEscapeNulAndKeepUtf8Whole) {
  const std::string dup = R"({"schema": "attnscope/case@1", "a\u0000b": 1, "a\u0000b": 2})";
  EXPECT_EQ(error_of_text(dup),
            "/: duplicate key \"a\\x00b\": JSON readers disagree on which value wins, so a case may not repeat a key");
  const std::string unknown = many_requests(1, R"(], "k\u0000y": 1})");
  EXPECT_EQ(error_of_text(unknown).rfind("/k\\x00y: unknown key", 0), 0u) << error_of_text(unknown);
  const std::string dtype =
      R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 1}], "heads": {"qo": 1, "kv": 1},
                               "head_dim": 16, "dtype": "f\u0000p"})";
  EXPECT_NE(error_of_text(dtype).find("\"f\\x00p\" is not allowed"), std::string::npos) << error_of_text(dtype);
  // a long value is cut for the message at a character boundary, never inside "é"
  const std::string q = R"({"schema": "attnscope/case@1", "requests": [{"q_len": ")" + std::string(35, 'x') +
                        "\xc3\xa9\xc3\xa9\xc3\xa9" + R"(", "kv_len": 1}]})";
  const std::string m = error_of_text(q);
  EXPECT_NE(m.find(std::string(35, 'x') + "..."), std::string::npos) << m;
  EXPECT_EQ(m.find('\xc3'), std::string::npos) << m;
}

// Only regular files are read: a directory or a device (/dev/zero never ends) is refused by name.
TEST(CaseJson, ReadsOnlyRegularFiles) {
  for (const char* p : {"/dev/zero", "/tmp"}) {
    try {
      read_case_file(p);
      ADD_FAILURE() << p;
    } catch (const CaseError& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
}
