// flashinfer.prefill and flashinfer.decode (FlashInfer's own FA2 kernels and planners, compiled from
// the pinned headers) against the fp64 GPU reference with FlashAttention's 2x rule (cpu.lowp as the
// same-precision baseline) plus a bound on the natural-log LSE: every example each backend runs and
// seeded random cases; fully masked rows; poisoned pages; refusals and their reasons; batch
// invariance with a fixed split size (FlashInfer PR #1675). The translation itself
// (fi_conventions.h: custom-mask bits, mask mode, virtual-batch page tables, ALiBi's origin) is
// checked without a device.
// Skips with the reason when the flashinfer family is not compiled, or there is no device that this
// build's FlashInfer kernels run on.
//
// First run on a GPU: --gtest_filter='FlashInferSmoke.*' (one small prefill and one decode case).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "case_gen.h"
#include "case_json.h"
#include "fi_conventions.h"
#include "fi_lse_bound.h"
#include "require.h"

using namespace attnscope;
using attnscope::testing::fi_lse_excess;
using attnscope::testing::random_case;
using attnscope::testing::set_head_dim;
namespace fs = std::filesystem;
namespace fic = attnscope::peers::flashinfer;

namespace {

constexpr const char* kPrefill = "flashinfer.prefill";
constexpr const char* kDecode = "flashinfer.decode";

// A small supported case, to ask the backend whether it can run here at all (device, architecture).
CaseSpec probe_case() {
  CaseSpec c;
  c.name = "probe";
  c.requests = {RequestSpec{}};
  c.num_qo_heads = c.num_kv_heads = 1;
  c.head_dim_qk = c.head_dim_vo = 128;
  return c;
}

// The family is compiled and device 0 runs its kernels (else skip with check()'s reason).
#define REQUIRE_FI_GPU()                                                                                \
  do {                                                                                                  \
    REQUIRE_COMPILED_GPU(kPrefill);                                                                     \
    const std::string r_ = make_backend(kPrefill)->check(probe_case());                                 \
    if (r_.find("no CUDA device") == 0 || r_.find("ATTNSCOPE_FLASHINFER_ARCHS") != std::string::npos || \
        r_.find("sm_80 or newer") != std::string::npos)                                                 \
      GTEST_SKIP() << r_;                                                                               \
  } while (0)

// A test built around one case skips when this build does not instantiate it (a development build
// with ATTNSCOPE_FLASHINFER_HEAD_DIMS), and fails on any other refusal.
#define SKIP_IF_NOT_INSTANTIATED(id, c)                                       \
  do {                                                                        \
    const std::string w_ = make_backend(id)->check(c);                        \
    if (w_.find("not instantiated") != std::string::npos) GTEST_SKIP() << w_; \
    ASSERT_EQ(w_, "") << (c).name;                                            \
  } while (0)

// Under compute-sanitizer (ATTNSCOPE_GPU_QUICK=1) the randomised loops run a sixth of their cases.
int cases(int full) { return std::getenv("ATTNSCOPE_GPU_QUICK") ? std::max(2, full / 6) : full; }

Result run(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w) {
  auto b = make_backend(id);
  return run_backend(*b, c, p, w, RunOptions{});
}

int64_t nan_count(const Result& r) {
  int64_t n = 0;
  for (float x : r.o) n += std::isnan(x);
  for (float x : r.lse) n += std::isnan(x);
  return n;
}

// The FlashAttention rule on O against cuda.reference (cpu.lowp as the same-precision baseline),
// the LSE bound of fi_lse_bound.h, and no NaN. Returns false (and says why) when the backend refused.
// *message: the run's message (FlashInfer's plan: "split_kv yes", the variant).
bool check_twice_lowp(const CaseSpec& c, const std::string& id, std::string* refused = nullptr, std::string* message = nullptr) {
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result a = run(id, c, p, w);
  if (!a.ok() && refused && a.status == Status::kUnsupported) {
    EXPECT_FALSE(a.message.empty()) << c.name << ": a refusal without a reason";
    *refused = a.message;
    return false;
  }
  EXPECT_TRUE(a.ok()) << c.name << ": " << status_name(a.status) << ": " << a.message;
  if (!a.ok()) return false;
  if (message) *message = a.message;
  const Result ref = run("cuda.reference", c, p, w), lowp = run("cpu.lowp", c, p, w);
  EXPECT_TRUE(ref.ok()) << ref.message;
  EXPECT_EQ(nan_count(a), 0) << c.name << ": " << id << " wrote NaN (or left poisoned elements)";
  // 1e-5 floor: FlashAttention's rounding allowance
  const DiffReport d = compare_results(c, a, ref, {id, "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  EXPECT_TRUE(d.verdict.pass) << c.name << " (" << id << ", " << a.message << "): " << d.verdict.detail;
  EXPECT_LE(fi_lse_excess(c, a, ref, id == std::string(kPrefill)), 0.0)
      << c.name << " (" << id << "): LSE beyond its bound, max abs " << d.lse.max_abs;
  return true;
}

// A random case made runnable by FlashInfer's FA2 prefill: head dims 64 / 128 / 256 (equal), fp16 or
// bf16, soft-cap and ALiBi not together (no FlashInfer variant computes both as attnscope does).
CaseSpec fi_ok(CaseSpec c, uint64_t seed, int dim) {
  set_head_dim(c, dim);
  if (c.dtype == DType::kFp32) c.dtype = seed % 2 ? DType::kBf16 : DType::kFp16;
  if (c.attention.soft_cap && c.attention.alibi) {
    if (seed % 2)
      c.attention.alibi = false;
    else
      c.attention.soft_cap.reset();
  }
  c.data.outlier_channels.clear();
  validate_case(c);
  return c;
}

// ... and by the CUDA-core decode: one query per request, no custom mask, FlashInfer's own planner.
CaseSpec decode_ok(CaseSpec c, uint64_t seed, int dim) {
  for (auto& r : c.requests) {
    r.q_len = 1;
    r.doc_starts.clear();
    r.pad_start.reset();
  }
  if (c.split.planner == Planner::kFixed) {
    c.split.planner = Planner::kFlashInfer;
    c.split.fixed_split_size.reset();
  }
  return fi_ok(c, seed, dim);
}

// Runs `make(seed, dim)` cases through `id` until `want` ran (trying the other head dims when this
// build lacks one); every refusal must carry a reason.
void random_cases(const std::string& id, int want, const std::function<CaseSpec(uint64_t, int)>& make) {
  const int dims[] = {64, 128, 256};
  int ran = 0, refused = 0;
  std::map<std::string, int> reasons;
  for (uint64_t seed = 0; ran < want && seed < static_cast<uint64_t>(want) * 5; ++seed) {
    std::string why;
    CaseSpec c;
    for (int k = 0; k < 3; ++k) {
      c = make(seed, dims[(seed + k) % 3]);
      why = make_backend(id)->check(c);
      if (why.find("not instantiated") == std::string::npos) break;
    }
    if (!why.empty()) {
      ++refused;
      ++reasons[why.substr(0, 60)];
      continue;
    }
    SCOPED_TRACE(c.name + " head_dim " + std::to_string(c.head_dim_qk));
    std::string plan_refusal;
    if (check_twice_lowp(c, id, &plan_refusal))
      ++ran;
    else if (!plan_refusal.empty())
      ++reasons[plan_refusal.substr(0, 60)];
  }
  for (const auto& [r, n] : reasons) std::cout << "[ refused  ] " << n << " x " << r << "...\n";
  EXPECT_GE(ran, want) << id << ": only " << ran << " random cases ran (" << refused << " refused in check())";
}

CaseSpec example(const std::string& name) {
  return read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/" + name + ".json").spec;
}

// FlashInfer's query tile as the backend reports it ("cta_tile_q N" in the message).
int reported_tile(const Result& r) {
  std::smatch m;
  return std::regex_search(r.message, m, std::regex("cta_tile_q (\\d+)")) ? std::stoi(m[1]) : -1;
}

}  // namespace

// ---- the translation, without a device ----------------------------------------------------------

TEST(FlashInferConventions, WindowLseAndSplitArguments) {
  CaseSpec c = probe_case();
  EXPECT_EQ(fic::window_left(c), -1);
  c.attention.window = 512;
  EXPECT_EQ(fic::window_left(c), 511);  // W counts the query, window_left does not
  EXPECT_EQ(fic::lse2_to_natural(-INFINITY), -INFINITY);
  EXPECT_FLOAT_EQ(fic::lse2_to_natural(1.0f), std::log(2.0f));
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 32;
  EXPECT_EQ(fic::split_args(c).fixed_split_size, 32);
  c.split.planner = Planner::kOff;
  EXPECT_TRUE(fic::split_args(c).disable_split_kv);
}

TEST(FlashInferConventions, MaskModeIsNativeExactlyWhenFlashInferComputesTheSameMask) {
  struct Want {
    const char* name;
    fic::FiMask mode;
  };
  for (const Want& w : {Want{"poisoned-pages", fic::FiMask::kCausal}, Want{"gemma2-window-softcap", fic::FiMask::kCausal},
                        Want{"llama4-chunked-local", fic::FiMask::kCausal}, Want{"encoder-headdim32", fic::FiMask::kNone},
                        Want{"prefix-lm", fic::FiMask::kCustom}, Want{"fully-masked-rows", fic::FiMask::kCustom}}) {
    const CaseSpec c = example(w.name);
    EXPECT_EQ(fic::choose_mask(c, make_plan(c)), w.mode) << w.name;
  }
}

TEST(FlashInferConventions, CustomMaskBitsAreAttnscopesMaskLittleEndianPerUnit) {
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const CaseSpec c = random_case(seed);
    const Plan p = make_plan(c);
    std::vector<int> indptr;
    const std::vector<uint8_t> bits = fic::pack_custom_mask(c, p, &indptr);
    ASSERT_EQ(indptr.size(), p.units.size() + 1);
    ASSERT_EQ(static_cast<size_t>(indptr.back()), bits.size());
    for (size_t i = 0; i < p.units.size(); ++i) {
      const WorkUnit& u = p.units[i];
      const RequestSpec& r = c.requests[u.request];
      ASSERT_EQ(indptr[i + 1] - indptr[i], (static_cast<int64_t>(u.q_len) * u.kv_len + 7) / 8);
      for (int q = 0; q < u.q_len; ++q)
        for (int k = 0; k < u.kv_len; ++k) {
          const int64_t b = static_cast<int64_t>(q) * u.kv_len + k;  // FlashInfer: q * kv_len + k, bit b % 8 of byte b / 8
          const bool bit = (bits[indptr[i] + b / 8] >> (b % 8)) & 1;
          ASSERT_EQ(bit, allowed(p.masks[u.request], (r.kv_len - r.q_len) + u.q_begin + q, u.kv_begin + k))
              << c.name << " unit " << i << " q " << q << " k " << k;
        }
    }
  }
}

TEST(FlashInferConventions, VirtualBatchesGetVllmsSlicedPageTables) {
  const CaseSpec c = example("llama4-chunked-local");
  const Plan p = make_plan(c);
  const fic::FiUnits u = fic::fi_units(c, p);
  ASSERT_EQ(p.local.batches.size(), p.units.size());
  ASSERT_GT(p.units.size(), c.requests.size());
  for (size_t i = 0; i < p.units.size(); ++i) {
    const WorkUnit& w = p.units[i];
    const int pages = (w.kv_len + u.page_size - 1) / u.page_size;
    ASSERT_EQ(u.kv_indptr[i + 1] - u.kv_indptr[i], pages);
    EXPECT_EQ(u.kv_last_page_len[i], w.kv_len - (pages - 1) * u.page_size);
    EXPECT_EQ(u.qo_indptr[i + 1] - u.qo_indptr[i], w.q_len);
    for (int j = 0; j < pages; ++j) {
      // the same physical page as the request's own table at that key
      EXPECT_EQ(u.kv_indices[u.kv_indptr[i] + j], p.pages.page_of(w.request, w.kv_begin + j * u.page_size));
      EXPECT_EQ(u.kv_indices[u.kv_indptr[i] + j], p.local.batches[i].block_table[j]);
    }
  }
}

TEST(FlashInferConventions, AlibiOriginShiftIsTheScoreDifference) {
  // attnscope: slope * (k_abs - q_abs); FlashInfer: slope * (kv_idx - qo_idx) relative to the unit.
  const CaseSpec c = example("llama4-chunked-local");
  const Plan p = make_plan(c);
  const fic::FiUnits u = fic::fi_units(c, p);
  const double slope = 0.25;
  for (size_t i = 0; i < p.units.size(); ++i)
    for (int q = 0; q < p.units[i].q_len; q += 7)
      for (int k = 0; k < p.units[i].kv_len; k += 13) {
        const double ours = slope * ((u.kv_begin[i] + k) - (u.q_abs_first[i] + q)), theirs = slope * (k - q);
        EXPECT_DOUBLE_EQ(ours - theirs, fic::alibi_lse_shift(slope, u.kv_begin[i], u.q_abs_first[i]));
      }
}

// ---- refusals: check() decides them from the case, with or without a device ----------------------

TEST(FlashInferRefusals, CarryFlashInfersReasons) {
  REQUIRE_COMPILED(kPrefill);
  auto pre = make_backend(kPrefill), dec = make_backend(kDecode);
  CaseSpec c = probe_case();
  c.dtype = DType::kFp32;
  EXPECT_NE(pre->check(c).find("fp32"), std::string::npos);
  c = example("encoder-headdim32");
  EXPECT_NE(pre->check(c).find("Invalid configuration"), std::string::npos) << pre->check(c);
  EXPECT_NE(pre->check(c).find("1048"), std::string::npos);
  c = probe_case();
  c.head_dim_qk = 128;
  c.head_dim_vo = 64;
  EXPECT_NE(pre->check(c).find("not instantiated"), std::string::npos);
  EXPECT_NE(dec->check(c).find("equal head dim"), std::string::npos) << dec->check(c);
  c = probe_case();
  c.head_dim_qk = c.head_dim_vo = 96;
  EXPECT_NE(pre->check(c).find("not instantiated"), std::string::npos);
  c = probe_case();
  c.attention.soft_cap = 30;
  c.attention.alibi = true;
  EXPECT_NE(pre->check(c).find("sm_scale twice"), std::string::npos);
  c = example("poisoned-pages");
  EXPECT_NE(dec->check(c).find("single-token"), std::string::npos);
  c = probe_case();
  c.num_qo_heads = 10;
  c.num_kv_heads = 2;
  EXPECT_NE(dec->check(c).find("Unsupported group_size: 5"), std::string::npos) << dec->check(c);
  c = probe_case();
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 8;
  EXPECT_NE(dec->check(c).find("tensor core decode"), std::string::npos) << dec->check(c);
  c = probe_case();
  c.requests[0] = RequestSpec{1, 64};
  c.requests[0].doc_starts = {0, 40};  // the query's document starts at 40: needs a custom mask
  EXPECT_NE(dec->check(c).find("no custom mask"), std::string::npos) << dec->check(c);
}

// ---- on the device -------------------------------------------------------------------------------

TEST(FlashInferSmoke, OnePrefillAndOneDecodeCase) {
  REQUIRE_FI_GPU();
  CaseSpec c = probe_case();
  c.name = "smoke";
  c.requests = {RequestSpec{100, 300}, RequestSpec{17, 17}, RequestSpec{1, 900}};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.kv_cache.page_size = 16;
  validate_case(c);
  check_twice_lowp(c, kPrefill);
  for (auto& r : c.requests) r.q_len = 1;
  c.name = "smoke-decode";
  check_twice_lowp(c, kDecode);
}

TEST(FlashInferPrefill, EveryExampleItRunsPassesTheTwiceLowpRule) {
  REQUIRE_FI_GPU();
  int ran = 0;
  for (const auto& e : fs::directory_iterator(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    const CaseSpec c = read_case_file(e.path().string()).spec;
    const std::string why = refusal(kPrefill, c);
    if (!why.empty()) {
      std::cout << "[ refused  ] " << e.path().filename() << ": " << why << "\n";
      continue;
    }
    ran += check_twice_lowp(c, kPrefill) ? 1 : 0;
  }
  EXPECT_GE(ran, 1);
}

TEST(FlashInferDecode, EveryExampleItRunsPassesTheTwiceLowpRule) {
  REQUIRE_FI_GPU();
  int ran = 0;
  for (const auto& e : fs::directory_iterator(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    const CaseSpec c = read_case_file(e.path().string()).spec;
    const std::string why = refusal(kDecode, c);
    if (!why.empty()) {
      std::cout << "[ refused  ] " << e.path().filename() << ": " << why << "\n";
      continue;
    }
    ran += check_twice_lowp(c, kDecode) ? 1 : 0;
  }
  EXPECT_GE(ran, 1);  // gqa-decode-long and flash-attn-split-heuristic in a full build
}

TEST(FlashInferPrefill, RandomCasesPassTheTwiceLowpRule) {
  REQUIRE_FI_GPU();
  random_cases(kPrefill, cases(45), [](uint64_t seed, int dim) { return fi_ok(random_case(seed), seed, dim); });
}

TEST(FlashInferDecode, RandomCasesPassTheTwiceLowpRule) {
  REQUIRE_FI_GPU();
  random_cases(kDecode, cases(45), [](uint64_t seed, int dim) { return decode_ok(random_case(seed + 1000), seed, dim); });
}

// Speculative-decoding trees (docs/conventions.md section 12) go in as FlashInfer's custom mask: random
// cases whose multi-token requests get a random tree over their new tokens.
TEST(FlashInferPrefill, SpeculativeTreesRunAsItsCustomMask) {
  REQUIRE_FI_GPU();
  random_cases(kPrefill, cases(24), [](uint64_t seed, int dim) {
    return attnscope::testing::with_random_trees(fi_ok(random_case(seed + 3000), seed, dim), seed * 31 + 7);
  });
}

// FlashInfer's convention for a row that sees no key is attnscope's: O = 0 (OutputTransform's
// d_rcp is 0 when m is -inf) and LSE = log2(0) + (-inf) = -inf, no NaN.
TEST(FlashInferPrefill, FullyMaskedRowsGiveZeroAndMinusInf) {
  REQUIRE_FI_GPU();
  const CaseSpec c = example("fully-masked-rows");
  SKIP_IF_NOT_INSTANTIATED(kPrefill, c);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result cpu = run("cpu.reference", c, p, w), g = run(kPrefill, c, p, w);
  ASSERT_TRUE(g.ok()) << g.message;
  EXPECT_EQ(nan_count(g), 0);
  int64_t masked = 0;
  for (size_t i = 0; i < g.lse.size(); ++i) {
    ASSERT_EQ(std::isinf(g.lse[i]), std::isinf(cpu.lse[i])) << "row " << i << ": " << g.lse[i] << " vs " << cpu.lse[i];
    if (std::isinf(g.lse[i])) {
      ++masked;
      EXPECT_LT(g.lse[i], 0);
      for (int d = 0; d < c.head_dim_vo; ++d) ASSERT_EQ(g.o[i * c.head_dim_vo + d], 0.0f) << "row " << i;
    }
  }
  EXPECT_GT(masked, 0);
}

// NaN in every unused page and slot must not reach the output: the same case with and without the
// poison gives the same bits (vLLM #42494 / #42496).
TEST(FlashInfer, PoisonedPagesLeaveTheOutputBitIdentical) {
  REQUIRE_FI_GPU();
  std::vector<std::pair<std::string, CaseSpec>> runs = {{kPrefill, example("poisoned-pages")}};
  CaseSpec d = example("poisoned-pages");
  for (auto& r : d.requests) r.q_len = 1;
  runs.push_back({kDecode, d});
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(cases(12)); ++seed) {
    CaseSpec c = fi_ok(random_case(seed + 500), seed, 128);
    if (c.kv_cache.storage == KvStorage::kRagged) continue;  // no unused slots to poison
    runs.push_back({kPrefill, c});
    runs.push_back({kDecode, decode_ok(random_case(seed + 500), seed, 128)});
  }
  int compared = 0;
  for (auto& [id, c] : runs) {
    if (!make_backend(id)->check(c).empty()) continue;
    CaseSpec clean = c, dirty = c;
    clean.kv_cache.poison_unused = false;
    dirty.kv_cache.poison_unused = true;
    const Plan p = make_plan(clean);
    const Result a = run(id, clean, p, Workload{}), b = run(id, dirty, make_plan(dirty), Workload{});
    if (a.status == Status::kUnsupported) continue;  // FlashInfer's planner refused this batch
    ASSERT_TRUE(a.ok() && b.ok()) << c.name << ": " << a.message << " / " << b.message;
    EXPECT_EQ(nan_count(b), 0) << id << " " << c.name;
    EXPECT_TRUE(compare_results(c, b, a, {"dirty", "clean", CompareRule::kBitwise, 0, 0, ""}, nullptr).verdict.pass)
        << id << " " << c.name;
    ++compared;
  }
  EXPECT_GE(compared, 2);
}

// FlashInfer PR #1675: with fixed_split_size the chunk boundaries of a request do not depend on the
// batch. Its query tile still does (FA2DetermineCtaTileQ takes the batch's average packed length,
// and PrefillPlan has no tile argument, issue #2424), and the tile sets the warp layout and the KV
// tile, hence the accumulation order. Tested as that: a request whose tile is the same alone and
// batched is bit-identical; the others are reported.
TEST(FlashInferPrefill, FixedSplitIsBatchInvariantWhereTheTileIsTheSame) {
  REQUIRE_FI_GPU();
  CaseSpec uniform = example("batch-invariance-fixed");
  for (auto& r : uniform.requests) r.q_len = 16;  // same packed length alone and batched: same tile
  uniform.name = "batch-invariance-fixed-uniform-q";
  SKIP_IF_NOT_INSTANTIATED(kPrefill, uniform);
  for (const CaseSpec& base : {example("batch-invariance-fixed"), uniform}) {
    CaseSpec c = base;
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) c.requests[r].seed = base.request_seed(r);
    const Result batch = run(kPrefill, c, make_plan(c), Workload{});
    ASSERT_TRUE(batch.ok()) << batch.message;
    const int Hq = c.num_qo_heads, Dv = c.head_dim_vo;
    int64_t tok = 0;
    int same_tile = 0, identical = 0;
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      const CaseSpec one = sub_case(c, {r});
      const Result alone = run(kPrefill, one, make_plan(one), Workload{});
      ASSERT_TRUE(alone.ok()) << alone.message;
      int diff = 0;
      for (int64_t i = 0; i < static_cast<int64_t>(alone.o.size()); ++i)
        diff += f32_bits(alone.o[i]) != f32_bits(batch.o[tok * Hq * Dv + i]);
      for (int64_t i = 0; i < static_cast<int64_t>(alone.lse.size()); ++i)
        diff += f32_bits(alone.lse[i]) != f32_bits(batch.lse[tok * Hq + i]);
      const bool tile_same = reported_tile(alone) == reported_tile(batch);
      std::cout << "[ invariance ] " << c.name << " request " << r << ": tile alone " << reported_tile(alone) << ", batched "
                << reported_tile(batch) << ": " << diff << " values differ\n";
      if (tile_same) {
        ++same_tile;
        EXPECT_EQ(diff, 0) << c.name << " request " << r << " differs although its tile and chunks are the same";
      }
      identical += diff == 0;
      tok += c.requests[r].q_len;
    }
    std::cout << "[ invariance ] " << c.name << ": " << identical << " of " << c.requests.size()
              << " requests bit-identical alone and batched (" << same_tile << " with the same tile)\n";
    if (c.name == uniform.name) {
      EXPECT_EQ(same_tile, static_cast<int>(c.requests.size()));
    }
  }
}

