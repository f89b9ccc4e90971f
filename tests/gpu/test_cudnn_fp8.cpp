// cudnn.sdpa_fp8 (cuDNN's FP8 SDPA forward through the frontend's sdpa_fp8 node) against the
// dequantised ideal (cpu.reference over the FP8 bytes times their scales): seeded random FP8
// attention cases (e4m3 / e5m2, head dims 64 / 128, GQA, causal / decode / not, padding rows, paged
// and ragged pools), head dim 256, poisoned unused pages, the refusals and their reasons.
//
// The error rule. FlashAttention's 2x rule against cpu.lowp cannot hold here: cuDNN's FP8 kernel
// rounds P to FP8 before P.V and, on Hopper, writes O in FP8, while cpu.lowp keeps P in fp32 and O
// in the case dtype; each FP8 rounding is up to u = 2^-(mantissa bits + 1) relative (e4m3 2^-4,
// e5m2 2^-3), some fifty times bf16's. The rule is the bound of those roundings, element by element:
//   |O - ideal| <= u * |ideal| + 2.5 u * A + n_keys * sub_P * V_max + sub_O + 2^-8 |ideal|,
// A = sum_j p_j |V_j| (cpu.reference with |V|): P's relative rounding moves O by at most u * A and
// the row sum by u; sub_P (half of P's FP8 subnormal step over scale_s) bounds P's rounding below
// the normal range; sub_O is O's FP8 subnormal half step (times v_scale); 2^-8 the dequantised O's
// rounding to the case dtype. A wrong scale, head, mask or key moves O by the order of A itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attnscope/device.h"
#include "attnscope/fp8.h"
#include "attnscope/registry.h"
#include "case_gen.h"
#include "require.h"

using namespace attnscope;
using attnscope::testing::random_case;
using attnscope::testing::set_head_dim;

namespace {

constexpr const char* kId = "cudnn.sdpa_fp8";

int cases(int full) { return std::getenv("ATTNSCOPE_GPU_QUICK") ? std::max(2, full / 6) : full; }

Result run(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w) {
  auto b = make_backend(id);
  return run_backend(*b, c, p, w, RunOptions{});
}

// A random case made an FP8 attention case cuDNN's Hopper FP8 SDPA can express: tensor scales,
// bf16 / fp16, the masks it takes (causal only with q_len == kv_len or decode rows, padding), no
// score modifiers, one document.
CaseSpec fp8_case(uint64_t seed, Fp8Format f, int head_dim) {
  attnscope::testing::GenLimits lim;
  lim.allow_fp32 = false;
  CaseSpec c = random_case(seed, lim);
  c.name = "fp8-" + std::to_string(seed);
  set_head_dim(c, head_dim);
  c.attention.soft_cap.reset();
  c.attention.alibi = false;
  c.attention.window.reset();
  c.attention.local_chunk.reset();
  c.attention.prefix_lm = false;
  // Hopper's FP8 engines align bands top-left only: a causal batch is all prefill with q_len ==
  // kv_len (top-left == bottom-right) or all decode (the one query sees every key).
  c.attention.causal = seed % 2 == 0;
  const bool decode = seed % 3 == 0;
  for (auto& r : c.requests) {
    r.doc_starts.clear();
    r.prefix_len.reset();
    if (c.attention.causal) r.q_len = decode ? 1 : r.kv_len;
  }
  c.data.outlier_channels.clear();
  // Unused slots hold 0, not NaN: cuDNN 9.19's paged read reaches the unused tail slots of a
  // request's last page and a NaN there reaches O (as for cudnn.sdpa);
  // PoisonedUnusedPagesAreNotRead checks the whole pages.
  c.kv_cache.poison_unused = false;
  c.kv_cache.fp8 = f;
  c.kv_cache.scales = KvScalesSpec{};  // tensor, amax
  c.fp8_attention = Fp8AttentionSpec{};
  c.backends = {kId, "cpu.reference", "cpu.lowp"};
  validate_case(c);
  return c;
}

struct Fp8Errors {
  double max_abs = 0, max_ratio = 0;  // error, and error over its bound (pass: <= 1)
  double lowp_max_abs = 0;            // cpu.lowp against the same ideal, for the report
  double lse_max_abs = 0, lse_bound = 0;
  int64_t fails = 0, masked_mismatch = 0;
};

// The rule of the file's comment, element by element; the LSE within 1.1 u: cuDNN's row sum adds
// the FP8-rounded P (each within u relative, so the sum too, and ln(1 + u) < 1.1 u); fully
// masked rows (LSE -inf) at the same places.
Fp8Errors check_fp8(const CaseSpec& c, std::string* message) {
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result a = run(kId, c, p, w), ref = run("cpu.reference", c, p, w), lowp = run("cpu.lowp", c, p, w);
  Workload wa = w;  // A = sum_j p_j |V_j|
  for (float& x : wa.v_pool) x = std::fabs(x);
  const Result abs_ref = run("cpu.reference", c, p, wa);
  Fp8Errors e;
  e.lse_bound = 1.1 * std::ldexp(1.0, -(*c.kv_cache.fp8 == Fp8Format::kE4M3 ? 4 : 3));
  *message = a.message;
  EXPECT_TRUE(a.ok()) << c.name << ": " << a.message;
  EXPECT_TRUE(ref.ok() && lowp.ok() && abs_ref.ok()) << ref.message << lowp.message << abs_ref.message;
  if (!a.ok() || !ref.ok() || !lowp.ok() || !abs_ref.ok()) return e;
  const Fp8Format f = *c.kv_cache.fp8;
  const int mbits = f == Fp8Format::kE4M3 ? 3 : 2;
  const double u = std::ldexp(1.0, -(mbits + 1));
  const double sub_step = f == Fp8Format::kE4M3 ? std::ldexp(1.0, -9) : std::ldexp(1.0, -16);
  const double v_scale = w.v_scale.at(0);
  double v_max = 0;
  for (float x : w.v_pool)
    if (std::isfinite(x)) v_max = std::max(v_max, std::fabs(x) * v_scale);
  const double sub_o = sub_step / 2 * v_scale, sub_p = sub_step / 2 / 448.0;
  const int Hq = c.num_qo_heads, dv = c.head_dim_vo;
  for (size_t r = 0; r < c.requests.size(); ++r) {
    for (int64_t t = w.q_indptr[r]; t < w.q_indptr[r + 1]; ++t)
      for (int h = 0; h < Hq; ++h) {
        const int64_t row = t * Hq + h;
        const float la = a.lse[row], lr = ref.lse[row];
        if (std::isinf(lr) || std::isinf(la)) {
          e.masked_mismatch += std::isinf(lr) != std::isinf(la);
          continue;
        }
        e.lse_max_abs = std::max(e.lse_max_abs, static_cast<double>(std::fabs(la - lr)));
        for (int d = 0; d < dv; ++d) {
          const int64_t i = row * dv + d;
          const double ideal = ref.o[i], err = std::fabs(static_cast<double>(a.o[i]) - ideal);
          const double bound = u * std::fabs(ideal) + 2.5 * u * abs_ref.o[i] + c.requests[r].kv_len * sub_p * v_max + sub_o +
                               std::ldexp(std::fabs(ideal), -8);
          if (!(err <= bound)) ++e.fails;
          e.max_abs = std::max(e.max_abs, std::isnan(err) ? INFINITY : err);
          e.max_ratio = std::max(e.max_ratio, std::isnan(err) ? INFINITY : err / bound);
          e.lowp_max_abs = std::max(e.lowp_max_abs, std::fabs(static_cast<double>(lowp.o[i]) - ideal));
        }
      }
  }
  return e;
}

}  // namespace

