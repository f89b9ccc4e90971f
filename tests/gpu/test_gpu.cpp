// GPU backends against the fp64 GPU reference (FlashAttention's 2x rule, with cpu.lowp as the
// same-precision baseline), against the CPU twins, and the storage / invariance properties.
// Every test skips with the reason when this build has no CUDA or the machine no device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "case_gen.h"
#include "case_json.h"
#include "invariance.h"
#include "require.h"

using namespace attnscope;
using attnscope::testing::random_case;
using attnscope::testing::set_head_dim;
namespace fs = std::filesystem;

namespace {

// Under compute-sanitizer (ATTNSCOPE_GPU_QUICK=1) the randomised loops run a sixth of their cases.
int cases(int full) { return std::getenv("ATTNSCOPE_GPU_QUICK") ? std::max(2, full / 6) : full; }

Result run(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w, std::optional<int> sample = std::nullopt) {
  auto b = make_backend(id);
  RunOptions o;
  o.sample_rows = sample;
  return run_backend(*b, c, p, w, o);
}

void expect_finite(const Result& r) {
  int64_t nan = 0;
  for (float x : r.o) nan += std::isnan(x);
  for (float x : r.lse) nan += std::isnan(x);
  EXPECT_EQ(nan, 0) << r.backend << " wrote NaN (or left poisoned elements)";
}

// The FlashAttention rule against cuda.reference, cpu.lowp as the same-precision baseline.
void check_twice_lowp(const CaseSpec& c, const std::string& id) {
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result a = run(id, c, p, w), ref = run("cuda.reference", c, p, w), lowp = run("cpu.lowp", c, p, w);
  ASSERT_TRUE(a.ok()) << a.message;
  ASSERT_TRUE(ref.ok()) << ref.message;
  expect_finite(a);
  // 1e-5 floor: FlashAttention's rounding allowance; every other unit of error must come from
  // the kernel being no worse than twice the naive low-precision computation.
  const DiffReport d = compare_results(c, a, ref, {id, "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  EXPECT_TRUE(d.verdict.pass) << c.name << ": " << d.verdict.detail;
}

CaseSpec flash_ok(CaseSpec c, uint64_t seed) {
  const int dims[] = {32, 64, 96, 128, 256};
  set_head_dim(c, dims[seed % 5]);
  if (c.dtype == DType::kFp32) c.dtype = DType::kBf16;
  c.data.outlier_channels.clear();
  validate_case(c);
  return c;
}

}  // namespace

TEST(Gpu, DeviceGeneratorMatchesHostBitForBit) {
  REQUIRE_GPU();
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(cases(12)); ++seed) {
    CaseSpec c = random_case(seed);
    if (seed % 3 == 0) {
      c.data.outlier_channels = {0};
      c.data.outlier_scale = 9.0;
    }
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    std::vector<float> q, k, v;
    std::string why;
    ASSERT_TRUE(device_generated_inputs(c, p, &q, &k, &v, &why)) << why;
    auto same = [](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
      ASSERT_EQ(a.size(), b.size()) << what;
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i]) && std::isnan(b[i])) continue;  // poisoned slots
        ASSERT_EQ(f32_bits(a[i]), f32_bits(b[i])) << what << "[" << i << "]";
      }
    };
    same(q, w.q, "Q");
    same(k, w.k_pool, "K");
    same(v, w.v_pool, "V");
  }
}