TEST(FlashInferPrefill, TimesWithCudaEventsAndReportsThePlan) {
  REQUIRE_FI_GPU();
  const CaseSpec c = example("mixed-prefill-decode-fragmented");
  const Plan p = make_plan(c);
  SKIP_IF_NOT_INSTANTIATED(kPrefill, c);
  auto b = make_backend(kPrefill);
  RunOptions o;
  o.bench_reps = 5;
  const Result r = run_backend(*b, c, p, Workload{}, o);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.timing.reps, 5);
  EXPECT_GT(r.timing.device_ms, 0);
  EXPECT_LE(r.timing.device_ms_min, r.timing.device_ms);
  EXPECT_GE(r.timing.device_ms_max, r.timing.device_ms);
  EXPECT_GT(reported_tile(r), 0) << r.message;
  EXPECT_NE(r.message.find("us on the host"), std::string::npos) << r.message;
}

// ---- attention sinks (docs/conventions.md section 12): attnscope's SinkAttention variant ---------

namespace {

// A random case flashinfer.prefill takes with sinks: bf16 at head dim 64 or 128 (the sinks lines of
// fi_instances.def), no soft-cap; seeded sinks or given ones (never zero); split-KV forced on with
// small chunks for a third of the seeds, forced off for another third; every fourth a decode batch.
CaseSpec sink_ok(CaseSpec c, uint64_t seed, int dim) {
  set_head_dim(c, dim);
  c.dtype = DType::kBf16;
  c.attention.soft_cap.reset();
  c.data.outlier_channels.clear();
  c.attention.sinks = SinksSpec{};
  if (seed % 2)
    for (int h = 0; h < c.num_qo_heads; ++h) c.attention.sinks->logits.push_back(-3.0 + 1.75 * ((seed + h) % 7));
  if (seed % 4 == 3)
    for (auto& r : c.requests) r.q_len = 1;
  if (seed % 3 == 0) {
    c.split = SplitSpec{};
    c.split.planner = Planner::kOff;
  } else if (seed % 3 == 1) {
    c.split.planner = Planner::kFixed;
    c.split.fixed_split_size = 2;  // pages (tokens when ragged) per chunk: most requests split
  }
  validate_case(c);
  return c;
}

// Keys whose mass a sink of about ln(keys) matches: with many chunks, a sink counted once per chunk
// would hold most of the mass instead of about half.
CaseSpec heavy_sink_case(int dim) {
  CaseSpec c = probe_case();
  c.name = "sinks-heavy-split";
  c.dtype = DType::kBf16;
  c.head_dim_qk = c.head_dim_vo = dim;
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.kv_cache.page_size = 16;
  c.kv_cache.poison_unused = true;
  c.requests = {RequestSpec{1, 2000}, RequestSpec{40, 1500}, RequestSpec{1, 700}};
  c.attention.sinks = SinksSpec{};
  for (int h = 0; h < c.num_qo_heads; ++h) c.attention.sinks->logits.push_back(6.5 + 0.25 * h);
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 8;  // 128 keys per chunk: 6 to 16 chunks per request
  validate_case(c);
  return c;
}

}  // namespace

