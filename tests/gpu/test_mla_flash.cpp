// cuda.flash on MLA's absorbed form (flash_mla_kernel.cuh, and flash_mla_sm90_kernel.cuh on Hopper; docs/conventions.md
// section 13): random seeded
// absorbed cases (16 / 64 / 128 query heads on one latent head of qk 576 / vo 512, q_len 1..4 causal,
// up to 5000 keys, page sizes 1 / 16 / 64 and ragged, shuffled or fragmented allocation, poisoned unused
// pages, fully masked rows by padding, split-KV forced on (planner fixed) and off) within the 2x rule
// against cuda.reference with cpu.lowp as the baseline; batch invariance with a fixed split and tile;
// the refusals naming their rule. Skips with the reason without CUDA or a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "attnscope/workload.h"
#include "gpu_test_util.h"

using namespace attnscope;
using attnscope::testing::gpu_cases;
using attnscope::testing::run_id;

namespace {

// An absorbed MLA case of DeepSeek's dims. Under ATTNSCOPE_GPU_QUICK (compute-sanitizer) at most 600 keys.
CaseSpec mla_flash_case(uint64_t seed) {
  SplitMix64 g(seed * 7919 + 23);
  const int heads[] = {16, 64, 128};
  const DType dt = g.coin() ? DType::kBf16 : DType::kFp16;
  CaseSpec c = attnscope::testing::absorbed_mla_case("mla-flash-" + std::to_string(seed), heads[seed % 3], dt);
  const int pss[] = {1, 16, 64};
  if (g.range(0, 5) == 0) {
    c.kv_cache.storage = KvStorage::kRagged;
    c.kv_cache.page_size = 1;
    c.kv_cache.null_page = false;
  } else {
    c.kv_cache.page_size = pss[g.range(0, 2)];
    c.kv_cache.allocation = static_cast<PageAlloc>(g.range(0, 2));  // in order, shuffled, fragmented
    c.kv_cache.allocation_seed = g.next() % 1000;
    c.kv_cache.layout = g.coin() ? KvLayout::kNHD : KvLayout::kHND;
    c.kv_cache.poison_unused = true;
  }
  c.attention.causal = true;
  const int max_kv = std::getenv("ATTNSCOPE_GPU_QUICK") ? 600 : 5000;
  for (int i = g.range(1, 3); i > 0; --i) {
    RequestSpec r;
    // one request in three long, the others short: the CPU baseline stays quick at 128 heads
    r.kv_len = g.range(0, 2) == 0 ? g.range(1, max_kv) : g.range(1, 400);
    r.q_len = g.range(1, std::min(r.kv_len, 4));
    if (g.range(0, 4) == 0) r.pad_start = g.range(0, r.kv_len - 1);  // the rows past it see nothing
    c.requests.push_back(r);
  }
  if (g.range(0, 3) == 0) c.attention.window = g.range(1, 300);
  c.data.seed = g.next();
  // split forced on (fixed, small chunks) or off, or FlashInfer's planner; the tile 16, 32 (the planner's
  // at more than 32 packed rows) or 64 (fixed): every row-group count of the kernel
  const int mode = static_cast<int>(seed % 4);
  c.split.planner = mode == 0 ? Planner::kOff : mode == 3 ? Planner::kFlashInfer : Planner::kFixed;
  if (c.split.planner == Planner::kFixed) c.split.fixed_split_size = std::max(1, g.range(2, 12) * 16 / c.effective_page_size());
  if (g.range(0, 2) == 0) c.split.fixed_tile_q = g.coin() ? 16 : 64;
  c.split.partials = g.coin() ? PartialPrecision::kFp32 : PartialPrecision::kDtype;
  validate_case(c);
  return c;
}

struct Seen {
  int split = 0, unsplit = 0, masked_rows = 0;
  std::set<int> tiles;
};

// Whether the Hopper MLA kernel runs here ("" = it does): a device of compute capability 9.0 and the
// kernel in this build (seen in the kernel name cuda.flash reports).
std::string hopper_mla_missing() {
  if (!cuda_compiled()) return "this build has no CUDA backends";
  std::string why;
  const auto devs = query_devices(&why);
  if (devs.empty()) return why;
  if (devs[0].cc_major != 9 || devs[0].cc_minor != 0)
    return "device 0 is compute capability " + std::to_string(devs[0].cc_major) + "." + std::to_string(devs[0].cc_minor) +
           ": the Hopper MLA kernel is sm_90a code";
  const CaseSpec c = mla_flash_case(2);
  const Plan p = make_plan(c);
  const Result r = run_id("cuda.flash", c, p, make_workload(c, p.pages));
  if (r.ok() && r.message.find("flash_mla_sm90_kernel") == std::string::npos)
    return "this build has no Hopper MLA kernel (CMAKE_CUDA_ARCHITECTURES without 90): cuda.flash reports " + r.message;
  return r.ok() ? "" : r.message;
}

// cuda.flash with ATTNSCOPE_FLASH_PATH=mma (the mma.sync kernel on any GPU) or unset (the default: the
// Hopper kernel where it runs)
Result run_flash(const CaseSpec& c, const Plan& p, const Workload& w, bool mma) {
  if (mma) setenv("ATTNSCOPE_FLASH_PATH", "mma", 1);
  Result r = run_id("cuda.flash", c, p, w);
  unsetenv("ATTNSCOPE_FLASH_PATH");
  return r;
}

// `kernel`: the substring cuda.flash's kernel name must have ((mma.sync) or (wgmma))
void check_mla_case(const CaseSpec& c, Seen* seen, bool mma = false, const char* kernel = "flash_mla") {
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result gref = run_id("cuda.reference", c, p, w), lowp = run_id("cpu.lowp", c, p, w);
  ASSERT_TRUE(gref.ok() && lowp.ok()) << gref.message << " / " << lowp.message;
  const Result a = run_flash(c, p, w, mma);
  ASSERT_TRUE(a.ok()) << a.message;
  EXPECT_NE(a.message.find(kernel), std::string::npos) << a.message;
  ASSERT_EQ(a.o.size(), static_cast<size_t>(c.total_q() * c.num_qo_heads * 512));
  for (float x : a.o) ASSERT_FALSE(std::isnan(x)) << c.name << ": cuda.flash left a poisoned (NaN) output";
  for (float x : a.lse) ASSERT_FALSE(std::isnan(x)) << c.name << ": cuda.flash left a poisoned (NaN) LSE";
  // 1e-5 floor: FlashAttention's rounding allowance, as every GPU test of the 2x rule
  const DiffReport d =
      compare_results(c, a, gref, {"cuda.flash", "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  EXPECT_TRUE(d.verdict.pass) << c.name << ": " << d.verdict.detail;
  for (size_t i = 0; i < a.lse.size(); ++i) seen->masked_rows += std::isinf(a.lse[i]) && a.lse[i] < 0;
  (p.split.split_kv ? seen->split : seen->unsplit)++;
  seen->tiles.insert(p.split.cta_tile_q);
}

}  // namespace

TEST(MlaFlashGpu, AbsorbedRandomCasesWithinTwiceLowp) {
  REQUIRE_GPU();
  Seen seen;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(gpu_cases(36, 12)); ++seed) {
    const CaseSpec c = mla_flash_case(seed);
    SCOPED_TRACE(c.name + " heads " + std::to_string(c.num_qo_heads) + " page " + std::to_string(c.effective_page_size()));
    check_mla_case(c, &seen);
  }
  EXPECT_GT(seen.split, 0);
  EXPECT_GT(seen.unsplit, 0);
  EXPECT_GT(seen.masked_rows, 0) << "no fully masked row was drawn";
  EXPECT_EQ(seen.tiles, (std::set<int>{16, 32, 64})) << "every row-group count of the kernel";
}

// The mma.sync kernel where the Hopper one would run (on other GPUs the test above already runs it).
TEST(MlaFlashGpu, MmaSyncKernelOnHopperWithinTwiceLowp) {
  REQUIRE_GPU();
  const std::string why = hopper_mla_missing();
  if (!why.empty()) GTEST_SKIP() << why << " (the test above runs the mma.sync kernel)";
  Seen seen;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(gpu_cases(12, 6)); ++seed) {
    const CaseSpec c = mla_flash_case(seed);
    SCOPED_TRACE(c.name);
    check_mla_case(c, &seen, true, "(mma.sync)");
  }
  EXPECT_GT(seen.split, 0);
}

