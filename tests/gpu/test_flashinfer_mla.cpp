// flashinfer.mla (FlashInfer's MLA kernel, mla.cuh) and flashinfer.mla_sm90 (its Hopper kernel,
// mla_hopper.cuh), both planned by FlashInfer's MLAPlan, on random absorbed MLA cases: within the 2x
// rule of cuda.reference with cpu.lowp as the low-precision baseline, page sizes 1 / 16 / 64, 16..128
// heads, 1..4 queries per request (causal, some not), shuffled pages with the unused ones poisoned
// (NaN), split and unsplit schedules. Skips with the reason without CUDA, the family or a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attnscope/compare.h"
#include "attnscope/mla.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "fi_library_plan.h"
#include "gpu_test_util.h"
#include "require.h"

using namespace attnscope;
using attnscope::testing::gpu_cases;
using attnscope::testing::run_id;

namespace {

CaseSpec mla_gpu_case(uint64_t seed) {
  SplitMix64 g(seed * 6151 + 11);
  const int heads[] = {16, 32, 64, 128};
  const int h = heads[g.range(0, 3)];  // drawn before the dtype, as the cases were recorded
  const DType dt = g.range(0, 3) == 0 ? DType::kFp16 : DType::kBf16;
  CaseSpec c = attnscope::testing::absorbed_mla_case("fi-mla-" + std::to_string(seed), h, dt);
  const int pages[] = {1, 16, 64};
  c.kv_cache.page_size = pages[seed % 3];
  c.kv_cache.allocation = PageAlloc::kShuffled;
  c.kv_cache.allocation_seed = seed;
  c.kv_cache.poison_unused = true;
  c.attention.causal = g.range(0, 4) != 0;
  c.split.num_sms = 132;
  const int n = g.range(1, 8);
  for (int i = 0; i < n; ++i) {
    RequestSpec r;
    r.kv_len = g.range(1, g.coin() ? 200 : 3000);
    r.q_len = g.range(1, std::min(4, r.kv_len));
    c.requests.push_back(r);
  }
  c.data.seed = seed;
  validate_case(c);
  return c;
}

#define REQUIRE_FLASHINFER_MLA(id)      \
  do {                                  \
    REQUIRE_GPU();                      \
    REQUIRE_TAKES(id, mla_gpu_case(1)); \
  } while (0)

// One backend on `cases` random cases; returns how many schedules split a tile.
int check_backend(const std::string& id, int cases) {
  int split = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(cases); ++seed) {
    const CaseSpec c = mla_gpu_case(seed);
    SCOPED_TRACE(c.name + " heads " + std::to_string(c.num_qo_heads) + " page " + std::to_string(c.kv_cache.page_size));
    const Plan p = plan_case(c);
    const Workload w = make_workload(c, p.pages);
    const Result lowp = run_id("cpu.lowp", c, p, w), gref = run_id("cuda.reference", c, p, w);
    EXPECT_TRUE(lowp.ok() && gref.ok()) << lowp.message << " / " << gref.message;
    const Result a = run_id(id, c, p, w);
    EXPECT_TRUE(a.ok()) << a.message;
    if (!a.ok() || !gref.ok() || !lowp.ok()) continue;
    bool nan = false;
    for (float x : a.o) nan = nan || std::isnan(x);
    EXPECT_FALSE(nan) << id << " wrote NaN";
    const DiffReport d = compare_results(c, a, gref, {id, "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
    EXPECT_TRUE(d.verdict.pass) << id << ": " << d.verdict.detail << " (" << a.message << ")";
    EXPECT_LT(d.lse.max_abs, 1e-2) << id;
    const auto& works = p.library.flashinfer_mla.schedule.works;
    split += std::any_of(works.begin(), works.end(), [](const MlaWork& x) { return x.partial_indptr >= 0; });
  }
  return split;
}

}  // namespace

TEST(FlashInferMla, Fa2KernelWithinTwiceLowpOnRandomCases) {
  REQUIRE_FLASHINFER_MLA("flashinfer.mla");
  EXPECT_GT(check_backend("flashinfer.mla", gpu_cases(24, 6)), 0);
}

TEST(FlashInferMla, HopperKernelWithinTwiceLowpOnRandomCases) {
  REQUIRE_FLASHINFER_MLA("flashinfer.mla_sm90");
  EXPECT_GT(check_backend("flashinfer.mla_sm90", gpu_cases(24, 6)), 0);
}

// What FlashInfer's MLA kernels cannot take is refused with what they take (no device needed).
TEST(FlashInferMla, RefusesWhatItCannotTake) {
  if (!flashinfer_planner_compiled()) GTEST_SKIP() << "the flashinfer family is not compiled";
  for (const char* id : {"flashinfer.mla", "flashinfer.mla_sm90"}) {
    auto b = make_backend(id);
    CaseSpec c = mla_gpu_case(3);
    auto expect_refusal = [&](const CaseSpec& x, const std::string& part) {
      const std::string why = b->check(x);
      EXPECT_NE(why.find(part), std::string::npos) << id << ": " << why;
      EXPECT_NE(why.find("kv_lora_rank 512"), std::string::npos) << id << ": " << why;
    };
    CaseSpec w = c;
    w.attention.window = 64;
    expect_refusal(w, "/attention/window");
    CaseSpec s = c;
    s.attention.sinks = SinksSpec{};
    expect_refusal(s, "/attention/sinks");
    CaseSpec plain;
    plain.requests = {{1, 10}};
    expect_refusal(plain, "not an MLA case");
    CaseSpec f = c;
    f.dtype = DType::kFp32;
    expect_refusal(f, "dtype fp32");
    CaseSpec non = mla_other_form(c);
    expect_refusal(non, "non-absorbed");
    CaseSpec r = c;
    r.mla->kv_lora_rank = 256;
    EXPECT_NE(b->check(r).find("head_dim_ckv 512"), std::string::npos) << b->check(r);
  }
}