TEST(FlashInferConventions, SinkRowsAreTheSinkInFlashInfersFrame) {
  CaseSpec c = example("llama4-chunked-local");
  c.attention.sinks = SinksSpec{};
  c.attention.alibi = true;
  validate_case(c);
  EXPECT_EQ(fic::choose_variant(c), fic::FiVariant::kSinks);  // with ALiBi, and with a window below
  c.attention.alibi = false;
  c.attention.local_chunk.reset();
  c.attention.window = 128;
  validate_case(c);
  EXPECT_EQ(fic::choose_variant(c), fic::FiVariant::kSinks);
  c.attention.soft_cap = 30;
  EXPECT_NE(fic::variant_refusal(c).find("soft-cap together with attention sinks"), std::string::npos);

  const CaseSpec l = example("llama4-chunked-local");  // virtual batches: units whose origin shift is not 0
  const fic::FiUnits u = fic::fi_units(l, make_plan(l));
  const std::vector<float> sinks = {0.5f, -2.25f, 3.0f}, zero(3, 0.0f), slopes = {0.5f, 0.125f, 0.03125f};
  const std::vector<float> plain = fic::fi_sink_rows(sinks, zero, u.kv_begin, u.q_abs_first);
  const std::vector<float> alibi = fic::fi_sink_rows(sinks, slopes, u.kv_begin, u.q_abs_first);
  ASSERT_EQ(plain.size(), u.kv_begin.size() * 3);
  int shifted = 0;
  for (size_t i = 0; i < u.kv_begin.size(); ++i)
    for (size_t h = 0; h < 3; ++h) {
      EXPECT_EQ(plain[i * 3 + h], sinks[h]);
      // FlashInfer's LSE plus the shift is attnscope's (download_outputs): so is the sink's term
      const double shift = fic::alibi_lse_shift(slopes[h], u.kv_begin[i], u.q_abs_first[i]);
      EXPECT_NEAR(alibi[i * 3 + h] + shift, sinks[h], 1e-4 * std::max(1.0, std::fabs(shift)));
      shifted += shift != 0;
    }
  EXPECT_GT(shifted, 0);
}