// The Hopper kernel runs on an sm_90 device with it built, and its results stay within the 2x rule
// of the mma.sync kernel's on every tile (16 / 32 / 64-row items: one to four per 64-row CTA); each
// row's P is the same dtype rounding of the same logits, so most elements agree to the bit.
TEST(MlaFlashGpu, HopperKernelBesideMmaSync) {
  REQUIRE_GPU();
  const std::string why = hopper_mla_missing();
  if (!why.empty()) GTEST_SKIP() << why;
  int64_t same = 0, total = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(gpu_cases(8, 4)); ++seed) {
    const CaseSpec c = mla_flash_case(seed);
    SCOPED_TRACE(c.name);
    Seen seen;
    check_mla_case(c, &seen, false, "(wgmma)");
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result hop = run_flash(c, p, w, false), mma = run_flash(c, p, w, true);
    ASSERT_TRUE(hop.ok() && mma.ok()) << hop.message << " / " << mma.message;
    ASSERT_EQ(hop.o.size(), mma.o.size());
    for (size_t i = 0; i < hop.o.size(); ++i) same += f32_bits(hop.o[i]) == f32_bits(mma.o[i]);
    total += static_cast<int64_t>(hop.o.size());
  }
  // not a pass rule (the tensor cores' internal sums may differ), a record of how close the forms are
  std::printf("[ info ] Hopper vs mma.sync MLA kernel: %lld of %lld output elements bit-identical\n",
              static_cast<long long>(same), static_cast<long long>(total));
}