TEST(Gpu, EveryExamplePassesTheTwiceLowpRule) {
  REQUIRE_GPU();
  int n = 0;
  for (const auto& e : fs::directory_iterator(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    const CaseSpec c = read_case_file(e.path().string()).spec;
    for (const char* id : {"cuda.flash", "cuda.naive"}) {
      // an FP8 example cuda.flash does not take (per-token scales, FP8 attention) and MLA's non-absorbed
      // form (cuda.flash runs the absorbed one) are refused by name, and so is a /sparse (DSA) example
      // without a gathered form (a score_mod) on cuda.flash; nothing else is: cuda.flash runs the gathered
      // form, cuda.naive the selection's mask bits
      const std::string why = refusal(id, c);
      if (why.empty())
        check_twice_lowp(c, id);
      else
        std::cout << "[ refused  ] " << e.path().filename() << " " << id << ": " << why << "\n";
      const bool may_refuse = (std::string(id) == "cuda.flash" && (c.fp8_kv() || (c.mla && !c.mla->absorbed))) ||
                              (c.is_sparse() && why.find("/sparse") != std::string::npos && c.attention.score_mod);
      EXPECT_TRUE(why.empty() || may_refuse) << why;
    }
    ++n;
  }
  EXPECT_GE(n, 8);
}

TEST(Gpu, RandomCasesPassTheTwiceLowpRule) {
  REQUIRE_GPU();
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(cases(60)); ++seed) {
    const CaseSpec c = flash_ok(random_case(seed), seed);
    SCOPED_TRACE(c.name + " head_dim " + std::to_string(c.head_dim_qk));
    check_twice_lowp(c, "cuda.flash");
  }
}

TEST(Gpu, ReferenceAgreesWithTheCpuReference) {
  REQUIRE_GPU();
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(cases(20)); ++seed) {
    const CaseSpec c = random_case(seed);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result g = run("cuda.reference", c, p, w), h = run("cpu.reference", c, p, w);
    ASSERT_TRUE(g.ok()) << g.message;
    // both fp64 on the same inputs, stored as fp32: only summation order differs (~1e-15
    // relative), so agreement within 2 fp32 ulps of magnitude-<=4 outputs is expected.
    const DiffReport d =
        compare_results(c, g, h, {"cuda.reference", "cpu.reference", CompareRule::kAllclose, 1e-6, 1e-6, ""}, nullptr);
    EXPECT_TRUE(d.verdict.pass) << c.name << ": " << d.verdict.detail;
  }
}

TEST(Gpu, FlashAgreesWithTheCpuTwin) {
  REQUIRE_GPU();
  for (uint64_t seed = 100; seed < 100 + static_cast<uint64_t>(cases(30)); ++seed) {
    const CaseSpec c = flash_ok(random_case(seed), seed);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result g = run("cuda.flash", c, p, w), h = run("cpu.tiled", c, p, w);
    ASSERT_TRUE(g.ok()) << g.message;
    // Same plan, tiles and merge order; they differ in the order of the 16-wide MMA sums and in
    // exp2f's last bits, which can flip a bf16 rounding of P or O: allow two bf16 ulps.
    const DiffReport d = compare_results(c, g, h, {"cuda.flash", "cpu.tiled", CompareRule::kAllclose, 1.6e-2, 2e-3, ""}, nullptr);
    EXPECT_TRUE(d.verdict.pass) << c.name << ": " << d.verdict.detail;
    EXPECT_LT(d.lse.max_abs, 1e-3) << c.name;
  }
}

