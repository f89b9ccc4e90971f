// The mask zoo on the GPU (issue 12): every examples/zoo case on cuda.flash (mask bits, tile lists;
// the zoo's score mods as its soft-cap / ALiBi parameters), cuda.naive and
// flashinfer.prefill (custom-mask mode) within FlashAttention's 2x rule against cuda.reference,
// which interprets the expressions on the device; cuda.reference against cpu.reference; cuda.flash
// against its CPU twin; and cuda.flash with a mask_mod against the built-in twin, bit for bit where
// the plans are equal. Skips with the reason without CUDA or a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "case_json.h"
#include "gpu_test_util.h"

using namespace attnscope;
using attnscope::testing::gpu_cases;
using attnscope::testing::run_id;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> zoo() {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/zoo"))
    if (e.path().extension() == ".json") v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

int64_t nan_count(const Result& r) {
  int64_t n = 0;
  for (float x : r.o) n += std::isnan(x);
  for (float x : r.lse) n += std::isnan(x);
  return n;
}

}  // namespace

TEST(GpuMaskZoo, EveryExampleRunsWithinTheTwiceRuleOnEveryBackendThatRunsIt) {
  REQUIRE_GPU();
  const auto* fi = family_of("flashinfer.prefill");
  const bool fi_compiled = fi && fi->compiled;
  if (!fi_compiled) std::cout << "[ note     ] flashinfer family not compiled: flashinfer.prefill not checked\n";
  int ran = 0;
  for (const auto& path : zoo()) {
    SCOPED_TRACE(path.filename().string());
    const CaseSpec c = read_case_file(path.string()).spec;
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result ref = run_id("cuda.reference", c, p, w), lowp = run_id("cpu.lowp", c, p, w),
                 cref = run_id("cpu.reference", c, p, w);
    ASSERT_TRUE(ref.ok()) << ref.message;
    // the device interpreter and bits against the host's: both fp64 on the same inputs
    const DiffReport dr =
        compare_results(c, ref, cref, {"cuda.reference", "cpu.reference", CompareRule::kAllclose, 1e-6, 1e-6, ""}, nullptr);
    EXPECT_TRUE(dr.verdict.pass) << dr.verdict.detail;
    std::vector<std::string> ids = {"cuda.flash", "cuda.naive"};
    if (fi_compiled) ids.push_back("flashinfer.prefill");
    for (const auto& id : ids) {
      const Result a = run_id(id, c, p, w);
      // a lean build's FlashInfer table (ATTNSCOPE_FLASHINFER_HEAD_DIMS) lacks this head dim: said, not counted
      if (!a.ok() && a.message.find("is not instantiated in this build") != std::string::npos) {
        std::cout << "[ note     ] " << path.stem().string() << " " << id << " not checked: " << a.message << "\n";
        continue;
      }
      // every zoo expression is one these backends run (mask bits, or a lowered score_mod)
      ASSERT_TRUE(a.ok()) << id << ": " << a.message;
      EXPECT_EQ(nan_count(a), 0) << id << " wrote NaN (or left poisoned elements)";
      // 1e-5: FlashAttention's rounding floor, as every GPU test here
      const DiffReport d =
          compare_results(c, a, ref, {id, "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
      EXPECT_TRUE(d.verdict.pass) << id << ": " << d.verdict.detail;
      std::cout << "[ zoo      ] " << path.stem().string() << " " << id << ": " << d.verdict.detail << "\n";
      ++ran;
    }
    // the kernel follows the plan its CPU twin follows: two bf16 ulps, as Gpu.FlashAgreesWithTheCpuTwin
    const Result g = run_id("cuda.flash", c, p, w), h = run_id("cpu.tiled", c, p, w);
    const DiffReport dt =
        compare_results(c, g, h, {"cuda.flash", "cpu.tiled", CompareRule::kAllclose, 1.6e-2, 2e-3, ""}, nullptr);
    EXPECT_TRUE(dt.verdict.pass) << dt.verdict.detail;
  }
  EXPECT_GE(ran, 20);
}

// A mask_mod meaning a built-in mask: cuda.flash computes the same bits where the plan is the same
// (the mask_mod path keeps the plain logit, and skipped tiles are tiles of -inf that would not
// change the state).
TEST(GpuMaskZoo, FlashWithAMaskModMatchesTheBuiltInTwinBitForBit) {
  REQUIRE_GPU();
  const std::pair<const char*, std::function<void(CaseSpec&)>> twins[] = {
      {"causal", [](CaseSpec& c) { c.attention.causal = true; }},
      {"prefix-lm",
       [](CaseSpec& c) {
         c.attention.causal = true;
         c.attention.prefix_lm = true;
       }},
      {"documents", [](CaseSpec& c) { c.attention.causal = true; }},
  };
  for (const auto& [name, builtin] : twins) {
    SCOPED_TRACE(name);
    const CaseSpec e = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/zoo/" + name + ".json").spec;
    CaseSpec t = e;
    t.attention.mask_mod.reset();
    builtin(t);
    const Plan pe = make_plan(e), pt = make_plan(t);
    const Workload we = make_workload(e, pe.pages), wt = make_workload(t, pt.pages);
    const Result a = run_id("cuda.flash", e, pe, we), b = run_id("cuda.flash", t, pt, wt);
    ASSERT_TRUE(a.ok() && b.ok()) << a.message << b.message;
    int64_t diff = 0;
    for (size_t i = 0; i < a.o.size(); ++i) diff += f32_bits(a.o[i]) != f32_bits(b.o[i]);
    for (size_t i = 0; i < a.lse.size(); ++i) diff += f32_bits(a.lse[i]) != f32_bits(b.lse[i]);
    EXPECT_EQ(diff, 0);
  }
}

// A score_mod of no form a library takes as parameters (an attention-sink bonus): cuda.flash runs it
// in its interpreted kernel variant (FlashMode::kScoreMod) within the 2x rule and beside its CPU twin; a
// FlashInfer backend refuses it, naming the forms it takes.
TEST(GpuMaskZoo, AScoreModNoLibraryTakesRunsInterpretedOnCudaFlash) {
  REQUIRE_GPU();
  CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/zoo/softcap.json").spec;
  c.attention.score_mod = "where(kv_idx == 0, score + 2, score * 0.75)";
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result ref = run_id("cuda.reference", c, p, w), lowp = run_id("cpu.lowp", c, p, w),
               cref = run_id("cpu.reference", c, p, w);
  ASSERT_TRUE(ref.ok()) << ref.message;
  const DiffReport dr =
      compare_results(c, ref, cref, {"cuda.reference", "cpu.reference", CompareRule::kAllclose, 1e-6, 1e-6, ""}, nullptr);
  EXPECT_TRUE(dr.verdict.pass) << dr.verdict.detail;
  const Result f = run_id("cuda.flash", c, p, w);
  ASSERT_TRUE(f.ok()) << f.message;
  EXPECT_EQ(nan_count(f), 0);
  // 1e-5: FlashAttention's rounding floor, as every GPU test here
  const DiffReport d =
      compare_results(c, f, ref, {"cuda.flash", "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
  // the same plan as cpu.tiled, the score_mod in doubles in both: two bf16 ulps, as Gpu.FlashAgreesWithTheCpuTwin
  const Result h = run_id("cpu.tiled", c, p, w);
  const DiffReport dt = compare_results(c, f, h, {"cuda.flash", "cpu.tiled", CompareRule::kAllclose, 1.6e-2, 2e-3, ""}, nullptr);
  EXPECT_TRUE(dt.verdict.pass) << dt.verdict.detail;
  std::cout << "[ zoo      ] attention-sink score_mod cuda.flash: " << d.verdict.detail << "\n";
  const auto* fi = family_of("flashinfer.prefill");
  if (fi && fi->compiled) {
    const Result r = run_id("flashinfer.prefill", c, p, w);
    EXPECT_EQ(r.status, Status::kUnsupported);
    EXPECT_NE(r.message.find("only of the forms"), std::string::npos) << r.message;
  }
}