// One small case alone (compute-sanitizer racecheck runs this one).
TEST(MlaFlashGpu, SmallCaseWithSplit) {
  REQUIRE_GPU();
  CaseSpec c = mla_flash_case(5);
  c.requests = {RequestSpec{}, RequestSpec{}};
  c.requests[0].q_len = 2;
  c.requests[0].kv_len = 150;
  c.requests[1].q_len = 1;
  c.requests[1].kv_len = 70;
  c.split = SplitSpec{};
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = std::max(1, 64 / c.effective_page_size());
  validate_case(c);
  Seen seen;
  check_mla_case(c, &seen);
  EXPECT_EQ(seen.split, 1);
}

// With a fixed split and a fixed tile, each request's chunks and tiles do not depend on the batch, so
// its outputs alone are bit-identical to its rows in the batch.
TEST(MlaFlashGpu, BatchInvariantWithAFixedSplit) {
  REQUIRE_GPU();
  for (int tile : {16, 64}) {
    CaseSpec c = mla_flash_case(3);
    c.num_qo_heads = 64;
    c.attention.window.reset();  // every request splits at 256 keys
    c.requests.clear();
    for (int kv : {1200, 90, 3000, 517}) {
      RequestSpec r;
      r.kv_len = kv;
      r.q_len = kv % 3 + 1;
      c.requests.push_back(r);
    }
    c.split = SplitSpec{};
    c.split.planner = Planner::kFixed;
    c.split.fixed_split_size = std::max(1, 256 / c.effective_page_size());
    c.split.fixed_tile_q = tile;
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) c.requests[r].seed = c.request_seed(r);
    validate_case(c);
    const Plan pb = make_plan(c);
    const Result batch = run_id("cuda.flash", c, pb, Workload{});
    ASSERT_TRUE(batch.ok()) << batch.message;
    ASSERT_TRUE(pb.split.split_kv);
    const Workload wb = make_workload(c, pb.pages);
    const int Hq = c.num_qo_heads, Dv = c.head_dim_vo, Dq = c.head_dim_qk;
    int64_t tok = 0;
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      SCOPED_TRACE("tile " + std::to_string(tile) + " request " + std::to_string(r));
      const CaseSpec one = sub_case(c, {r});
      const Plan po = make_plan(one);
      // the same inputs alone (else the comparison below would test the generator)
      const Workload wo = make_workload(one, po.pages);
      ASSERT_TRUE(std::equal(wo.q.begin(), wo.q.end(), wb.q.begin() + tok * Hq * Dq)) << "request's Q differs alone";
      const Result alone = run_id("cuda.flash", one, po, Workload{});
      ASSERT_TRUE(alone.ok()) << alone.message;
      int64_t diff = 0;
      for (int64_t i = 0; i < static_cast<int64_t>(alone.o.size()); ++i)
        diff += f32_bits(alone.o[i]) != f32_bits(batch.o[tok * Hq * Dv + i]);
      for (int64_t i = 0; i < static_cast<int64_t>(alone.lse.size()); ++i)
        diff += f32_bits(alone.lse[i]) != f32_bits(batch.lse[tok * Hq + i]);
      EXPECT_EQ(diff, 0);
      tok += c.requests[r].q_len;
    }
  }
}

// What the MLA kernel does not take is refused naming the rule (sinks and FP8 with /mla fail validation
// before any backend); the non-absorbed form is refused.
TEST(MlaFlashGpu, RefusalsNameTheRule) {
  REQUIRE_GPU();
  auto flash = make_backend("cuda.flash");
  CaseSpec base = mla_flash_case(2);
  EXPECT_EQ(flash->check(base), "");
  CaseSpec alibi = base;
  alibi.attention.alibi = true;
  validate_case(alibi);
  EXPECT_NE(flash->check(alibi).find("/attention/alibi with /mla"), std::string::npos) << flash->check(alibi);
  CaseSpec rank = base;
  rank.mla->kv_lora_rank = 256;
  rank.head_dim_qk = rank.mla->qk_dim();
  rank.head_dim_vo = rank.mla->vo_dim();
  validate_case(rank);
  EXPECT_NE(flash->check(rank).find("kv_lora_rank 512 and rope_dim 64 only"), std::string::npos) << flash->check(rank);
  CaseSpec cap = base;
  cap.attention.soft_cap = 30.0;
  validate_case(cap);
  EXPECT_NE(flash->check(cap).find("soft_cap"), std::string::npos) << flash->check(cap);
  CaseSpec non = base;
  non.mla->absorbed = false;
  non.num_kv_heads = non.num_qo_heads;
  non.head_dim_qk = non.mla->qk_dim();
  non.head_dim_vo = non.mla->vo_dim();
  validate_case(non);
  const Plan p = make_plan(non);
  const Result r = run_id("cuda.flash", non, p, Workload{});
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message.find("absorbed"), std::string::npos) << r.message;
}