// decode and the Hopper prefill keep refusing sinks, naming who takes them; flashinfer.prefill
// refuses what its sinks lines do not cover, with the reason.
TEST(FlashInferRefusals, SinksNameWhoTakesThem) {
  REQUIRE_COMPILED(kPrefill);
  CaseSpec c = example("gpt-oss-sinks-sliding");
  CaseSpec d = c;
  for (auto& r : d.requests) r.q_len = 1;
  validate_case(d);
  for (const auto& [id, cs] : {std::pair<std::string, CaseSpec>{kDecode, d}, {"flashinfer.prefill_sm90", c}}) {
    const std::string why = refusal(id, cs);
    EXPECT_NE(why.find(id + " does not take attention sinks (/attention/sinks)"), std::string::npos) << why;
    for (const char* who : {"flashinfer.prefill", "cudnn.sdpa", "cuda.flash", "cpu.reference"})
      EXPECT_NE(why.find(who), std::string::npos) << who << ": " << why;
  }
  set_head_dim(c, 128);  // a head dim every development build has (fp16 plain lines, no fp16 sinks line)
  c.dtype = DType::kFp16;
  const std::string fp16 = refusal(kPrefill, c);
  if (fp16.find("is not instantiated in this build") != std::string::npos) {
    // a build without fp16 units (ATTNSCOPE_FLASHINFER_DTYPES=AUTO without a GPU: bf16 alone) refuses the
    // dtype first, naming its table
    EXPECT_NE(fp16.find("fp16: none"), std::string::npos) << fp16;
  } else {
    EXPECT_NE(fp16.find("variant sinks"), std::string::npos) << fp16;
    EXPECT_NE(fp16.find("the cuda family and the CPU backends take sinks"), std::string::npos) << fp16;
  }
  c.dtype = DType::kBf16;
  c.attention.soft_cap = 30;
  EXPECT_NE(refusal(kPrefill, c).find("soft-cap together with attention sinks"), std::string::npos) << refusal(kPrefill, c);
}