// The 128-row tile of the plain and the soft-cap / ALiBi kernels runs FlashAttention-2's layout (4
// warps x 2 row blocks) with ATTNSCOPE_FLASH_RB=2 and 8 warps x 1 block with =1: the same rows, tiles
// and order of every sum, so the same bits (masks, local chunks, soft-cap, ALiBi, split-KV partials;
// every head dim below 256). Expressions are cleared: the mask-bit kernels have one layout.
TEST(Gpu, FlashRowBlockLayoutsGiveTheSameBits) {
  REQUIRE_GPU();
  int ran = 0;
  for (uint64_t seed = 300; seed < 300 + static_cast<uint64_t>(cases(24)); ++seed) {
    CaseSpec c = flash_ok(random_case(seed), seed);
    if (c.head_dim_qk >= 256) set_head_dim(c, 128);  // head dim 256 has one layout
    c.split.fixed_tile_q = 128;
    c.attention.mask_mod.reset();
    c.attention.score_mod.reset();
    validate_case(c);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    setenv("ATTNSCOPE_FLASH_RB", "1", 1);
    const Result one = run("cuda.flash", c, p, w);
    setenv("ATTNSCOPE_FLASH_RB", "2", 1);
    const Result two = run("cuda.flash", c, p, w);
    unsetenv("ATTNSCOPE_FLASH_RB");
    ASSERT_TRUE(one.ok() && two.ok()) << c.name << ": " << one.message << two.message;
    EXPECT_TRUE(compare_results(c, one, two, {"rb1", "rb2", CompareRule::kBitwise, 0, 0, ""}, nullptr).verdict.pass)
        << c.name << " head_dim " << c.head_dim_qk;
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

// The launch order is the kernel's, not the plan's (FlashParams::heads_inner, item_of_cta): on decode batches,
// where the 16-row tile with key-split warps runs (its message names "x4 warps"), the grid with the KV heads
// innermost (the default), outermost (ATTNSCOPE_FLASH_ORDER=heads-outer) and the plan's order (=plan) give the
// same bits; a split plan's partials too (the merge reads them by item, not by CTA).
TEST(Gpu, DecodeLaunchOrdersGiveTheSameBits) {
  REQUIRE_GPU();
  int decode_layout = 0, split = 0;
  for (uint64_t seed = 400; seed < 400 + static_cast<uint64_t>(cases(18)); ++seed) {
    CaseSpec c = flash_ok(random_case(seed), seed);
    for (RequestSpec& r : c.requests) {
      r.q_len = 1;
      r.prefix_len.reset();
    }
    c.attention.mask_mod.reset();
    c.attention.score_mod.reset();
    c.split = SplitSpec{};  // FlashInfer's rule: one query row per request picks the 16-row tile
    try {
      validate_case(c);
    } catch (const std::exception&) {
      continue;  // a mask this generator drew that single-token queries cannot have
    }
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result inner = run("cuda.flash", c, p, w);
    setenv("ATTNSCOPE_FLASH_ORDER", "heads-outer", 1);
    const Result outer = run("cuda.flash", c, p, w);
    setenv("ATTNSCOPE_FLASH_ORDER", "plan", 1);
    const Result plan_order = run("cuda.flash", c, p, w);
    unsetenv("ATTNSCOPE_FLASH_ORDER");
    ASSERT_TRUE(inner.ok() && outer.ok() && plan_order.ok())
        << c.name << ": " << inner.message << " / " << outer.message << " / " << plan_order.message;
    if (inner.message.find("x4 warps") != std::string::npos) ++decode_layout;
    split += p.split.split_kv;
    for (const Result* other : {&outer, &plan_order})
      EXPECT_TRUE(compare_results(c, inner, *other, {"heads inner", "other order", CompareRule::kBitwise, 0, 0, ""}, nullptr)
                      .verdict.pass)
          << c.name << " head_dim " << c.head_dim_qk;
  }
  EXPECT_GT(decode_layout, 0) << "no case ran the decode layout: the test checked nothing it names";
  RecordProperty("decode_layout_cases", decode_layout);
  RecordProperty("split_cases", split);
}

TEST(Gpu, StorageDoesNotChangeTheBits) {
  REQUIRE_GPU();
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(cases(16)); ++seed) {
    CaseSpec c = flash_ok(random_case(seed), seed);
    if (c.attention.local_chunk) continue;
    c.split = SplitSpec{};
    c.split.planner = Planner::kOff;
    CaseSpec ragged = c, messy = c;
    ragged.kv_cache = KvCacheSpec{};
    ragged.kv_cache.storage = KvStorage::kRagged;
    ragged.kv_cache.page_size = 1;
    ragged.kv_cache.null_page = false;
    messy.kv_cache = KvCacheSpec{};
    messy.kv_cache.page_size = 64;
    messy.kv_cache.layout = KvLayout::kHND;
    messy.kv_cache.allocation = PageAlloc::kFragmented;
    messy.kv_cache.poison_unused = true;
    const Plan pa = make_plan(ragged), pb = make_plan(messy);
    const Result a = run("cuda.flash", ragged, pa, Workload{}), b = run("cuda.flash", messy, pb, Workload{});
    ASSERT_TRUE(a.ok() && b.ok()) << a.message << b.message;
    EXPECT_TRUE(compare_results(c, a, b, {"a", "b", CompareRule::kBitwise, 0, 0, ""}, nullptr).verdict.pass) << c.name;
  }
}

TEST(Gpu, FullyMaskedRowsGiveZeroAndMinusInf) {
  REQUIRE_GPU();
  const CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/fully-masked-rows.json").spec;
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result cpu = run("cpu.reference", c, p, w);
  for (const char* id : {"cuda.flash", "cuda.naive", "cuda.reference"}) {
    const Result g = run(id, c, p, w);
    ASSERT_TRUE(g.ok()) << g.message;
    expect_finite(g);
    int64_t masked = 0;
    for (size_t i = 0; i < g.lse.size(); ++i) {
      ASSERT_EQ(std::isinf(g.lse[i]), std::isinf(cpu.lse[i])) << id << " row " << i;
      if (std::isinf(g.lse[i])) {
        ++masked;
        for (int d = 0; d < c.head_dim_vo; ++d) ASSERT_EQ(g.o[i * c.head_dim_vo + d], 0.0f);
      }
    }
    EXPECT_GT(masked, 0);
  }
}

TEST(Gpu, FixedPlannerIsBatchInvariant) {
  REQUIRE_GPU();
  const CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/batch-invariance-auto.json").spec;
  InvarianceOptions o;
  o.backend = "cuda.flash";
  o.planners = {Planner::kFixed, Planner::kFlashInfer};
  const auto rep = check_invariance(c, o);
  ASSERT_EQ(rep.planners.size(), 2u);
  EXPECT_TRUE(rep.planners[0].error.empty()) << rep.planners[0].error;
  EXPECT_EQ(rep.planners[0].identical_requests(), rep.num_requests);
  EXPECT_LT(rep.planners[1].identical_requests(), rep.num_requests) << "the auto planner changes chunk boundaries in this batch";
}

TEST(Gpu, UnsupportedConfigurationsAreRefusedWithAReason) {
  REQUIRE_GPU();
  CaseSpec c = random_case(2);
  c.dtype = DType::kFp32;
  auto b = make_backend("cuda.flash");
  EXPECT_NE(b->check(c).find("fp32"), std::string::npos);
  c.dtype = DType::kBf16;
  c.head_dim_qk = c.head_dim_vo = 24;
  EXPECT_NE(b->check(c).find("head_dim 24"), std::string::npos);
  // an over-large case is refused before allocating, with the numbers
  CaseSpec big = random_case(2);
  big.requests.assign(64, RequestSpec{1, 1 << 22});
  big.num_qo_heads = 64;
  big.num_kv_heads = 64;
  big.head_dim_qk = big.head_dim_vo = 256;
  big.attention = AttentionSpec{};
  big.dtype = DType::kBf16;
  big.kv_cache = KvCacheSpec{};
  big.kv_cache.page_size = 64;
  big.split = SplitSpec{};
  const Plan p = make_plan(big);
  const Result r = run("cuda.flash", big, p, Workload{});
  EXPECT_EQ(r.status, Status::kError);
  EXPECT_NE(r.message.find("MiB"), std::string::npos) << r.message;
}

TEST(Gpu, PaddedHeadDimReproducesTheWorkaround) {
  REQUIRE_GPU();
  const CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/encoder-headdim32.json").spec;
  ASSERT_EQ(c.head_dim_qk, 32);
  check_twice_lowp(c, "cuda.flash_padded");
  const Plan p = make_plan(c);
  const Result a = run("cuda.flash", c, p, Workload{}), b = run("cuda.flash_padded", c, p, Workload{});
  ASSERT_TRUE(a.ok() && b.ok()) << a.message << b.message;
  // zero padding adds exact zeros to every dot product: the scores are identical, so the two
  // kernels differ only where the 16-wide MMA sums group the terms differently
  const DiffReport d =
      compare_results(c, b, a, {"cuda.flash_padded", "cuda.flash", CompareRule::kAllclose, 1e-2, 1e-3, ""}, nullptr);
  EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
  EXPECT_GT(d.o.bit_identical, d.o.count / 2);
}
