// cudnn.sdpa on MLA's non-absorbed form (DeepSeek prefill: plain MHA with head dims qk 192 / vo 128)
// and on attention sinks (cuDNN's sink_token): random cases against the fp64 GPU reference with
// FlashAttention's 2x rule; the registry's refusal of MLA's absorbed form; the version rules and the
// translation (sinks keep GQA decode unpacked, padding rows get LSE = the sink), which are plain
// host code (backends/cudnn/cudnn_conventions.cpp, built in every build) and need no device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "../../backends/cudnn/cudnn_conventions.h"
#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "attnscope/workload.h"
#include "case_gen.h"
#include "cudnn_case.h"
#include "gpu_test_util.h"
#include "require.h"

using namespace attnscope;
using attnscope::testing::gpu_cases;
using attnscope::testing::random_case;
using attnscope::testing::run_id;
using attnscope::testing::set_head_dim;

namespace {

constexpr const char* kId = "cudnn.sdpa";

bool quick() { return std::getenv("ATTNSCOPE_GPU_QUICK") != nullptr; }

// A non-absorbed MLA case: DeepSeek-V3's dims (rank 512, rope 64, nope 128, v 128), heads 16..128,
// causal, bf16 or fp16, ragged or paged (16 / 64, NHD or HND, any allocation), up to 3 requests of
// q_len <= 512 and kv_len <= 2048 (a quarter of the requests decode rows), q_len cut so that a case
// has at most 2^25 (query, key, head) triples: cuda.reference (fp64) stays near a second. Under
// compute-sanitizer the sizes shrink.
CaseSpec mla_case(uint64_t seed) {
  SplitMix64 g(seed * 6151 + 29);
  CaseSpec c;
  c.name = "cudnn-mla-" + std::to_string(seed);
  c.mla = MlaSpec{};
  c.mla->absorbed = false;
  const int heads[] = {16, 32, 64, 128};
  c.num_qo_heads = c.num_kv_heads = quick() ? 16 : heads[g.range(0, 3)];
  c.head_dim_qk = c.mla->qk_dim();
  c.head_dim_vo = c.mla->vo_dim();
  c.dtype = g.coin() ? DType::kBf16 : DType::kFp16;
  const int storage = g.range(0, 2);  // ragged, page 16, page 64
  if (storage == 0) {
    c.kv_cache.storage = KvStorage::kRagged;
    c.kv_cache.page_size = 1;
    c.kv_cache.null_page = false;
  } else {
    c.kv_cache.page_size = storage == 1 ? 16 : 64;
    c.kv_cache.layout = g.coin() ? KvLayout::kNHD : KvLayout::kHND;
    c.kv_cache.allocation = static_cast<PageAlloc>(g.range(0, 2));
    c.kv_cache.allocation_seed = g.next() % 1000;
  }
  c.kv_cache.poison_unused = false;  // cuDNN 9.19 reads whole pages (see the report of test_cudnn.cpp's poisoned cases)
  c.attention.causal = true;
  const int max_q = quick() ? 48 : 512, max_kv = quick() ? 200 : 2048;
  int64_t left = int64_t{1} << 25;  // (query, key, head) triples
  const int nreq = g.range(1, 3);
  for (int i = 0; i < nreq && left > 0; ++i) {
    RequestSpec r;
    r.kv_len = g.range(1, max_kv);
    r.q_len = g.range(0, 3) == 0 ? 1 : g.range(1, std::min(r.kv_len, max_q));
    r.q_len = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(r.q_len, left / (int64_t{r.kv_len} * c.num_qo_heads))));
    left -= int64_t{r.q_len} * r.kv_len * c.num_qo_heads;
    c.requests.push_back(r);
  }
  c.data.seed = g.next();
  c.backends = {kId};
  validate_case(c);
  return c;
}

void expect_finite(const Result& r, const std::string& name) {
  int64_t nan = 0;
  for (float x : r.o) nan += std::isnan(x);
  for (float x : r.lse) nan += std::isnan(x);
  EXPECT_EQ(nan, 0) << name << ": " << r.backend << " wrote NaN (or left poisoned elements)";
}