TEST(FlashInferSinks, RandomCasesPassTheTwiceLowpRuleSplitAndUnsplit) {
  REQUIRE_FI_GPU();
  int ran = 0, split = 0, unsplit = 0, windowed = 0, decode = 0, poisoned = 0, gqa = 0;
  std::map<std::string, int> reasons;
  for (uint64_t seed = 0; ran < cases(36) && seed < 200; ++seed) {
    CaseSpec c;
    std::string why;
    for (int dim : {seed % 2 ? 64 : 128, seed % 2 ? 128 : 64}) {  // whichever this build has
      c = sink_ok(random_case(seed + 7000, {4, 64, 300, false}), seed, dim);
      why = refusal(kPrefill, c);
      if (why.find("not instantiated") == std::string::npos) break;
    }
    if (!why.empty()) {
      ++reasons[why.substr(0, 80)];
      continue;
    }
    SCOPED_TRACE(c.name + " head_dim " + std::to_string(c.head_dim_qk));
    std::string plan_refusal, msg;
    if (!check_twice_lowp(c, kPrefill, &plan_refusal, &msg)) {
      ++reasons[plan_refusal.substr(0, 80)];
      continue;
    }
    EXPECT_NE(msg.find("variant sinks"), std::string::npos) << msg;
    ++ran;
    (msg.find("split_kv yes") != std::string::npos ? split : unsplit)++;
    windowed += c.attention.window.has_value();
    poisoned += c.kv_cache.poison_unused;
    gqa += c.group_size() > 1;
    decode += std::all_of(c.requests.begin(), c.requests.end(), [](const RequestSpec& r) { return r.q_len == 1; });
  }
  for (const auto& [r, n] : reasons) std::cout << "[ refused  ] " << n << " x " << r << "...\n";
  std::cout << "[ sinks    ] " << ran << " cases: " << split << " split, " << unsplit << " unsplit, " << windowed << " windowed, "
            << decode << " decode batches, " << poisoned << " poisoned, " << gqa << " GQA\n";
  EXPECT_GE(ran, cases(36));
  EXPECT_GT(split, 0);
  EXPECT_GT(unsplit, 0);
  if (!std::getenv("ATTNSCOPE_GPU_QUICK")) {
    EXPECT_GT(windowed, 0);
    EXPECT_GT(decode, 0);
    EXPECT_GT(poisoned, 0);
    EXPECT_GT(gqa, 0);
  }
}

