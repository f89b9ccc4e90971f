// FP8 settings through the case format (issue 27, items 1 and 7): case_to_text and the reader round
// trip every granularity, format and FP8-attention form exactly. A given scale keeps its double's
// bits (including values no short decimal holds), "amax" is written and read back as "amax" (never
// replaced by the numbers it computes to), and the repro file (run --export) keeps them too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "case_gen.h"
#include "case_json.h"

using namespace attnscope;

namespace {

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Doubles that a short decimal does not hold: the text must carry all 17 digits.
double awkward(int i) { return std::nextafter(0.1 * (i + 1), 1.0) / 3.0; }

std::vector<CaseSpec> fp8_cases() {
  std::vector<CaseSpec> out;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    CaseSpec c = attnscope::testing::random_case(seed);
    if (c.dtype == DType::kFp32) c.dtype = DType::kBf16;  // FP8 needs a bf16 / fp16 case
    c.kv_cache.fp8 = seed % 2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
    auto& s = c.kv_cache.scales;
    s.granularity = static_cast<ScaleGranularity>(seed % 3);
    const bool given = seed % 4 < 2 && s.granularity != ScaleGranularity::kToken;
    const size_t n = s.granularity == ScaleGranularity::kTensor ? 1 : static_cast<size_t>(c.num_kv_heads);
    for (size_t i = 0; given && i < n; ++i) {
      s.k.push_back(awkward(static_cast<int>(i)));
      if (seed % 4 == 0) s.v.push_back(std::ldexp(awkward(static_cast<int>(i) + 7), -12));  // v given too, or "amax"
    }
    if (seed % 5 == 0) c.fp8_attention = Fp8AttentionSpec{};                             // q_scale "amax"
    if (seed % 5 == 1) c.fp8_attention = Fp8AttentionSpec{std::ldexp(awkward(3), -20)};  // a given Q scale
    out.push_back(c);
  }
  return out;
}

}  // namespace

TEST(Fp8CaseJson, TextRoundTripIsExact) {
  for (const CaseSpec& c : fp8_cases()) {
    const std::string text = case_to_text(c);
    SCOPED_TRACE(text);
    const CaseFile f = parse_case_text(text);
    ASSERT_EQ(f.spec, c);
    EXPECT_EQ(case_to_text(f.spec), text);  // write -> parse -> write gives the same text
    const auto& a = c.kv_cache.scales;
    const auto& b = f.spec.kv_cache.scales;
    ASSERT_EQ(a.k.size(), b.k.size());
    ASSERT_EQ(a.v.size(), b.v.size());
    for (size_t i = 0; i < a.k.size(); ++i) EXPECT_TRUE(same_bits(a.k[i], b.k[i])) << i;
    for (size_t i = 0; i < a.v.size(); ++i) EXPECT_TRUE(same_bits(a.v[i], b.v[i])) << i;
    const bool q_given = c.fp8_attention && c.fp8_attention->q_scale;
    EXPECT_TRUE(!q_given || same_bits(*c.fp8_attention->q_scale, *f.spec.fp8_attention->q_scale));
  }
}

// The written forms: "amax" where the scales come from the data, a number for a given tensor scale,
// an array for given head scales; /kv_cache/dtype and /fp8_attention only on FP8 cases.
TEST(Fp8CaseJson, AmaxStaysAmaxAndNumbersStayNumbers) {
  int amax = 0, number = 0, array = 0, attention_amax = 0, attention_number = 0;
  for (const CaseSpec& c : fp8_cases()) {
    const auto j = case_to_json(c);
    const auto& sc = j.at("kv_cache").at("scales");
    EXPECT_EQ(j.at("kv_cache").at("dtype"), c.kv_cache.fp8 == Fp8Format::kE4M3 ? "fp8_e4m3" : "fp8_e5m2");
    for (const auto* key : {"k", "v"}) {
      const auto& given = std::string(key) == "k" ? c.kv_cache.scales.k : c.kv_cache.scales.v;
      const auto& x = sc.at(key);
      if (given.empty()) {
        EXPECT_EQ(x, "amax");
        ++amax;
      } else if (c.kv_cache.scales.granularity == ScaleGranularity::kTensor) {
        ASSERT_TRUE(x.is_number_float());
        EXPECT_TRUE(same_bits(x.get<double>(), given[0]));
        ++number;
      } else {
        ASSERT_TRUE(x.is_array());
        EXPECT_EQ(x.size(), given.size());
        ++array;
      }
    }
    if (c.fp8_attention) {
      const auto& q = j.at("fp8_attention").at("q_scale");
      if (q.is_string()) {
        EXPECT_EQ(q, "amax");
        ++attention_amax;
      } else {
        EXPECT_TRUE(q.is_number());
        ++attention_number;
      }
    } else {
      EXPECT_FALSE(j.contains("fp8_attention"));
    }
  }
  // every form was written at least once
  EXPECT_GT(amax, 0);
  EXPECT_GT(number, 0);
  EXPECT_GT(array, 0);
  EXPECT_GT(attention_amax, 0);
  EXPECT_GT(attention_number, 0);
  // and a case without FP8 writes none of the FP8 keys (its canonical text is unchanged)
  CaseSpec plain = fp8_cases()[0];
  plain.kv_cache.fp8.reset();
  plain.kv_cache.scales = {};
  plain.fp8_attention.reset();
  const auto j = case_to_json(plain);
  EXPECT_FALSE(j.at("kv_cache").contains("dtype"));
  EXPECT_FALSE(j.at("kv_cache").contains("scales"));
  EXPECT_FALSE(j.contains("fp8_attention"));
}

// The repro file keeps the FP8 settings beside what it recorded.
TEST(Fp8CaseJson, ReproFileKeepsTheFp8Settings) {
  for (const CaseSpec& c : fp8_cases()) {
    CaseFile f;
    f.spec = c;
    f.environment = nlohmann::json{{"host", "test"}};
    f.recorded = nlohmann::json{{"digests", nlohmann::json::object()}};
    const std::string text = case_file_to_json(f).dump(2);
    const CaseFile back = parse_case_text(text);
    EXPECT_EQ(back.spec, c) << text;
  }
}