// cudnn.sdpa against cuda.reference (fp64) under the 2x rule with `lowp` as the same-precision
// baseline; the LSE (natural log on both sides) within 1e-3, fully masked rows at the same places.
// `w` is the host workload when `lowp` is a CPU backend (GPU backends make their inputs on the device).
void check_case(const CaseSpec& c, const std::string& lowp, const Workload& w = Workload{}) {
  const Plan p = make_plan(c);
  const Result a = run_id(kId, c, p, w), ref = run_id("cuda.reference", c, p, w), low = run_id(lowp, c, p, w);
  ASSERT_TRUE(a.ok()) << c.name << ": " << a.message;
  ASSERT_TRUE(ref.ok()) << c.name << ": " << ref.message;
  ASSERT_TRUE(low.ok()) << c.name << ": " << low.message;
  expect_finite(a, c.name);
  // 1e-5 floor: FlashAttention's rounding allowance, as every GPU test of the 2x rule
  const DiffReport d = compare_results(c, a, ref, {kId, "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, lowp}, &low);
  EXPECT_TRUE(d.verdict.pass) << c.name << ": " << d.verdict.detail << "\n  " << a.message;
  EXPECT_EQ(d.lse.nonfinite_mismatch, 0) << c.name << ": fully masked rows differ";
  EXPECT_LT(d.lse.max_abs, 1e-3) << c.name << ": LSE (natural log) differs\n  " << a.message;
}

// A random case cuDNN runs (cudnn_case.h cudnn_ok: its head dims, fp16 / bf16, no soft-cap, one
// document, prefixes inside the causal range, ALiBi only where q_len == kv_len), unpoisoned, with
// sinks (seeded, or given with some far above any logit so the sink holds most of the mass) and a
// window in every other case, none in the rest.
CaseSpec sink_case(uint64_t seed) {
  CaseSpec c = attnscope::testing::cudnn_ok(random_case(seed), seed);
  c.kv_cache.poison_unused = false;
  if (seed % 2) {
    // a window combines with neither a local chunk nor a prefix (case_rules.cpp)
    c.attention.local_chunk.reset();
    c.attention.prefix_lm = false;
    for (auto& r : c.requests) r.prefix_len.reset();
    c.attention.window = 1 + static_cast<int>(seed * 37 % 120);
  } else {
    c.attention.window.reset();
  }
  c.attention.sinks = SinksSpec{};
  if (seed % 3 == 1)
    for (int h = 0; h < c.num_qo_heads; ++h) c.attention.sinks->logits.push_back(-3.0 + 2.5 * ((seed + h) % 7));
  c.name = "cudnn-sinks-" + std::to_string(seed) + (c.attention.window ? "-window" : "");
  validate_case(c);
  return c;
}

// A small paged GQA batch for the host-side translation tests.
CaseSpec gqa_case() {
  CaseSpec c;
  c.name = "gqa";
  c.requests = {RequestSpec{1, 150}, RequestSpec{1, 77}, RequestSpec{1, 300}};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.dtype = DType::kBf16;
  c.kv_cache.page_size = 16;
  validate_case(c);
  return c;
}

}  // namespace

TEST(CudnnMla, TakesTheNonAbsorbedFormAndRefusesTheAbsorbedNamingWhoRunsIt) {
  const BackendInfo* info = backend_info(kId);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->mla, kMlaNonAbsorbed);
  EXPECT_TRUE(info->sinks);
  EXPECT_EQ(backend_info("cudnn.sdpa_fp8")->mla, 0u);
  // a family absent from the build is refused as "not compiled" first (registry.cpp refusal())
  const BackendFamily* f = family_of(kId);
  if (!f->compiled) GTEST_SKIP() << "the refusals: the cudnn family is not compiled: " << f->note;
  CaseSpec c = mla_case(1);
  c.mla->absorbed = true;
  c.num_kv_heads = 1;
  c.head_dim_qk = c.mla->qk_dim();
  c.head_dim_vo = c.mla->vo_dim();
  validate_case(c);
  const std::string why = refusal(kId, c);
  EXPECT_NE(why.find("does not take MLA's absorbed form"), std::string::npos) << why;
  EXPECT_NE(why.find("cuda.reference"), std::string::npos) << why;
  EXPECT_EQ(status_of_reason(why), Status::kUnsupported) << why;
  // the non-absorbed form is not refused for being MLA (at most for the device or the build)
  const std::string non = refusal(kId, mla_case(1));
  EXPECT_EQ(non.find("MLA"), std::string::npos) << non;
}

