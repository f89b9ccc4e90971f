// flashinfer.prefill_sm90 (FlashInfer's Hopper paged prefill and its PrefillSM90Plan, compiled from
// the pinned headers for sm_90a) against the fp64 GPU reference with FlashAttention's 2x rule
// (cpu.lowp as the same-precision baseline) plus a bound on the natural-log LSE: every example the
// backend runs, seeded random cases (requests and vLLM's virtual batches, NHD and HND, every page
// size, windows, soft-cap), poisoned pages, batch invariance (the SM90 path never splits KV), the
// timing protocol, and the refusals with their reasons.
// Skips with the reason when the backend is not compiled, or device 0 is not an sm_90 GPU.
//
// First run on a GPU: --gtest_filter='FlashInferSm90Smoke.*' (one small case).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "case_gen.h"
#include "case_json.h"
#include "fi_lse_bound.h"

using namespace attnscope;
using attnscope::testing::fi_lse_excess;
using attnscope::testing::GenLimits;
using attnscope::testing::random_case;
using attnscope::testing::set_head_dim;
namespace fs = std::filesystem;

namespace {

constexpr const char* kSm90 = "flashinfer.prefill_sm90";

CaseSpec sm90_probe() {
  CaseSpec c;
  c.name = "probe";
  c.requests = {RequestSpec{}};
  c.num_qo_heads = c.num_kv_heads = 1;
  c.head_dim_qk = c.head_dim_vo = 128;
  return c;
}

// The backend says "not compiled: <why>" when sm90.cmake did not build it (or the family is absent).
bool sm90_compiled(std::string* why) {
  const std::string r = make_backend(kSm90)->check(sm90_probe());
  if (r.rfind("not compiled", 0) == 0) {
    *why = r;
    return false;
  }
  return true;
}

#define REQUIRE_SM90()                               \
  do {                                               \
    std::string why_;                                \
    if (!sm90_compiled(&why_)) GTEST_SKIP() << why_; \
  } while (0)

// Compiled, and device 0 is compute capability 9.0 (sm_90a code runs nowhere else).
#define REQUIRE_SM90_GPU()                                                                                  \
  do {                                                                                                      \
    REQUIRE_SM90();                                                                                         \
    std::string why_;                                                                                       \
    const auto devs_ = query_devices(&why_);                                                                \
    if (devs_.empty()) GTEST_SKIP() << why_;                                                                \
    if (devs_[0].cc_major != 9 || devs_[0].cc_minor != 0)                                                   \
      GTEST_SKIP() << "device 0 (" << devs_[0].name << ") is sm_" << devs_[0].cc_major << devs_[0].cc_minor \
                   << ": flashinfer.prefill_sm90 runs on sm_90 only";                                       \
  } while (0)

// A test built around one case skips when this build does not instantiate it (a development build
// with ATTNSCOPE_FLASHINFER_SM90_HEAD_DIMS), and fails on any other refusal.
#define SKIP_IF_NOT_INSTANTIATED(c)                                           \
  do {                                                                        \
    const std::string w_ = make_backend(kSm90)->check(c);                     \
    if (w_.find("not instantiated") != std::string::npos) GTEST_SKIP() << w_; \
    ASSERT_EQ(w_, "") << (c).name;                                            \
  } while (0)

// Under compute-sanitizer (ATTNSCOPE_GPU_QUICK=1) the randomised loops run a sixth of their cases.
int cases(int full) { return std::getenv("ATTNSCOPE_GPU_QUICK") ? std::max(2, full / 6) : full; }

Result run(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w, int bench_reps = 0) {
  auto b = make_backend(id);
  RunOptions o;
  o.bench_reps = bench_reps;
  return run_backend(*b, c, p, w, o);
}

int64_t nan_count(const Result& r) {
  int64_t n = 0;
  for (float x : r.o) n += std::isnan(x);
  for (float x : r.lse) n += std::isnan(x);
  return n;
}

// The FlashAttention rule on O against cuda.reference (cpu.lowp as the same-precision baseline),
// the LSE bound of fi_lse_bound.h, and no NaN (the outputs are poisoned before the launch). False when the
// backend refused at run time (FlashInfer's planner), with the reason in *refused.
bool check_twice_lowp(const CaseSpec& c, std::string* refused = nullptr) {
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result a = run(kSm90, c, p, w);
  if (!a.ok() && refused && a.status == Status::kUnsupported) {
    EXPECT_FALSE(a.message.empty()) << c.name << ": a refusal without a reason";
    *refused = a.message;
    return false;
  }
  EXPECT_TRUE(a.ok()) << c.name << ": " << status_name(a.status) << ": " << a.message;
  if (!a.ok()) return false;
  const Result ref = run("cuda.reference", c, p, w), lowp = run("cpu.lowp", c, p, w);
  EXPECT_TRUE(ref.ok()) << ref.message;
  EXPECT_EQ(nan_count(a), 0) << c.name << ": wrote NaN (or left poisoned elements)";
  // 1e-5 floor: FlashAttention's rounding allowance
  const DiffReport d = compare_results(c, a, ref, {kSm90, "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  EXPECT_TRUE(d.verdict.pass) << c.name << " (" << a.message << "): " << d.verdict.detail;
  EXPECT_LE(fi_lse_excess(c, a, ref, false), 0.0) << c.name << ": LSE beyond its bound, max abs " << d.lse.max_abs;
  return true;
}

// A random case made runnable by the SM90 kernels: fp16 / bf16, equal head dims, no ALiBi, no mask that
// needs FlashInfer's custom mode (prefix-LM, documents, padding), a window or soft-cap only with
// the causal mask (this build's table). Everything else stays random: page size, NHD / HND,
// allocation, poison, local chunks, GQA, decode rows, the split settings (which do not apply).
CaseSpec sm90_ok(CaseSpec c, int dim) {
  set_head_dim(c, dim);
  if (c.dtype == DType::kFp32 || c.attention.window || c.attention.soft_cap) c.dtype = DType::kBf16;  // fp16: plain only
  c.attention.alibi = false;
  c.attention.prefix_lm = false;
  for (auto& r : c.requests) {
    r.prefix_len.reset();
    r.doc_starts.clear();
    r.pad_start.reset();
  }
  if (c.attention.window || c.attention.soft_cap) c.attention.causal = true;
  c.data.outlier_channels.clear();
  validate_case(c);
  return c;
}

CaseSpec example(const std::string& name) {
  return read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/" + name + ".json").spec;
}

}  // namespace

// ---- without a device ----------------------------------------------------------------------------

TEST(FlashInferSm90, NotCompiledSaysWhy) {
  std::string why;
  if (sm90_compiled(&why)) GTEST_SKIP() << "compiled in this build";
  EXPECT_GT(why.size(), std::string("not compiled: ").size()) << why;
  const CaseSpec c = sm90_probe();
  const Result r = run(kSm90, c, make_plan(c), Workload{});
  EXPECT_EQ(r.status, Status::kNotCompiled);
  EXPECT_EQ(r.message, why);
}

// check() decides these from the case alone (the device is asked last), with FlashInfer's reason.
TEST(FlashInferSm90Refusals, CarryReasons) {
  REQUIRE_SM90();
  auto b = make_backend(kSm90);
  const auto refuses = [&](const CaseSpec& c, const std::string& text) {
    const std::string why = b->check(c);
    EXPECT_NE(why.find(text), std::string::npos) << c.name << ": expected \"" << text << "\" in: " << why;
  };
  CaseSpec c = sm90_probe();
  c.dtype = DType::kFp32;
  refuses(c, "fp32");
  c = sm90_probe();
  c.head_dim_qk = c.head_dim_vo = 96;
  refuses(c, "head dims 64, 128 and 256");
  refuses(example("encoder-headdim32"), "head_dim 32");
  c = sm90_probe();
  c.head_dim_vo = 64;
  refuses(c, "HEAD_DIM_QK == HEAD_DIM_VO");
  c = sm90_probe();
  c.attention.alibi = true;
  refuses(c, "ALiBi");
  refuses(example("prefix-lm"), "custom mask");
  refuses(example("fully-masked-rows"), "custom mask");
  c = sm90_probe();
  c.requests[0] = RequestSpec{4, 64};
  c.requests[0].doc_starts = {0, 40};  // the queries' document starts at 40
  refuses(c, "MaskMode::kCustom");
  c = sm90_probe();
  c.dtype = DType::kFp16;
  c.attention.window = 64;  // fp16 has no window line
  refuses(c, "not instantiated");
  c = sm90_probe();
  c.attention.causal = false;
  c.attention.soft_cap = 30;  // this build has no non-causal soft-cap line
  refuses(c, "not instantiated");
  // a padding start past every key masks nothing: the native mode computes it, nothing to refuse
  c = sm90_probe();
  c.requests[0] = RequestSpec{4, 64};
  c.requests[0].pad_start = 64;
  EXPECT_EQ(b->check(c).find("custom mask"), std::string::npos) << b->check(c);
}

// ---- on the device -------------------------------------------------------------------------------

TEST(FlashInferSm90Smoke, OneSmallCase) {
  REQUIRE_SM90_GPU();
  CaseSpec c = sm90_probe();
  c.name = "smoke-sm90";
  c.requests = {RequestSpec{100, 300}, RequestSpec{17, 17}, RequestSpec{1, 900}};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.kv_cache.page_size = 16;
  validate_case(c);
  SKIP_IF_NOT_INSTANTIATED(c);
  EXPECT_TRUE(check_twice_lowp(c));
}

TEST(FlashInferSm90, EveryExampleItRunsPassesTheTwiceLowpRule) {
  REQUIRE_SM90_GPU();
  // the examples a full build runs; the others are refused (head_dim 32, custom masks)
  const std::set<std::string> runnable = {
      "batch-invariance-auto", "batch-invariance-fixed", "flash-attn-split-heuristic",      "gemma2-window-softcap",
      "gqa-decode-long",       "llama4-chunked-local",   "mixed-prefill-decode-fragmented", "poisoned-pages"};
  int ran = 0;
  for (const auto& e : fs::directory_iterator(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    const CaseSpec c = read_case_file(e.path().string()).spec;
    if (c.fp8_attention) {  // P in FP8: its bound is FlashInferFp8's (test_flashinfer_fp8.cpp), not the 2x rule
      std::cout << "[ fp8 attn ] " << e.path().filename() << ": checked by FlashInferFp8.* under P's FP8 rounding bound\n";
      continue;
    }
    const std::string why = refusal(kSm90, c);
    if (!why.empty()) {
      std::cout << "[ refused  ] " << e.path().filename() << ": " << why << "\n";
      EXPECT_TRUE(!runnable.count(c.name) || why.find("not instantiated") != std::string::npos) << c.name << ": " << why;
      continue;
    }
    ran += check_twice_lowp(c) ? 1 : 0;
  }
  EXPECT_GE(ran, 1);
}

TEST(FlashInferSm90, RandomCasesPassTheTwiceLowpRule) {
  REQUIRE_SM90_GPU();
  const int want = cases(48);
  const int dims[] = {128, 64, 256};
  int ran = 0, seed_end = want * 5;
  std::map<std::string, int> reasons, shapes;
  for (int seed = 0; ran < want && seed < seed_end; ++seed) {
    // every third case larger: several q tiles per request, several KV tiles, windows whose start
    // tile is past the first (get_swa_begin_kv_tile_idx > 0)
    const GenLimits lim = seed % 3 == 2 ? GenLimits{4, 400, 1600, false} : GenLimits{};
    std::string why;
    CaseSpec c;
    for (int k = 0; k < 3; ++k) {  // the first head dim this build runs the case at
      c = sm90_ok(random_case(static_cast<uint64_t>(seed) + 7000, lim), dims[(seed + k) % 3]);
      why = make_backend(kSm90)->check(c);
      if (why.empty()) break;
    }
    if (!why.empty()) {
      ++reasons[why.substr(0, 70)];
      continue;
    }
    SCOPED_TRACE(c.name + " head_dim " + std::to_string(c.head_dim_qk));
    std::string refusal;
    if (check_twice_lowp(c, &refusal)) {
      ++ran;
      ++shapes[std::to_string(c.head_dim_qk) + (c.attention.causal ? " causal" : " none") +
               (c.attention.window ? " window" : "") + (c.attention.soft_cap ? " softcap" : "") +
               (c.attention.local_chunk ? " local" : "") + (c.kv_cache.layout == KvLayout::kHND ? " HND" : " NHD")];
    } else if (!refusal.empty()) {
      ++reasons[refusal.substr(0, 70)];
    }
  }
  for (const auto& [r, n] : reasons) std::cout << "[ refused  ] " << n << " x " << r << "...\n";
  for (const auto& [s, n] : shapes) std::cout << "[ ran      ] " << n << " x " << s << "\n";
  EXPECT_GE(ran, want) << "only " << ran << " random cases ran";
}

// NaN in every unused page and slot must not reach the output: the same case with and without the
// poison gives the same bits (vLLM #42494 / #42496).
TEST(FlashInferSm90, PoisonedPagesLeaveTheOutputBitIdentical) {
  REQUIRE_SM90_GPU();
  std::vector<CaseSpec> runs = {example("poisoned-pages")};
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(cases(12)); ++seed) {
    const GenLimits lim = seed % 2 ? GenLimits{4, 200, 900, false} : GenLimits{};
    CaseSpec c = sm90_ok(random_case(seed + 500, lim), 128);
    if (c.kv_cache.storage == KvStorage::kRagged) continue;  // no unused slots to poison
    runs.push_back(c);
  }
  int compared = 0;
  for (const CaseSpec& c : runs) {
    if (!make_backend(kSm90)->check(c).empty()) continue;
    CaseSpec clean = c, dirty = c;
    clean.kv_cache.poison_unused = false;
    dirty.kv_cache.poison_unused = true;
    const Result a = run(kSm90, clean, make_plan(clean), Workload{}), b = run(kSm90, dirty, make_plan(dirty), Workload{});
    ASSERT_TRUE(a.ok() && b.ok()) << c.name << ": " << a.message << " / " << b.message;
    EXPECT_EQ(nan_count(b), 0) << c.name;
    EXPECT_TRUE(compare_results(c, b, a, {"dirty", "clean", CompareRule::kBitwise, 0, 0, ""}, nullptr).verdict.pass) << c.name;
    ++compared;
  }
  EXPECT_GE(compared, std::max(2, cases(12) / 3));  // the loop is not vacuous: 4 cases, 2 under the sanitizer's quick mode
}

// PrefillSM90Plan never splits KV and tiles each request's queries from its own first row, so a
// request's output does not depend on the batch around it: bit-identical alone and batched.
TEST(FlashInferSm90, RequestsAreBitIdenticalAloneAndBatched) {
  REQUIRE_SM90_GPU();
  CaseSpec c = example("batch-invariance-auto");
  c.head_dim_qk = c.head_dim_vo = 128;
  c.name = "batch-invariance-auto-d128";
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) c.requests[r].seed = c.request_seed(r);
  validate_case(c);
  SKIP_IF_NOT_INSTANTIATED(c);
  const Result batch = run(kSm90, c, make_plan(c), Workload{});
  ASSERT_TRUE(batch.ok()) << batch.message;
  const int Hq = c.num_qo_heads, Dv = c.head_dim_vo;
  int64_t tok = 0;
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    const CaseSpec one = sub_case(c, {r});
    const Result alone = run(kSm90, one, make_plan(one), Workload{});
    ASSERT_TRUE(alone.ok()) << alone.message;
    int diff = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(alone.o.size()); ++i)
      diff += f32_bits(alone.o[i]) != f32_bits(batch.o[tok * Hq * Dv + i]);
    for (int64_t i = 0; i < static_cast<int64_t>(alone.lse.size()); ++i)
      diff += f32_bits(alone.lse[i]) != f32_bits(batch.lse[tok * Hq + i]);
    EXPECT_EQ(diff, 0) << "request " << r << " differs alone and batched";
    tok += c.requests[r].q_len;
  }
}

TEST(FlashInferSm90, TimesWithCudaEventsAndReportsThePlan) {
  REQUIRE_SM90_GPU();
  const CaseSpec c = example("mixed-prefill-decode-fragmented");  // HND, fragmented pages
  SKIP_IF_NOT_INSTANTIATED(c);
  const Result r = run(kSm90, c, make_plan(c), Workload{}, 5);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.timing.reps, 5);
  EXPECT_GT(r.timing.device_ms, 0);
  EXPECT_LE(r.timing.device_ms_min, r.timing.device_ms);
  EXPECT_GE(r.timing.device_ms_max, r.timing.device_ms);
  EXPECT_NE(r.message.find("PrefillSM90Plan: cta_tile_q 128"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("us on the host"), std::string::npos) << r.message;
}
