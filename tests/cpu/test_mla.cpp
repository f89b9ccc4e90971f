// MLA (docs/conventions.md section 13) on the CPU: the generator's derived tensors against their
// definitions computed here, the two forms against each other through W_uv, the CPU backends under the
// 2x rule, the case rules and JSON form, and the registry's refusal of backends without the form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attnscope/compare.h"
#include "attnscope/mla.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "case_json.h"
#include "mla_case_gen.h"

using namespace attnscope;
using attnscope::testing::mla_case;

namespace {

Result run(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w) {
  auto b = make_backend(id);
  return run_backend(*b, c, p, w, RunOptions{});
}

const float* pool_row(const CaseSpec& c, const Plan& p, const std::vector<float>& pool, int r, int k, int h, int dim) {
  return pool.data() +
         kv_offset(c.kv_cache.layout, p.pages.page_of(r, k), k % p.pages.page_size, h, 0, p.pages.page_size, c.num_kv_heads, dim);
}

// |a - b| within one unit in the last place of the dtype at b's magnitude: the generator sums in eight
// interleaved partials, the check here in one sequential sum, so the roundings may differ by one ulp.
bool within_one_ulp(DType t, float a, double b) {
  double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(b), 1e-30)) - (t == DType::kBf16 ? 7 : 10));
  if (t == DType::kFp16) ulp = std::max(ulp, std::ldexp(1.0, -24));  // fp16's subnormal spacing
  return std::fabs(a - b) <= ulp;
}

}  // namespace

// Absorbed: K rows are the latent [ckv ; kpe] from the K generator's stream, V rows K's first rank
// dims, Q = [W_uk^T q_nope ; q_pe] with q the generator's non-absorbed Q.
TEST(Mla, AbsorbedTensorsAreTheLatentAndTheAbsorbedQuery) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const CaseSpec c = mla_case(seed, true);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const MlaSpec& m = *c.mla;
    const MlaGen g = mla_gen(c);
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      for (int k = 0; k < c.requests[r].kv_len; ++k) {
        const float* kr = pool_row(c, p, w.k_pool, r, k, 0, c.head_dim_qk);
        const float* vr = pool_row(c, p, w.v_pool, r, k, 0, c.head_dim_vo);
        for (int d = 0; d < m.latent_dim(); ++d)
          ASSERT_EQ(kr[d],
                    gen_value(c.request_seed(r), TensorId::kK, static_cast<uint64_t>(k) * m.latent_dim() + d, 0, 1, 1, c.dtype));
        for (int d = 0; d < m.kv_lora_rank; ++d) ASSERT_EQ(vr[d], kr[d]);
      }
      for (int t = 0; t < c.requests[r].q_len; ++t)
        for (int h = 0; h < c.num_qo_heads; ++h) {
          const float* q = w.q.data() + ((w.q_indptr[r] + t) * c.num_qo_heads + h) * c.head_dim_qk;
          auto qg = [&](int i) { return gen_value(c.request_seed(r), TensorId::kQ, q_index(c, r, t, h, i), 0, 1, 1, c.dtype); };
          for (int d = 0; d < m.kv_lora_rank; ++d) {
            double s = 0;
            for (int n = 0; n < m.qk_nope_dim; ++n) s += static_cast<double>(mla_weight(g, TensorId::kWuk, h, n, d)) * qg(n);
            ASSERT_TRUE(within_one_ulp(c.dtype, q[d], s)) << "seed " << seed << " q dim " << d << ": " << q[d] << " vs " << s;
          }
          for (int j = 0; j < m.rope_dim; ++j) ASSERT_EQ(q[m.kv_lora_rank + j], qg(m.qk_nope_dim + j));
        }
    }
  }
}

