// cuda.flash's Hopper kernel (wgmma, flash_sm90_kernel.cuh) against cpu.tiled, cuda.reference (the 2x
// rule) and the mma.sync kernel on the same plans: head dims 64, 128, 256, 64- and 128-row tiles,
// causal / windows / local chunks / soft-cap / ALiBi / split-KV partials from the random cases, and
// mask_mods from the zoo. Skips with the reason on a device that is not sm_90 or a build without the
// kernel (CMAKE_CUDA_ARCHITECTURES without 90).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "case_gen.h"
#include "case_json.h"
#include "require.h"

using namespace attnscope;
using attnscope::testing::random_case;
using attnscope::testing::set_head_dim;
namespace fs = std::filesystem;

namespace {

Result run(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w) {
  auto b = make_backend(id);
  return run_backend(*b, c, p, w, RunOptions{});
}

// Runs cuda.flash with the environment variable `var` set to `value` (nullptr: unset), then unsets it.
Result run_with(const char* var, const char* value, const CaseSpec& c, const Plan& p, const Workload& w) {
  if (value)
    setenv(var, value, 1);
  else
    unsetenv(var);
  Result r = run("cuda.flash", c, p, w);
  unsetenv(var);
  return r;
}

// ATTNSCOPE_FLASH_PATH: mma runs the mma.sync kernel; unset, the default.
Result run_path(const char* path, const CaseSpec& c, const Plan& p, const Workload& w) {
  return run_with("ATTNSCOPE_FLASH_PATH", path, c, p, w);
}

// Skips unless the Hopper kernel runs here: a device, sm_90, and the kernel in this build (seen in
// the kernel name cuda.flash reports for a case it fits).
std::string hopper_missing() {
  if (!cuda_compiled()) return "this build has no CUDA backends";
  std::string why;
  const auto devs = query_devices(&why);
  if (devs.empty()) return why;
  if (devs[0].cc_major != 9 || devs[0].cc_minor != 0)
    return "device 0 is compute capability " + std::to_string(devs[0].cc_major) + "." + std::to_string(devs[0].cc_minor) +
           ": the Hopper kernel is sm_90a code";
  CaseSpec c = random_case(1);
  set_head_dim(c, 128);
  if (c.dtype == DType::kFp32) c.dtype = DType::kBf16;
  c.split.fixed_tile_q = 128;
  validate_case(c);
  const Plan p = make_plan(c);
  const Result r = run_path(nullptr, c, p, make_workload(c, p.pages));
  if (r.ok() && r.message.find("(wgmma)") == std::string::npos)
    return "this build has no Hopper kernel (CMAKE_CUDA_ARCHITECTURES without 90): cuda.flash reports " + r.message;
  return "";
}

// cuda.flash against cpu.tiled, element by element: the same plan, tiles and merge order, but exp2's
// last bits can flip the dtype rounding of a P; P <= 1 and the row sum is >= 1, so one flip moves O by
// at most one ulp of P at 1 (2^-8 in bf16, 2^-11 in fp16) times |V|, however small O is after
// cancellation (random-811: std 1.75, O ~ 0.09 moved by 0.004 while |V| reaches ~6; cuda.reference lay
// between the two). Two such flips beside two ulps of O (rtol 1.6e-2, atol 2e-3).
double twin_atol(const CaseSpec& c, const Workload& w) {
  float vmax = 0.f;
  for (float v : w.v_pool)
    if (std::isfinite(v)) vmax = std::max(vmax, std::fabs(v));
  return 2e-3 + 2.0 * std::ldexp(1.0, c.dtype == DType::kFp16 ? -11 : -8) * vmax;
}

// The three checks of one case: the Hopper kernel ran (its name), it agrees with cpu.tiled as the
// mma.sync kernel must (twin_atol), it passes FlashAttention's 2x rule against cuda.reference, and its
// bits equal the mma.sync kernel's: the same products in the same order (wgmma and mma.sync
// accumulate a 16-deep k-step in fp32 alike on the H100: measured, 46 of 46 cases identical when this
// was first run, so it is held).
void check_case(const CaseSpec& c) {
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result h = run_path(nullptr, c, p, w), m = run_path("mma", c, p, w);
  EXPECT_TRUE(h.ok() && m.ok()) << c.name << ": " << h.message << " / " << m.message;
  if (!h.ok() || !m.ok()) return;
  EXPECT_NE(h.message.find("(wgmma)"), std::string::npos) << c.name << ": " << h.message;
  EXPECT_NE(m.message.find("(mma.sync)"), std::string::npos) << c.name << ": " << m.message;
  const Result t = run("cpu.tiled", c, p, w), ref = run("cuda.reference", c, p, w), lowp = run("cpu.lowp", c, p, w);
  const DiffReport dt =
      compare_results(c, h, t, {"cuda.flash", "cpu.tiled", CompareRule::kAllclose, 1.6e-2, twin_atol(c, w), ""}, nullptr);
  EXPECT_TRUE(dt.verdict.pass) << c.name << ": " << dt.verdict.detail;
  EXPECT_LT(dt.lse.max_abs, 1e-3) << c.name;
  // 1e-5 floor: FlashAttention's rounding allowance, as in RandomCasesPassTheTwiceLowpRule
  const DiffReport dr =
      compare_results(c, h, ref, {"cuda.flash", "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  EXPECT_TRUE(dr.verdict.pass) << c.name << ": " << dr.verdict.detail;
  const DiffReport db = compare_results(c, h, m, {"wgmma", "mma.sync", CompareRule::kBitwise, 0, 0, ""}, nullptr);
  EXPECT_TRUE(db.verdict.pass) << c.name << ": " << db.verdict.detail;
}

// Under compute-sanitizer (ATTNSCOPE_GPU_QUICK=1) the loop runs a sixth of its cases.
int cases(int full) { return std::getenv("ATTNSCOPE_GPU_QUICK") ? std::max(2, full / 6) : full; }

// A kernel form chosen by an environment knob against the default: `c` run with `var` = `form` (its
// message names `marker` when the form ran; counted in *took) and with `var` = `base` (nullptr: unset;
// its message must not name the marker) gives the same bits.
void expect_form_gives_base_bits(const char* var, const char* form, const char* base, const char* marker, const char* form_name,
                                 const char* base_name, const CaseSpec& c, int* took) {
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result a = run_with(var, form, c, p, w), b = run_with(var, base, c, p, w);
  ASSERT_TRUE(a.ok() && b.ok()) << a.message << " / " << b.message;
  EXPECT_EQ(b.message.find(marker), std::string::npos) << b.message;
  if (a.message.find(marker) != std::string::npos) ++*took;
  const DiffReport d = compare_results(c, a, b, {form_name, base_name, CompareRule::kBitwise, 0, 0, ""}, nullptr);
  EXPECT_TRUE(d.verdict.pass) << a.message << ": " << d.verdict.detail;
}

}  // namespace

TEST(FlashSm90, RandomCasesMatchTheMmaSyncKernelBitForBit) {
  REQUIRE_WHY_EMPTY(hopper_missing());
  int ran = 0;
  const int dims[] = {64, 128, 256};
  for (uint64_t seed = 500; seed < 500 + static_cast<uint64_t>(cases(36)); ++seed) {
    CaseSpec c = random_case(seed);
    const int d = dims[seed % 3];
    set_head_dim(c, d);
    if (c.dtype == DType::kFp32) c.dtype = DType::kBf16;
    c.data.outlier_channels.clear();
    c.split.fixed_tile_q = d >= 256 || seed % 2 ? 64 : 128;
    validate_case(c);
    SCOPED_TRACE(c.name + " head_dim " + std::to_string(d) + " tile " + std::to_string(*c.split.fixed_tile_q));
    check_case(c);
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

TEST(FlashSm90, ZooCasesMatchTheMmaSyncKernelBitForBit) {
  REQUIRE_WHY_EMPTY(hopper_missing());
  int ran = 0;
  for (const auto& e : fs::directory_iterator(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/zoo")) {
    if (e.path().extension() != ".json") continue;
    CaseSpec c = read_case_file(e.path().string()).spec;
    if (c.head_dim_qk != 64 && c.head_dim_qk != 128) set_head_dim(c, 128);
    if (c.dtype == DType::kFp32) c.dtype = DType::kBf16;
    c.split.fixed_tile_q = 128;
    validate_case(c);
    SCOPED_TRACE(e.path().filename().string());
    check_case(c);
    ++ran;
  }
  EXPECT_GE(ran, 5);
}

// What the Hopper kernel does not take runs on the mma.sync kernel, and says so: 16-row tiles (decode's
// key-split warps), head dims that are not whole 64-column panels (32, 96), and an interpreted
// score_mod; each within cpu.tiled's tolerance as in FlashAgreesWithTheCpuTwin.
TEST(FlashSm90, WhatItDoesNotTakeRunsOnTheMmaSyncKernel) {
  REQUIRE_WHY_EMPTY(hopper_missing());
  for (int variant = 0; variant < 4; ++variant) {
    // variant 3: the zoo's soft-cap case with a score_mod of no lowered form (as in
    // GpuMaskZoo.AScoreModNoLibraryTakesRunsInterpretedOnCudaFlash)
    CaseSpec c = variant == 3 ? read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/zoo/softcap.json").spec
                              : random_case(700 + static_cast<uint64_t>(variant));
    if (variant == 3) c.attention.score_mod = "where(kv_idx == 0, score + 2, score * 0.75)";
    set_head_dim(c, variant == 1 ? 96 : variant == 2 ? 32 : 128);
    if (c.dtype == DType::kFp32) c.dtype = DType::kBf16;
    c.data.outlier_channels.clear();
    c.split.fixed_tile_q = variant == 0 ? 16 : 128;
    validate_case(c);
    SCOPED_TRACE(c.name + " variant " + std::to_string(variant));
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result r = run_path(nullptr, c, p, w), t = run("cpu.tiled", c, p, w);
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_NE(r.message.find("(mma.sync)"), std::string::npos) << r.message;
    const DiffReport d = compare_results(c, r, t, {"cuda.flash", "cpu.tiled", CompareRule::kAllclose, 1.6e-2, 2e-3, ""}, nullptr);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
  }
}

// Head dim 256 at 64-row tiles runs two of the plan's items per CTA where neighbours share their keys
// (flash.cu, pair_items): each warpgroup computes only its own item's tiles, so the paired launch gives
// the bits of one item per CTA (ATTNSCOPE_FLASH_PAIR=0) and of the mma.sync kernel, and agrees with
// cpu.tiled and the 2x rule (check_case), over random cases: causal or not, windows, local chunks,
// soft-cap, ALiBi, split-KV chunks, GQA, paged and ragged.
TEST(FlashSm90, PairedItemsGiveTheBitsOfOneItemPerCta) {
  REQUIRE_WHY_EMPTY(hopper_missing());
  const char* kPaired = "two 64-row items per CTA";
  int paired = 0, ran = 0;
  for (uint64_t seed = 800; seed < 800 + static_cast<uint64_t>(cases(18)); ++seed) {
    CaseSpec c = random_case(seed);
    set_head_dim(c, 256);
    if (c.dtype == DType::kFp32) c.dtype = DType::kBf16;
    c.data.outlier_channels.clear();
    c.split.fixed_tile_q = 64;
    validate_case(c);
    SCOPED_TRACE(c.name);
    check_case(c);
    ASSERT_NO_FATAL_FAILURE(
        expect_form_gives_base_bits("ATTNSCOPE_FLASH_PAIR", nullptr, "0", kPaired, "paired", "one item per CTA", c, &paired));
    ++ran;
  }
  EXPECT_GT(ran, 0);
  EXPECT_GE(paired, std::max(1, ran / 3)) << "too few random cases ran paired to test it";
}