TEST(CudnnMla, VersionRulesForPagedWideHeadsAndSinks) {
  CaseSpec paged = mla_case(3);
  paged.kv_cache = KvCacheSpec{};
  paged.kv_cache.page_size = 64;
  validate_case(paged);
  CaseSpec ragged = paged;
  ragged.kv_cache = KvCacheSpec{};
  ragged.kv_cache.storage = KvStorage::kRagged;
  ragged.kv_cache.page_size = 1;
  ragged.kv_cache.null_page = false;
  validate_case(ragged);
  using peers::cudnn::refusal_reason;
  // qk 192 over pages: cuDNN 9.9 and older page only d <= 128, 9.10.0 / 9.10.1 refuse fp16 / bf16 SDPA
  for (int v : {90700, 90900, 91000, 91001}) {
    const std::string why = refusal_reason(paged, v);
    EXPECT_NE(why.find("qk 192 / vo 128 over a paged KV cache"), std::string::npos) << v << ": " << why;
    EXPECT_NE(why.find("9.10.2"), std::string::npos) << why;
    EXPECT_EQ(refusal_reason(ragged, v), "") << v;  // Hopper's unpaged d_qk != d_v: from 9.1
  }
  for (int v : {91002, 91300, 91900}) EXPECT_EQ(refusal_reason(paged, v), "") << v;
  // head dims up to 128 are paged from the 9.7 floor as before
  CaseSpec narrow = gqa_case();
  EXPECT_EQ(refusal_reason(narrow, 90700), "");

  // sinks: SDPA's sink_token, from 9.13.1
  CaseSpec sinks = gqa_case();
  sinks.attention.sinks = SinksSpec{};
  validate_case(sinks);
  for (int v : {90700, 91200, 91300}) {
    const std::string why = refusal_reason(sinks, v);
    const std::string ver = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
    EXPECT_EQ(why.rfind("cuDNN " + ver + " has no sink input", 0), 0u) << why;
  }
  for (int v : {91301, 91900}) EXPECT_EQ(refusal_reason(sinks, v), "") << v;
}

TEST(CudnnMla, SinksKeepGqaDecodeUnpackedAndGivePaddingRowsTheSink) {
  using namespace peers::cudnn;
  CaseSpec c = gqa_case();
  // without sinks a GQA decode batch is packed (the group's query heads as rows of one KV head)
  SdpaProblem s = translate(c, make_plan(c));
  EXPECT_EQ(s.key.group, 4);
  EXPECT_FALSE(s.key.sinks);
  // the sink is one value per cuDNN head: packed rows would be different query heads
  c.attention.sinks = SinksSpec{{-1.0, 0.5, 2.0, 3.0, -4.0, 1.0, 0.0, 7.5}};
  validate_case(c);
  s = translate(c, make_plan(c));
  EXPECT_EQ(s.key.group, 1);
  EXPECT_TRUE(s.key.sinks);
  EXPECT_EQ(s.key.hq, 8);
  EXPECT_NE(s.key.describe().find("sinks"), std::string::npos) << s.key.describe();
  EXPECT_NE(s.masks.find("sink_token"), std::string::npos) << s.masks;

  // padding queries are outside cuDNN's sequences: O = 0 and LSE = the head's sink (-inf without)
  c.requests = {RequestSpec{6, 40}, RequestSpec{3, 3}};
  c.requests[0].pad_start = 37;  // the last 3 queries are padding
  c.requests[1].pad_start = 0;   // every query is padding
  for (bool with_sinks : {true, false}) {
    if (!with_sinks) c.attention.sinks.reset();
    validate_case(c);
    const Plan p = make_plan(c);
    s = translate(c, p);
    const int Hq = c.num_qo_heads, dv = c.head_dim_vo;
    std::vector<float> o(c.total_q() * Hq * dv, std::nanf("")), lse(c.total_q() * Hq, std::nanf(""));
    apply_conventions(c, s, &o, &lse);
    const std::vector<float> sink = sink_logits(c);
    for (int64_t t = 0; t < c.total_q(); ++t) {
      const bool padding = t >= 3;  // tokens 3..5 of request 0, all of request 1
      for (int h = 0; h < Hq; ++h) {
        const float x = lse[t * Hq + h];
        if (!padding) {
          EXPECT_TRUE(std::isnan(x)) << "token " << t << ": a computed row is cuDNN's, left as it wrote it";
          continue;
        }
        if (with_sinks)
          EXPECT_EQ(x, sink[h]) << "token " << t << " head " << h;
        else
          EXPECT_EQ(x, -std::numeric_limits<float>::infinity()) << "token " << t;
        for (int d = 0; d < dv; ++d) ASSERT_EQ(o[(t * Hq + h) * dv + d], 0.0f);
      }
    }
  }
}