// Split into 6 to 16 chunks with a sink as heavy as the keys: counted once per chunk instead of once,
// the sink's share of each row would go from about a half to most of it (LSE off by ~ln(chunks / 2)).
// The same case unsplit, and ALiBi with sinks on virtual batches (the sink moved to FlashInfer's frame).
TEST(FlashInferSinks, SplitKvCountsTheSinkOncePerRow) {
  REQUIRE_FI_GPU();
  CaseSpec c = heavy_sink_case(64);
  if (make_backend(kPrefill)->check(c).find("not instantiated") != std::string::npos) c = heavy_sink_case(128);
  SKIP_IF_NOT_INSTANTIATED(kPrefill, c);
  std::string msg;
  ASSERT_TRUE(check_twice_lowp(c, kPrefill, nullptr, &msg));
  EXPECT_NE(msg.find("split_kv yes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("first KV chunk's partial only"), std::string::npos) << msg;
  // the LSE within FlashInfer's fp32 bound of the reference's, row by row
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result a = run(kPrefill, c, p, w), ref = run("cpu.reference", c, p, w);
  ASSERT_TRUE(a.ok() && ref.ok()) << a.message << ref.message;
  double worst = 0;
  for (size_t i = 0; i < a.lse.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a.lse[i]) - ref.lse[i]));
  EXPECT_LT(worst, 0.02) << "a sink counted per chunk moves the LSE by ~ln(chunks / 2) > 1";
  CaseSpec off = c;
  off.split = SplitSpec{};
  off.split.planner = Planner::kOff;
  validate_case(off);
  ASSERT_TRUE(check_twice_lowp(off, kPrefill, nullptr, &msg));
  EXPECT_NE(msg.find("split_kv no"), std::string::npos) << msg;
  CaseSpec local = example("llama4-chunked-local");  // head dim 128
  local.attention.sinks = SinksSpec{};
  local.attention.alibi = true;
  local.split.planner = Planner::kFixed;
  local.split.fixed_split_size = 4;
  validate_case(local);
  if (make_backend(kPrefill)->check(local).empty()) check_twice_lowp(local, kPrefill);
}