// Non-absorbed: per head K = [W_uk ckv ; kpe] (kpe shared by every head), V = W_uv ckv, Q the generator's.
TEST(Mla, NonAbsorbedKeysAndValuesAreTheUpProjectedLatent) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const CaseSpec c = mla_case(seed, false);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const MlaSpec& m = *c.mla;
    const MlaGen g = mla_gen(c);
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
      for (int k = 0; k < c.requests[r].kv_len; ++k) {
        std::vector<double> lat(m.latent_dim());
        for (int d = 0; d < m.latent_dim(); ++d)
          lat[d] = gen_value(c.request_seed(r), TensorId::kK, static_cast<uint64_t>(k) * m.latent_dim() + d, 0, 1, 1, c.dtype);
        for (int h = 0; h < c.num_qo_heads; ++h) {
          const float* kr = pool_row(c, p, w.k_pool, r, k, h, c.head_dim_qk);
          const float* vr = pool_row(c, p, w.v_pool, r, k, h, c.head_dim_vo);
          for (int n = 0; n < m.qk_nope_dim; ++n) {
            double s = 0;
            for (int d = 0; d < m.kv_lora_rank; ++d) s += mla_weight(g, TensorId::kWuk, h, n, d) * lat[d];
            ASSERT_TRUE(within_one_ulp(c.dtype, kr[n], s)) << "seed " << seed << " k dim " << n;
          }
          for (int j = 0; j < m.rope_dim; ++j) ASSERT_EQ(kr[m.qk_nope_dim + j], lat[m.kv_lora_rank + j]);
          for (int j = 0; j < m.v_head_dim; ++j) {
            double s = 0;
            for (int d = 0; d < m.kv_lora_rank; ++d) s += mla_weight(g, TensorId::kWuv, h, j, d) * lat[d];
            ASSERT_TRUE(within_one_ulp(c.dtype, vr[j], s)) << "seed " << seed << " v dim " << j << ": " << vr[j] << " vs " << s;
          }
        }
      }
  }
}

// One model, two forms: the absorbed reference's latent output through W_uv against the non-absorbed
// reference. They differ only by the roundings of the derived inputs (absorbed Q; non-absorbed K and V)
// to the dtype, an error of the same kind and size as a low-precision run's: bounded by twice cpu.lowp's
// error on the non-absorbed form (the 2x rule), plus a floor of 1e-3 for rows where lowp is exact.
TEST(Mla, BothFormsAgreeThroughTheOutputProjection) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const CaseSpec a = mla_case(seed, true, seed <= 2);
    const CaseSpec n = mla_other_form(a);
    validate_case(n);
    const Plan pa = make_plan(a), pn = make_plan(n);
    const Workload wa = make_workload(a, pa.pages), wn = make_workload(n, pn.pages);
    const Result ra = run("cpu.reference", a, pa, wa), rn = run("cpu.reference", n, pn, wn), ln = run("cpu.lowp", n, pn, wn);
    ASSERT_TRUE(ra.ok() && rn.ok() && ln.ok()) << ra.message << rn.message << ln.message;
    const std::vector<double> proj = mla_project_output(a, ra.o);
    ASSERT_EQ(proj.size(), rn.o.size());
    double err = 0, lowp = 0;
    for (size_t i = 0; i < proj.size(); ++i) {
      err = std::max(err, std::fabs(proj[i] - rn.o[i]));
      lowp = std::max(lowp, std::fabs(static_cast<double>(ln.o[i]) - rn.o[i]));
    }
    EXPECT_LE(err, 2 * lowp + 1e-3) << "seed " << seed << ": forms differ by " << err << ", lowp by " << lowp;
    EXPECT_GT(err, 0.0) << "the forms round different tensors; equal outputs mean one form was not derived";
    for (size_t i = 0; i < ra.lse.size(); ++i) {  // same logits up to the input roundings: LSE agrees closely
      if (std::isfinite(ra.lse[i])) {
        EXPECT_NEAR(ra.lse[i], rn.lse[i], 0.05) << "seed " << seed << " row " << i;
      }
    }
  }
}

// cpu.tiled (cuda.flash's twin) and cpu.lowp under the 2x rule against cpu.reference, both forms,
// split on and off, at the DeepSeek dims and at small ones.
TEST(Mla, CpuTiledPassesTheTwiceLowpRuleInBothForms) {
  for (uint64_t seed = 1; seed <= 16; ++seed)
    for (bool absorbed : {true, false}) {
      const CaseSpec c = mla_case(seed, absorbed, seed <= 3);
      const Plan p = make_plan(c);
      const Workload w = make_workload(c, p.pages);
      const Result ref = run("cpu.reference", c, p, w), low = run("cpu.lowp", c, p, w), til = run("cpu.tiled", c, p, w);
      ASSERT_TRUE(ref.ok() && low.ok() && til.ok()) << til.message;
      ComparisonSpec k{"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"};
      const DiffReport d = compare_results(c, til, ref, k, &low);
      EXPECT_TRUE(d.verdict.pass) << "seed " << seed << (absorbed ? " absorbed: " : " non-absorbed: ") << d.verdict.detail;
    }
}