TEST(CudnnMla, RandomNonAbsorbedCasesPassTheTwiceLowpRule) {
  REQUIRE_COMPILED_GPU(kId);
  // cuda.naive (the dtype's inputs, O rounded to the dtype) as the baseline: the host workload of
  // 128 heads x 2048 up-projected keys would take cpu.lowp minutes to generate
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(gpu_cases(8, 2)); ++seed) {
    const CaseSpec c = mla_case(seed);
    SCOPED_TRACE(c.name + ": " + std::to_string(c.num_qo_heads) + " heads, " + std::to_string(c.requests.size()) +
                 " requests, page " + std::to_string(c.kv_cache.page_size));
    check_case(c, "cuda.naive");
  }
}

TEST(CudnnMla, SmallNonAbsorbedCasesAgainstCpuLowp) {
  REQUIRE_COMPILED_GPU(kId);
  // The same rule with cpu.lowp (P and the sums in the dtype, PyTorch's eager path) as the baseline,
  // on each storage: ragged, paged NHD page 64, paged HND page 16 (fragmented).
  for (int storage = 0; storage < 3; ++storage) {
    CaseSpec c = mla_case(100 + storage);
    c.num_qo_heads = c.num_kv_heads = 16;
    c.requests = {RequestSpec{quick() ? 20 : 100, quick() ? 60 : 300}, RequestSpec{37, 37}, RequestSpec{1, 90}};
    c.kv_cache = KvCacheSpec{};
    if (storage == 0) {
      c.kv_cache.storage = KvStorage::kRagged;
      c.kv_cache.page_size = 1;
      c.kv_cache.null_page = false;
    } else {
      c.kv_cache.page_size = storage == 1 ? 64 : 16;
      c.kv_cache.layout = storage == 1 ? KvLayout::kNHD : KvLayout::kHND;
      c.kv_cache.allocation = storage == 1 ? PageAlloc::kShuffled : PageAlloc::kFragmented;
    }
    validate_case(c);
    SCOPED_TRACE(c.name + " storage " + std::to_string(storage));
    const Plan p = make_plan(c);
    check_case(c, "cpu.lowp", make_workload(c, p.pages));
  }
}

TEST(CudnnMla, RandomSinkCasesWithAndWithoutWindowsPassTheTwiceLowpRule) {
  REQUIRE_COMPILED_GPU(kId);
  int windows = 0, plain = 0;
  for (uint64_t seed = 300; seed < 300 + static_cast<uint64_t>(gpu_cases(20, 4)); ++seed) {
    const CaseSpec c = sink_case(seed);
    SCOPED_TRACE(c.name);
    ASSERT_EQ(refusal(kId, c), "");
    const Plan p = make_plan(c);
    check_case(c, "cpu.lowp", make_workload(c, p.pages));
    ++(c.attention.window ? windows : plain);
  }
  EXPECT_GT(windows, 0);
  EXPECT_GT(plain, 0);
}

TEST(CudnnMla, SinksChangeTheResultAndPaddingRowsCarryTheSink) {
  REQUIRE_COMPILED_GPU(kId);
  // A sink that holds most of the mass: the output must move (a backend that drops the sink, vLLM
  // #52148, fails here), and padding rows report LSE = the sink, as cuda.reference does.
  CaseSpec c;
  c.name = "cudnn-sink-mass";
  c.requests = {RequestSpec{40, 100}, RequestSpec{1, 77}, RequestSpec{5, 50}};
  c.requests[2].pad_start = 47;  // queries at 47..49, the last 3, are padding (fully masked)
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.dtype = DType::kBf16;
  c.kv_cache.page_size = 16;
  validate_case(c);
  const Plan p = make_plan(c);
  const Result plain = run_id(kId, c, p, Workload{});
  ASSERT_TRUE(plain.ok()) << plain.message;
  c.attention.sinks = SinksSpec{{6, 6, 6, 6, 6, 6, 6, 6}};
  validate_case(c);
  check_case(c, "cpu.lowp", make_workload(c, p.pages));
  const Result a = run_id(kId, c, p, Workload{}), ref = run_id("cuda.reference", c, p, Workload{});
  ASSERT_TRUE(a.ok()) << a.message;
  double moved = 0;
  for (size_t i = 0; i < a.o.size(); ++i) moved = std::max(moved, std::abs(static_cast<double>(a.o[i]) - plain.o[i]));
  EXPECT_GT(moved, 0.05) << "the sink did not change the output";
  const int64_t first_pad = 40 + 1 + 2;
  for (int64_t t = first_pad; t < c.total_q(); ++t)
    for (int h = 0; h < c.num_qo_heads; ++h) {
      EXPECT_EQ(a.lse[t * c.num_qo_heads + h], 6.0f) << "token " << t;
      EXPECT_EQ(ref.lse[t * c.num_qo_heads + h], 6.0f) << "token " << t;
    }
}