// Rows that see no key: O = 0 and LSE = the sink (section 12), never NaN, split or not.
TEST(FlashInferSinks, FullyMaskedRowsGiveZeroAndTheSink) {
  REQUIRE_FI_GPU();
  CaseSpec c = example("fully-masked-rows");
  c.dtype = DType::kBf16;
  c.attention.sinks = SinksSpec{};
  c.kv_cache.poison_unused = c.kv_cache.storage == KvStorage::kPaged;
  validate_case(c);
  SKIP_IF_NOT_INSTANTIATED(kPrefill, c);
  const std::vector<float> sinks = sink_logits(c);
  for (const Planner pl : {Planner::kOff, Planner::kFixed}) {
    c.split.planner = pl;
    c.split.fixed_split_size = pl == Planner::kFixed ? std::optional<int>(1) : std::nullopt;
    validate_case(c);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result cpu = run("cpu.reference", c, p, w), g = run(kPrefill, c, p, w);
    ASSERT_TRUE(cpu.ok() && g.ok()) << cpu.message << g.message;
    EXPECT_EQ(nan_count(g), 0);
    int64_t masked = 0;
    for (size_t row = 0; row < g.lse.size(); ++row) {
      const int h = static_cast<int>(row % c.num_qo_heads);
      bool zero = true;
      for (int d = 0; d < c.head_dim_vo; ++d) zero = zero && cpu.o[row * c.head_dim_vo + d] == 0.f;
      if (!zero || cpu.lse[row] != sinks[h]) continue;  // a row with visible keys
      ++masked;
      for (int d = 0; d < c.head_dim_vo; ++d) ASSERT_EQ(g.o[row * c.head_dim_vo + d], 0.0f) << "row " << row;
      // FlashInfer keeps the LSE in base 2: s log2(e) ln(2) is within a few fp32 ulps of s
      EXPECT_NEAR(g.lse[row], sinks[h], 1e-6 * std::max(1.f, std::fabs(sinks[h]))) << "row " << row;
    }
    EXPECT_GT(masked, 0);
    check_twice_lowp(c, kPrefill);
  }
}