TEST(CudnnSdpaFp8, IsRegisteredWithTensorScalesAndFp8Attention) {
  const BackendInfo* b = backend_info(kId);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->gpu);
  EXPECT_TRUE(b->fp8_attention);
  EXPECT_EQ(b->fp8_kv_scales, fp8_bit(ScaleGranularity::kTensor));
  EXPECT_EQ(make_backend(kId)->id(), kId);  // the family's factory makes this backend, not cudnn.sdpa
}

// Every refusal names the rule: the registry's for the granularity (the descriptor), the backend's
// for a case that is not FP8 attention. No device needed: check() decides before the device check.
TEST(CudnnSdpaFp8, RefusesWhatItCannotTakeNamingWhatItTakes) {
  REQUIRE_COMPILED(kId);
  CaseSpec c = fp8_case(3, Fp8Format::kE4M3, 64);
  const Plan p = make_plan(c);
  const Workload none{};
  auto b = make_backend(kId);

  CaseSpec plain = c;
  plain.kv_cache.fp8.reset();
  plain.fp8_attention.reset();
  validate_case(plain);
  Result r = run_backend(*b, plain, make_plan(plain), none, RunOptions{});
  EXPECT_EQ(r.status, Status::kUnsupported);
  EXPECT_NE(r.message.find("runs FP8 attention only"), std::string::npos) << r.message;

  CaseSpec kv_only = c;
  kv_only.fp8_attention.reset();
  validate_case(kv_only);
  r = run_backend(*b, kv_only, p, none, RunOptions{});
  EXPECT_EQ(r.status, Status::kUnsupported);
  EXPECT_NE(r.message.find("without /fp8_attention"), std::string::npos) << r.message;

  for (ScaleGranularity g : {ScaleGranularity::kHead, ScaleGranularity::kToken}) {
    CaseSpec s = c;
    s.kv_cache.scales.granularity = g;
    validate_case(s);
    r = run_backend(*b, s, make_plan(s), none, RunOptions{});
    EXPECT_EQ(r.status, Status::kUnsupported);
    EXPECT_NE(r.message.find("tensor scales"), std::string::npos) << r.message;
  }
}