TEST(Mla, DefaultScaleIsThePerHeadQkDimsInBothForms) {
  CaseSpec c = mla_case(1, true, true);
  EXPECT_DOUBLE_EQ(c.scale(), 1.0 / std::sqrt(192.0));
  EXPECT_DOUBLE_EQ(mla_other_form(c).scale(), 1.0 / std::sqrt(192.0));
  EXPECT_EQ(c.kv_bytes_per_token(2), 576 * 2);  // the latent row; V is its ckv part
  EXPECT_EQ(mla_other_form(c).kv_bytes_per_token(2), int64_t{c.num_qo_heads} * (192 + 128) * 2);
}

TEST(Mla, ValidationNamesThePathAndTheRule) {
  CaseSpec base = mla_case(3, true, true);
  base.num_qo_heads = 4;  // kv 2 divides it: the MLA rule, not GQA's, must answer
  auto expect = [](CaseSpec c, const std::string& path, const std::string& rule) {
    try {
      validate_case(c);
      ADD_FAILURE() << "accepted, expected " << path;
    } catch (const CaseError& e) {
      EXPECT_EQ(e.path(), path) << e.what();
      EXPECT_NE(std::string(e.what()).find(rule), std::string::npos) << e.what();
    }
  };
  CaseSpec c = base;
  c.num_kv_heads = 2;
  expect(c, "/heads/kv", "must be 1 (one latent head shared by every query head)");
  c = base;
  c.head_dim_qk = 192;
  expect(c, "/head_dim/qk", "must be 576 (kv_lora_rank + rope_dim)");
  c = mla_other_form(base);
  c.head_dim_vo = 512;
  expect(c, "/head_dim/vo", "must be 128 (v_head_dim)");
  c = base;
  c.mla->kv_lora_rank = 0;
  expect(c, "/mla/kv_lora_rank", "out of range");
  c = base;
  c.kv_cache.fp8 = Fp8Format::kE4M3;
  expect(c, "/kv_cache/dtype", "FP8 latent cache is not modelled");
  c = base;
  c.attention.sinks = SinksSpec{};
  expect(c, "/attention/sinks", "not with /mla");
}

TEST(Mla, JsonRoundTripAndDerivedHeadsAndDims) {
  const CaseSpec c = mla_case(5, false, true);
  const std::string text = case_to_text(c);
  EXPECT_EQ(parse_case_text(text).spec, c);
  const char* minimal = R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 9}], "heads": {"qo": 16},
    "mla": {"kv_lora_rank": 512, "rope_dim": 64}, "dtype": "bf16"})";
  const CaseSpec m = parse_case_text(minimal).spec;
  EXPECT_EQ(m.num_kv_heads, 1);
  EXPECT_EQ(m.head_dim_qk, 576);
  EXPECT_EQ(m.head_dim_vo, 512);
  try {
    parse_case_text(R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 9}], "heads": {"qo": 16},
      "mla": {"absorbed": false, "rank": 512}, "dtype": "bf16"})");
    ADD_FAILURE() << "an unknown /mla key was accepted";
  } catch (const CaseError& e) {
    EXPECT_EQ(e.path(), "/mla/rank");
  }
}

// A backend whose descriptor lacks the case's form is refused, naming the backends that run it.
TEST(Mla, RegistryRefusesBackendsWithoutTheForm) {
  const CaseSpec c = mla_case(2, true);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  BackendInfo info = *backend_info("cpu.tiled");
  info.mla = kMlaNonAbsorbed;
  auto b = make_backend("cpu.tiled");
  const Result r = run_backend(*b, c, p, w, RunOptions{}, &info);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message.find("cpu.tiled does not take MLA's absorbed form (/mla/absorbed true); cpu.reference, cpu.lowp"),
            std::string::npos)
      << r.message;
}

// The GUI's pair inspector reads single rows; they are the workload's rows bit for bit.
TEST(Mla, SingleRowsAreTheWorkloadsRows) {
  for (bool absorbed : {true, false}) {
    const CaseSpec c = mla_case(7, absorbed);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
      for (int h = 0; h < c.num_qo_heads; ++h) {
        const int t = c.requests[r].q_len - 1, k = c.requests[r].kv_len - 1, kvh = absorbed ? 0 : h;
        const float* q = w.q.data() + ((w.q_indptr[r] + t) * c.num_qo_heads + h) * c.head_dim_qk;
        EXPECT_EQ(mla_query_row(c, r, t, h), std::vector<float>(q, q + c.head_dim_qk)) << r << " " << h;
        const float* kr = pool_row(c, p, w.k_pool, r, k, kvh, c.head_dim_qk);
        EXPECT_EQ(mla_key_row(c, r, k, kvh), std::vector<float>(kr, kr + c.head_dim_qk)) << r << " " << h;
      }
  }
}