// The sink changes the output (so the checks above cannot pass by ignoring it), one far above every
// logit leaves O near 0 and the LSE at the sink, and the same case without sinks runs the variant it
// ran before (window: alibi) with its checks unchanged.
TEST(FlashInferSinks, TheSinkIsNotIgnoredAndCasesWithoutSinksKeepTheirVariant) {
  REQUIRE_FI_GPU();
  const CaseSpec c = example("gpt-oss-sinks-sliding");
  SKIP_IF_NOT_INSTANTIATED(kPrefill, c);
  CaseSpec none = c, huge = c;
  none.attention.sinks.reset();
  huge.attention.sinks->logits.assign(c.num_qo_heads, 60.0);
  validate_case(none);
  validate_case(huge);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result a = run(kPrefill, c, p, w), b = run(kPrefill, none, make_plan(none), w),
               h = run(kPrefill, huge, make_plan(huge), w);
  ASSERT_TRUE(a.ok() && b.ok() && h.ok()) << a.message << b.message << h.message;
  EXPECT_NE(a.message.find("variant sinks"), std::string::npos) << a.message;
  EXPECT_NE(b.message.find("variant alibi"), std::string::npos) << b.message;
  EXPECT_EQ(b.message.find("sinks"), std::string::npos) << b.message;
  double diff = 0, big = 0, lse = 0;
  for (size_t i = 0; i < a.o.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(a.o[i] - b.o[i])));
  for (float x : h.o) big = std::max(big, static_cast<double>(std::fabs(x)));
  for (float x : h.lse) lse = std::max(lse, std::fabs(x - 60.0));
  EXPECT_GT(diff, 1e-2);
  EXPECT_LT(big, 1e-6);  // e^(60 - logit) swamps every key
  EXPECT_LT(lse, 1e-3);
  check_twice_lowp(c, kPrefill);
  check_twice_lowp(none, kPrefill);
  const CaseSpec full = example("gpt-oss-sinks-full");
  EXPECT_EQ(refusal(kPrefill, full), "");
  check_twice_lowp(full, kPrefill);
}