// Seeded random FP8 attention cases against the dequantised ideal under the FP8 rounding bound.
TEST(CudnnSdpaFp8, RandomCasesWithinTheFp8RoundingBound) {
  REQUIRE_COMPILED_GPU(kId);
  const int n = cases(24);
  for (int i = 0; i < n; ++i) {
    const Fp8Format f = i % 2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
    const int d = (i / 2) % 2 ? 128 : 64;
    const CaseSpec c = fp8_case(100 + i, f, d);
    std::string msg;
    const Fp8Errors e = check_fp8(c, &msg);
    std::printf("%s %s d%d Hq/Hk %d/%d %s%s: max err %.3g (%.2f of bound), cpu.lowp %.3g, LSE %.2g\n", c.name.c_str(),
                fp8_name(f), d, c.num_qo_heads, c.num_kv_heads, c.attention.causal ? "causal" : "non-causal",
                c.kv_cache.storage == KvStorage::kRagged ? " ragged" : " paged", e.max_abs, e.max_ratio, e.lowp_max_abs,
                e.lse_max_abs);
    EXPECT_EQ(e.fails, 0) << c.name << ": " << e.fails << " elements beyond the FP8 bound (max " << e.max_ratio << " of it)\n  "
                          << msg;
    EXPECT_EQ(e.masked_mismatch, 0) << c.name << ": fully masked rows differ";
    EXPECT_LE(e.lse_max_abs, e.lse_bound) << c.name << ": LSE differs\n  " << msg;
  }
}

// Hopper's FP8 engines have no bottom-right band: a causal request with q_len < kv_len is cuDNN's
// refusal there, reported with its own message; on Blackwell and newer the same case runs.
TEST(CudnnSdpaFp8, BottomRightCausalIsCudnnsRefusalOnHopper) {
  REQUIRE_COMPILED_GPU(kId);
  CaseSpec c = fp8_case(7, Fp8Format::kE4M3, 128);
  c.attention.causal = true;
  c.requests = {RequestSpec{40, 100}, RequestSpec{64, 64}};
  validate_case(c);
  std::string why;
  const int major = query_devices(&why).at(0).cc_major;
  if (major != 9) {
    std::string msg;
    const Fp8Errors e = check_fp8(c, &msg);
    EXPECT_EQ(e.fails, 0) << msg;
    return;
  }
  const Plan p = make_plan(c);
  const Result r = run(kId, c, p, Workload{});
  EXPECT_EQ(r.status, Status::kUnsupported) << r.message;
  EXPECT_NE(r.message.find("band bottom-right"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("GRAPH_NOT_SUPPORTED"), std::string::npos) << r.message;
  std::printf("refusal: %s\n", r.message.c_str());
}

// Head dim 256 (Hopper's FP8 limit) and a paged, shuffled pool with HND layout, page 16.
TEST(CudnnSdpaFp8, HeadDim256OnAPagedHndPool) {
  REQUIRE_COMPILED_GPU(kId);
  CaseSpec c = fp8_case(11, Fp8Format::kE4M3, 256);
  c.kv_cache.storage = KvStorage::kPaged;
  c.kv_cache.page_size = 16;
  c.kv_cache.layout = KvLayout::kHND;
  c.kv_cache.allocation = PageAlloc::kShuffled;
  c.kv_cache.null_page = true;
  c.attention.causal = false;
  c.requests = {RequestSpec{33, 150}, RequestSpec{1, 77}, RequestSpec{64, 64}};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  validate_case(c);
  std::string msg;
  const Fp8Errors e = check_fp8(c, &msg);
  std::printf("d256: max err %.3g (%.2f of bound); %s\n", e.max_abs, e.max_ratio, msg.c_str());
  EXPECT_EQ(e.fails, 0) << msg;
  EXPECT_EQ(e.masked_mismatch, 0);
  EXPECT_LE(e.lse_max_abs, e.lse_bound) << msg;
}

// NaN-poisoned unused pages on a fragmented pool whose requests fill their last page exactly:
// cuDNN reads the requests' own pages through the page table and nothing else.
TEST(CudnnSdpaFp8, PoisonedUnusedPagesAreNotRead) {
  REQUIRE_COMPILED_GPU(kId);
  CaseSpec c = fp8_case(13, Fp8Format::kE5M2, 128);
  c.kv_cache.storage = KvStorage::kPaged;
  c.kv_cache.page_size = 16;
  c.kv_cache.layout = KvLayout::kNHD;
  c.kv_cache.allocation = PageAlloc::kFragmented;
  c.kv_cache.poison_unused = true;
  c.attention.causal = true;
  c.requests = {RequestSpec{64, 64}, RequestSpec{128, 128}, RequestSpec{32, 32}};
  c.num_qo_heads = 8;
  c.num_kv_heads = 4;
  validate_case(c);
  std::string msg;
  const Fp8Errors e = check_fp8(c, &msg);
  std::printf("poisoned: max err %.3g (%.2f of bound)\n", e.max_abs, e.max_ratio);
  EXPECT_EQ(e.fails, 0) << msg;
  EXPECT_LE(e.lse_max_abs, e.lse_bound) << msg;
}
