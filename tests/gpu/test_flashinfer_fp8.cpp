// FlashInfer's FP8 paths (docs/conventions.md section 10) against cpu.reference over the
// dequantised cache (the kernel error), cpu.lowp reading the same FP8 bytes as the same-precision
// baseline: flashinfer.decode and flashinfer.prefill with FP8 KV (FlashInfer's DTypeKV FP8
// instantiations, its k_scale / v_scale wrapper convention), flashinfer.prefill_sm90 with FP8
// attention (its SM90 FP8 kernel). Seeded random cases over formats, page sizes, layouts, GQA
// ratios and the instantiated head dims; poisoned pages; fully masked rows; the refusals of the
// granularities each does not take. Every backend poisons its outputs before it runs.
// Skips with the reason when the family is not compiled or no device runs its kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "case_gen.h"
#include "fi_lse_bound.h"
#include "require.h"

using namespace attnscope;
using attnscope::testing::fi_lse_excess;
using attnscope::testing::GenLimits;
using attnscope::testing::random_case;
using attnscope::testing::set_head_dim;

namespace {

constexpr const char* kPrefill = "flashinfer.prefill";
constexpr const char* kDecode = "flashinfer.decode";
constexpr const char* kSm90 = "flashinfer.prefill_sm90";

int cases(int full) { return std::getenv("ATTNSCOPE_GPU_QUICK") ? std::max(2, full / 4) : full; }

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

// A small bf16 FP8 case the backend can run: `probe` asks check() whether this build and device can.
CaseSpec fp8_probe(bool attention) {
  CaseSpec c;
  c.name = "fp8-probe";
  c.requests = {RequestSpec{}};
  c.requests[0].q_len = 1;
  c.requests[0].kv_len = 16;
  c.num_qo_heads = c.num_kv_heads = 1;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.kv_cache.fp8 = Fp8Format::kE4M3;
  if (attention) c.fp8_attention = Fp8AttentionSpec{};
  return c;
}

// Skips unless the family is compiled and device 0 runs `id` (check()'s reason otherwise).
std::string not_runnable(const std::string& id) {
  const BackendFamily* f = family_of(id);
  if (!f || !f->compiled) return "the flashinfer family is not compiled: " + (f ? f->note : std::string("absent"));
  std::string why;
  if (query_devices(&why).empty()) return why;
  const std::string r = make_backend(id)->check(fp8_probe(id == std::string(kSm90)));
  if (r.find("no CUDA device") == 0 || r.find("ATTNSCOPE_FLASHINFER_ARCHS") != std::string::npos ||
      r.find("sm_80 or newer") != std::string::npos || r.find("compute capability 9.0 only") != std::string::npos ||
      r.find("not instantiated") != std::string::npos)
    return r;
  return "";
}

// A random FP8 case for `id`: bf16, head dim `dim`, format `f`, tensor scales from amax; the random
// generator's page sizes, layouts, allocations, poison, GQA ratios and planners. decode: single
// queries and no custom mask; sm90: FP8 attention, causal or not, without mask features.
CaseSpec fp8_case(uint64_t seed, int dim, Fp8Format f, const std::string& id) {
  GenLimits lim;
  lim.max_requests = 4;
  lim.max_q = 48;
  lim.max_kv = 260;
  lim.allow_fp32 = false;
  CaseSpec c = random_case(seed, lim);
  c.name = "fp8-" + std::to_string(seed) + "-" + fp8_name(f) + "-d" + std::to_string(dim);
  set_head_dim(c, dim);
  c.dtype = DType::kBf16;
  c.attention.soft_cap.reset();
  c.attention.alibi = false;
  c.attention.window.reset();
  c.attention.local_chunk.reset();
  c.data.outlier_channels.clear();
  const bool plain_mask = id != kPrefill || seed % 3 != 0;  // a third of the prefill cases keep their mask features
  if (plain_mask) {
    c.attention.prefix_lm = false;
    for (auto& r : c.requests) {
      r.doc_starts.clear();
      r.pad_start.reset();
      r.prefix_len.reset();
    }
  }
  if (id != kSm90 || seed % 2) c.attention.causal = true;
  if (id == kDecode) {
    for (auto& r : c.requests) r.q_len = 1;
    if (c.split.planner == Planner::kFixed) {
      c.split.planner = Planner::kFlashInfer;
      c.split.fixed_split_size.reset();
    }
  }
  if (id == kSm90) {
    c.kv_cache.storage = KvStorage::kPaged;  // FlashInfer's SM90 backend runs paged caches
    if (c.kv_cache.page_size == 1 && seed % 2) c.kv_cache.page_size = 16;
    c.fp8_attention = Fp8AttentionSpec{};
  }
  if (seed % 4 == 1 && c.kv_cache.storage == KvStorage::kPaged) c.kv_cache.poison_unused = true;
  c.kv_cache.fp8 = f;
  c.kv_cache.scales = KvScalesSpec{};
  c.kv_cache.scales.granularity = ScaleGranularity::kTensor;
  if (id == kSm90 && seed % 3 == 2) c.kv_cache.scales.granularity = ScaleGranularity::kHead;
  // given scales sometimes, so a scale far from amax's (saturating elements) is covered too
  if (seed % 5 == 3) {
    const size_t n = c.kv_cache.scales.granularity == ScaleGranularity::kHead ? c.num_kv_heads : 1;
    c.kv_cache.scales.k.assign(n, 0.004);
    c.kv_cache.scales.v.assign(n, 0.006);
  }
  c.backends = {id, "cpu.reference", "cpu.lowp"};
  validate_case(c);
  return c;
}

// FP8 attention's tolerance. DefaultFP8Attention (hopper/variants.cuh) multiplies P by the format's
// max and rounds it to FP8 for the P.V wgmma, while the row sum l stays fp32: each probability
// carries a relative rounding of at most 2^-(m+1) (m mantissa bits: 3 for e4m3, 2 for e5m2), or,
// below the smallest normal, an absolute half-spacing h / max. So per output element
//   |O - ideal| <= 2^-(m+1) * sum_j P_j |v_j| / l + kv_len * h / max * max|v|
// beyond what cpu.lowp (P in bf16) has. sum_j P_j |v_j| / l is the reference over |V|: computed
// here by cpu.reference on the same workload with V's magnitudes. The 2x rule alone cannot hold: P
// in FP8 is the kernel's design, 16x coarser than bf16. (The P.V wgmma's ~14-bit accumulation, see
// fp8_qk_lse_allowance, adds ~2^-14 relative: far inside this bound.)
std::vector<double> p_quantisation_bound(const CaseSpec& c, const Plan& p, const Workload& w) {
  Workload wa = w;
  double vmax = 0;
  const double smax = *std::max_element(w.v_scale.begin(), w.v_scale.end());
  for (float& x : wa.v_pool) {
    x = std::abs(x);
    if (std::isfinite(x)) vmax = std::max(vmax, x * smax);
  }
  const Result oabs = run("cpu.reference", c, p, wa);
  EXPECT_TRUE(oabs.ok()) << oabs.message;
  const bool e4m3 = *c.kv_cache.fp8 == Fp8Format::kE4M3;
  const double rel = std::ldexp(1.0, e4m3 ? -4 : -3), half_sub = std::ldexp(1.0, e4m3 ? -10 : -17);
  int kv_max = 0;
  for (const RequestSpec& r : c.requests) kv_max = std::max(kv_max, r.kv_len);
  std::vector<double> b(oabs.o.size());
  for (size_t i = 0; i < b.size(); ++i) b[i] = rel * oabs.o[i] + kv_max * half_sub / fp8_max(*c.kv_cache.fp8) * vmax;
  return b;
}

// O within 2 x cpu.lowp's max error (1e-5 floor) plus P's quantisation bound, element by element.
void expect_fp8_attention_bound(const CaseSpec& c, const Plan& p, const Workload& w, const Result& a, const Result& ref,
                                const Result& lowp) {
  double lowp_max = 0;
  for (size_t i = 0; i < ref.o.size(); ++i)
    if (std::isfinite(ref.o[i])) lowp_max = std::max(lowp_max, std::abs(double(lowp.o[i]) - ref.o[i]));
  const std::vector<double> pb = p_quantisation_bound(c, p, w);
  int64_t bad = 0;
  double worst = 0, worst_excess = -1;
  for (size_t i = 0; i < ref.o.size(); ++i) {
    const double e = std::abs(double(a.o[i]) - ref.o[i]);
    const double allowed = std::max(2 * lowp_max, 1e-5) + pb[i];
    worst = std::max(worst, e);
    worst_excess = std::max(worst_excess, e - allowed);
    bad += !(e <= allowed);
  }
  EXPECT_EQ(bad, 0) << c.name << ": " << bad << " elements beyond 2 x lowp (" << lowp_max
                    << ") + P's FP8 rounding bound; max error " << worst << ", worst excess " << worst_excess;
}

// FP8 attention's LSE allowance per (token, qo head) row, natural log. Hopper's FP8 wgmma keeps about
// 14 bits of its fp32 accumulator (DeepSeek-V3 report, section 3.3.2: "limited to retaining around
// 14 bits"), so a score s = sm_scale * q.k is off by up to ~2^-14 of sum_d |q_d k_d| * sm_scale
// (2^-13 here: a factor 2 of margin), and LSE, a soft maximum of the scores, by at most the largest
// such error over the row's keys (all of the request's keys: an upper bound). Seen on an H200: LSE off
// by up to 0.0045 where the fp32 bound of fi_lse_bound.h allows 1e-3.
std::vector<double> fp8_qk_lse_allowance(const CaseSpec& c, const Plan& p, const Workload& w) {
  const int Hq = c.num_qo_heads, Hk = c.num_kv_heads, D = c.head_dim_qk, ps = p.pages.page_size;
  std::vector<double> a(static_cast<size_t>(c.total_q()) * Hq, 0.0);
  const double scale = c.sm_scale_or_default() * w.q_scale;
  for (size_t r = 0; r < c.requests.size(); ++r)
    for (int64_t t = w.q_indptr[r]; t < w.q_indptr[r + 1]; ++t)
      for (int h = 0; h < Hq; ++h) {
        const float* q = w.q_row(t, h, c);
        const int kh = h / c.group_size();
        const double ks = w.k_scale.size() == 1 ? w.k_scale[0] : w.k_scale[kh];
        double worst = 0;
        for (int k = 0; k < c.requests[r].kv_len; ++k) {
          const float* kv =
              w.k_pool.data() + kv_offset(c.kv_cache.layout, p.pages.page_of(static_cast<int>(r), k), k % ps, kh, 0, ps, Hk, D);
          double sum = 0;
          for (int d = 0; d < D; ++d) sum += std::abs(double(q[d]) * kv[d]);
          worst = std::max(worst, sum * ks * scale);
        }
        a[t * Hq + h] = std::ldexp(worst, -13);
      }
  return a;
}

// Runs `id` on c and checks it against the dequantised ideal: the 2x rule against cpu.lowp (for FP8
// attention, plus P's quantisation bound), the LSE bound, no NaN. False (with *refused) when the
// backend refused.
bool check_fp8(const CaseSpec& c, const std::string& id, std::string* refused = nullptr) {
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
  EXPECT_NE(a.message.find("FP8"), std::string::npos) << c.name << ": the message does not say how FP8 ran: " << a.message;
  const Result ref = run("cpu.reference", c, p, w), lowp = run("cpu.lowp", c, p, w);
  EXPECT_TRUE(ref.ok() && lowp.ok()) << ref.message << " / " << lowp.message;
  EXPECT_EQ(nan_count(a), 0) << c.name << ": " << id << " wrote NaN (or left poisoned elements)";
  // 1e-5 floor: FlashAttention's rounding allowance
  const DiffReport d = compare_results(c, a, ref, {id, "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  if (c.fp8_attention)
    expect_fp8_attention_bound(c, p, w, a, ref, lowp);  // P in FP8: the 2x rule plus its bound
  else
    EXPECT_TRUE(d.verdict.pass) << c.name << " (" << id << ", " << a.message << "): " << d.verdict.detail;
  if (c.fp8_attention) {
    // fi_lse_bound.h's fp32 bound plus the FP8 wgmma's accumulation allowance, row by row
    const std::vector<double> extra = fp8_qk_lse_allowance(c, p, w);
    int64_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < ref.lse.size(); ++i) {
      const double x = a.lse[i], y = ref.lse[i];
      if (std::isinf(x) && std::isinf(y) && (x < 0) == (y < 0)) continue;
      const double e = std::abs(x - y), tol = 1e-3 + 1e-4 * std::abs(y) + extra[i];
      worst = std::max(worst, e - tol);
      bad += !(e <= tol);
    }
    EXPECT_EQ(bad, 0) << c.name << " (" << id << "): " << bad << " LSE rows beyond their bound, worst excess " << worst
                      << ", max abs " << d.lse.max_abs;
  } else {
    EXPECT_LE(fi_lse_excess(c, a, ref, id == std::string(kPrefill)), 0.0)
        << c.name << " (" << id << "): LSE beyond its bound, max abs " << d.lse.max_abs;
  }
  return true;
}

// `want` random cases of `id` over the formats and head dims; the ones check() refuses as not
// instantiated are counted and skipped (each refusal must carry a reason).
void random_fp8(const std::string& id, int want, const std::vector<std::pair<Fp8Format, int>>& shapes) {
  int ran = 0;
  std::map<std::string, int> reasons;
  for (uint64_t seed = 0; ran < want && seed < static_cast<uint64_t>(want) * 4; ++seed) {
    const auto [f, dim] = shapes[seed % shapes.size()];
    const CaseSpec c = fp8_case(seed + 7000, dim, f, id);
    SCOPED_TRACE(c.name);
    if (const std::string why = make_backend(id)->check(c); !why.empty()) {
      EXPECT_NE(why.find("not instantiated"), std::string::npos) << c.name << ": " << why;
      ++reasons[why.substr(0, 70)];
      continue;
    }
    std::string refusal;
    if (check_fp8(c, id, &refusal))
      ++ran;
    else if (!refusal.empty())
      ++reasons[refusal.substr(0, 70)];
  }
  for (const auto& [r, n] : reasons) std::cout << "[ refused  ] " << n << " x " << r << "...\n";
  EXPECT_GE(ran, want) << id << ": only " << ran << " random FP8 cases ran";
}

}  // namespace

// The random cases themselves (no device): valid, FP8, with the scales the paths take, and the
// features each test means to cover (poison, given scales, per-head scales for the SM90 path).
TEST(FlashInferFp8, RandomCasesAreValidFp8Cases) {
  for (const char* id : {kDecode, kPrefill, kSm90}) {
    int poisoned = 0, given = 0, head = 0;
    for (uint64_t seed = 0; seed < 40; ++seed) {
      const CaseSpec c = fp8_case(seed + 7000, 128, seed % 2 ? Fp8Format::kE4M3 : Fp8Format::kE5M2, id);
      ASSERT_TRUE(c.fp8_kv()) << c.name;
      ASSERT_EQ(c.fp8_attention.has_value(), id == std::string(kSm90)) << c.name;
      if (id == std::string(kDecode)) {
        for (const auto& r : c.requests) ASSERT_EQ(r.q_len, 1);
      }
      poisoned += c.kv_cache.poison_unused;
      given += !c.kv_cache.scales.k.empty();
      head += c.kv_cache.scales.granularity == ScaleGranularity::kHead;
      const Plan p = make_plan(c);
      const Workload w = make_workload(c, p.pages);
      ASSERT_EQ(w.k_scale.size(), c.kv_cache.scales.granularity == ScaleGranularity::kHead ? size_t(c.num_kv_heads) : 1u);
    }
    EXPECT_GT(poisoned, 0) << id;
    EXPECT_GT(given, 0) << id;
    EXPECT_EQ(head > 0, id == std::string(kSm90)) << id;
  }
}

TEST(FlashInferFp8, DecodeRandomCasesPassTheTwiceLowpRule) {
  REQUIRE_WHY_EMPTY(not_runnable(kDecode));
  random_fp8(kDecode, cases(24),
             {{Fp8Format::kE4M3, 128}, {Fp8Format::kE4M3, 64}, {Fp8Format::kE5M2, 128}, {Fp8Format::kE4M3, 256}});
}

TEST(FlashInferFp8, PrefillRandomCasesPassTheTwiceLowpRule) {
  REQUIRE_WHY_EMPTY(not_runnable(kPrefill));
  random_fp8(kPrefill, cases(16), {{Fp8Format::kE4M3, 128}});
}

TEST(FlashInferFp8, Sm90Fp8AttentionRandomCasesPassTheBound) {
  REQUIRE_WHY_EMPTY(not_runnable(kSm90));
  random_fp8(kSm90, cases(16), {{Fp8Format::kE4M3, 128}});
}

// A row that sees no key: O = 0 and LSE = -inf through the FP8 path too (padding queries of the
// fully-masked-rows example, FlashInfer's custom-mask mode).
TEST(FlashInferFp8, PrefillFullyMaskedRowsGiveZeroAndMinusInf) {
  REQUIRE_WHY_EMPTY(not_runnable(kPrefill));
  CaseSpec c;
  c.name = "fp8-fully-masked";
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 128;
  RequestSpec r;
  r.q_len = 100;
  r.kv_len = 130;
  r.doc_starts = {0, 40, 90};
  r.pad_start = 110;
  c.requests = {r};
  c.kv_cache.fp8 = Fp8Format::kE4M3;
  c.kv_cache.poison_unused = true;
  validate_case(c);
  if (auto why = make_backend(kPrefill)->check(c); !why.empty()) GTEST_SKIP() << why;
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result g = run(kPrefill, c, p, w);
  // the mask mode is chosen at run time: this build may lack the FP8 custom-mask line
  if (g.status == Status::kUnsupported && g.message.find("not instantiated") != std::string::npos) GTEST_SKIP() << g.message;
  ASSERT_TRUE(check_fp8(c, kPrefill));
  int64_t masked = 0;
  for (size_t i = 0; i < g.lse.size(); ++i)
    if (std::isinf(g.lse[i])) {
      ++masked;
      EXPECT_LT(g.lse[i], 0);
      for (int d = 0; d < c.head_dim_vo; ++d) ASSERT_EQ(g.o[i * c.head_dim_vo + d], 0.0f) << "row " << i;
    }
  EXPECT_EQ(masked, 20 * c.num_qo_heads);  // queries at keys 110..129 are padding
}

// NaN in every unused page and slot must not reach the output: with and without the poison, the
// same bits (the FP8 pools' unused bytes are 0x7f, NaN in e4m3, under poison_unused).
TEST(FlashInferFp8, PoisonedPagesLeaveTheOutputBitIdentical) {
  int compared = 0;
  std::string skipped;
  for (const char* id : {kDecode, kPrefill, kSm90}) {
    if (auto why = not_runnable(id); !why.empty()) {
      skipped += std::string(id) + ": " + why + "; ";
      continue;
    }
    for (uint64_t seed = 0; seed < 3; ++seed) {
      CaseSpec c = fp8_case(seed + 9100, 128, Fp8Format::kE4M3, id);
      c.kv_cache.storage = KvStorage::kPaged;
      if (c.kv_cache.page_size == 1) c.kv_cache.page_size = 16;
      c.kv_cache.poison_unused = false;
      CaseSpec poisoned = c;
      poisoned.kv_cache.poison_unused = true;
      if (!make_backend(id)->check(c).empty()) continue;
      const Plan p = make_plan(c);
      const Result a = run(id, c, p, make_workload(c, p.pages)), b = run(id, poisoned, p, make_workload(poisoned, p.pages));
      ASSERT_TRUE(a.ok() && b.ok()) << id << ": " << a.message << " / " << b.message;
      ASSERT_EQ(a.o.size(), b.o.size());
      for (size_t i = 0; i < a.o.size(); ++i)
        ASSERT_EQ(std::memcmp(&a.o[i], &b.o[i], 4), 0) << id << " " << c.name << ": element " << i;
      ++compared;
    }
  }
  if (compared == 0) GTEST_SKIP() << skipped;
  if (!skipped.empty()) std::cout << "[ skipped  ] " << skipped << "\n";
}

// What each path takes, and the refusal naming it for the rest: the FA2 paths take tensor scales
// (FlashInfer's wrappers fold one k_scale into sm_scale and multiply the output by one v_scale);
// the SM90 FP8 kernel takes tensor or per-head scales and needs FP8 queries.
TEST(FlashInferFp8, RefusalsNameWhatEachTakes) {
  const BackendFamily* f = family_of(kSm90);
  if (!f || !f->compiled) GTEST_SKIP() << "the flashinfer family is not compiled: " << (f ? f->note : std::string("absent"));
  CaseSpec c = fp8_probe(false);
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  for (const char* id : {kDecode, kPrefill}) {
    for (auto g : {ScaleGranularity::kHead, ScaleGranularity::kToken}) {
      CaseSpec x = c;
      x.kv_cache.scales.granularity = g;
      validate_case(x);
      const Plan p = make_plan(x);
      const Result r = run(id, x, p, make_workload(x, p.pages));
      EXPECT_EQ(r.status, Status::kUnsupported) << id;
      EXPECT_NE(r.message.find("tensor scales"), std::string::npos) << id << ": " << r.message;
      EXPECT_NE(r.message.find(granularity_name(g)), std::string::npos) << id << ": " << r.message;
    }
    CaseSpec a = fp8_probe(true);
    validate_case(a);
    const Plan p = make_plan(a);
    const Result r = run(id, a, p, make_workload(a, p.pages));
    EXPECT_EQ(r.status, Status::kUnsupported) << id;
    EXPECT_NE(r.message.find("FP8 attention"), std::string::npos) << id << ": " << r.message;
  }
  {
    CaseSpec x = fp8_probe(true);
    x.kv_cache.scales.granularity = ScaleGranularity::kToken;
    validate_case(x);
    const Plan p = make_plan(x);
    const Result r = run(kSm90, x, p, make_workload(x, p.pages));
    EXPECT_EQ(r.status, Status::kUnsupported);
    EXPECT_NE(r.message.find("tensor, head scales"), std::string::npos) << r.message;
  }
  if (make_backend(kSm90)->check(fp8_probe(true)).find("not compiled") == std::string::npos) {
    // an FP8 cache with bf16 queries: FlashInfer's SM90 kernels need Q in FP8 too
    CaseSpec x = fp8_probe(false);
    x.requests[0].q_len = 4;
    validate_case(x);
    const std::string why = make_backend(kSm90)->check(x);
    EXPECT_NE(why.find("FP8 queries"), std::string::npos) << why;
  }
  // instantiations: FP8 KV decode at head_dim 32 is not built, nor fp16 queries with an FP8 cache
  CaseSpec d = fp8_probe(false);
  d.head_dim_qk = d.head_dim_vo = 32;
  EXPECT_NE(make_backend(kDecode)->check(d).find("not instantiated"), std::string::npos) << make_backend(kDecode)->check(d);
  CaseSpec h = fp8_probe(false);
  h.dtype = DType::kFp16;
  EXPECT_NE(make_backend(kDecode)->check(h).find("bf16 queries"), std::string::npos) << make_backend(kDecode)->check(h);
}
