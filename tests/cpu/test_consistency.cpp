// The decode-vs-prefill check (app/core/consistency.h, docs/conventions.md section 11): the derived
// cases, their data (Q rows, FP8 bytes and scales), the CPU references' bit identity on random cases,
// and the detection of a difference at exactly its first position.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <mutex>

#include "attnscope/fp8.h"
#include "attnscope/paging.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "attnscope/workload.h"
#include "case_gen.h"
#include "consistency.h"
#include "session.h"

namespace attnscope {
namespace {

CaseSpec small_case() {
  CaseSpec c;
  c.name = "small";
  c.requests = {{1, 20}, {3, 33}, {1, 50}};
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 32;
  c.dtype = DType::kBf16;
  c.kv_cache.page_size = 4;
  c.backends = {"cpu.reference", "cpu.lowp", "cpu.tiled"};
  c.comparisons = {ComparisonSpec{"cpu.tiled", "cpu.reference"}};
  c.sample_rows = 2;
  return c;
}

CaseSpec fp8_case(ScaleGranularity g, Fp8Format f = Fp8Format::kE4M3, bool fp8_attention = false) {
  CaseSpec c = small_case();
  c.kv_cache.fp8 = f;
  c.kv_cache.scales.granularity = g;
  if (fp8_attention) c.fp8_attention = Fp8AttentionSpec{};
  c.data.outlier_channels = {3};  // a large channel: a prefix's amax differs from the whole cache's
  c.data.outlier_scale = 8;
  return c;
}

TEST(Consistency, DerivedCasesHaveTheRightLengthsOffsetsAndSeeds) {
  CaseSpec c = small_case();
  c.requests[1].q_offset = 2;
  c.requests[2].seed = 99;
  const int n = 7;
  const ConsistencyCases d = consistency_cases(c, n);
  ASSERT_EQ(d.n, n);
  ASSERT_EQ(static_cast<int>(d.steps.size()), n);
  for (const CaseSpec* s : {&d.prefill, &d.steps[0]}) {
    EXPECT_TRUE(s->comparisons.empty());
    EXPECT_FALSE(s->sample_rows.has_value());
    EXPECT_EQ(s->attention, c.attention);
    EXPECT_EQ(s->split, c.split);
    EXPECT_EQ(s->kv_cache, c.kv_cache);
    EXPECT_EQ(s->backends, c.backends);
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(d.prefill.requests[r].q_len, n);
    EXPECT_EQ(d.prefill.requests[r].kv_len, c.requests[r].kv_len);
    EXPECT_EQ(d.prefill.requests[r].q_offset, c.requests[r].q_offset);
    EXPECT_EQ(d.prefill.requests[r].seed, c.request_seed(r));
    for (int i = 0; i < n; ++i) {
      const RequestSpec& q = d.steps[i].requests[r];
      EXPECT_EQ(q.q_len, 1);
      EXPECT_EQ(q.kv_len, c.requests[r].kv_len - n + 1 + i);
      EXPECT_EQ(q.q_offset, c.requests[r].q_offset + i);
      EXPECT_EQ(q.seed, c.request_seed(r));
    }
  }
  EXPECT_EQ(*d.prefill.requests[2].seed, 99u);
}

// Q row of step i is the prefill's query i, bit for bit (q_offset); with FP8 attention too (q_scale given).
TEST(Consistency, StepQueryIsThePrefillsQueryBitwise) {
  for (const CaseSpec& c : {small_case(), fp8_case(ScaleGranularity::kHead, Fp8Format::kE4M3, true)}) {
    SCOPED_TRACE(c.fp8_attention ? "fp8 attention" : "bf16");
    const int n = 6;
    const ConsistencyCases d = consistency_cases(c, n);
    const Workload wp = make_workload(d.prefill, make_page_table(d.prefill));
    const int Hq = c.num_qo_heads, D = c.head_dim_qk;
    for (int i = 0; i < n; ++i) {
      const Workload ws = make_workload(d.steps[i], make_page_table(d.steps[i]));
      EXPECT_EQ(f32_bits(ws.q_scale), f32_bits(wp.q_scale));
      for (int r = 0; r < 3; ++r)
        for (int h = 0; h < Hq; ++h)
          for (int x = 0; x < D; ++x)
            ASSERT_EQ(f32_bits(ws.q_row(r, h, d.steps[i])[x]), f32_bits(wp.q_row(r * n + i, h, d.prefill)[x]))
                << "step " << i << " request " << r << " head " << h << " dim " << x;
    }
  }
}

// FP8: amax scales of tensor / head granularity are the prefill's, given to every case; token scales
// stay computed (per key). Every step stores the same K/V bytes as the prefill for the same keys.
TEST(Consistency, Fp8ScalesAreThePrefillsAndTheBytesAreTheSame) {
  for (ScaleGranularity g : {ScaleGranularity::kTensor, ScaleGranularity::kHead, ScaleGranularity::kToken})
    for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
      SCOPED_TRACE(std::string(granularity_name(g)) + " " + fp8_name(f));
      const CaseSpec c = fp8_case(g, f, true);
      const int n = 9;
      const ConsistencyCases d = consistency_cases(c, n);
      const PageTable pp = make_page_table(d.prefill);
      const Workload wp = make_workload(d.prefill, pp);
      // the prefill with amax scales computes the same scales it was given
      CaseSpec amax = d.prefill;
      amax.kv_cache.scales = c.kv_cache.scales;
      amax.fp8_attention = c.fp8_attention;
      const Workload wa = make_workload(amax, pp);
      EXPECT_EQ(wa.k_scale, wp.k_scale);
      EXPECT_EQ(wa.v_scale, wp.v_scale);
      EXPECT_EQ(f32_bits(wa.q_scale), f32_bits(wp.q_scale));
      ASSERT_TRUE(d.prefill.fp8_attention && d.prefill.fp8_attention->q_scale);
      EXPECT_EQ(static_cast<float>(*d.prefill.fp8_attention->q_scale), wp.q_scale);
      if (g == ScaleGranularity::kToken) {
        EXPECT_TRUE(d.prefill.kv_cache.scales.k.empty());
      } else {
        ASSERT_EQ(d.prefill.kv_cache.scales.k.size(), wp.k_scale.size());
        for (size_t x = 0; x < wp.k_scale.size(); ++x)
          EXPECT_EQ(static_cast<float>(d.prefill.kv_cache.scales.k[x]), wp.k_scale[x]);
      }
      const int Hk = c.num_kv_heads, D = c.head_dim_qk, ps = pp.page_size;
      int scales_differ = 0;  // a step alone would compute other scales: the test would fail without giving them
      for (int i = 0; i < n; ++i) {
        const CaseSpec& s = d.steps[i];
        EXPECT_EQ(s.kv_cache.scales, d.prefill.kv_cache.scales);
        EXPECT_EQ(s.fp8_attention, d.prefill.fp8_attention);
        const PageTable sp = make_page_table(s);
        const Workload ws = make_workload(s, sp);
        CaseSpec alone = s;
        alone.kv_cache.scales = c.kv_cache.scales;
        alone.fp8_attention = c.fp8_attention;
        const Workload wl = make_workload(alone, sp);
        scales_differ += wl.k_scale != ws.k_scale || wl.v_scale != ws.v_scale || wl.q_scale != ws.q_scale;
        for (int r = 0; r < 3; ++r)
          for (int k = 0; k < s.requests[r].kv_len; ++k)
            for (int h = 0; h < Hk; ++h) {
              const int pg_s = sp.page_of(r, k), pg_p = pp.page_of(r, k);
              EXPECT_EQ(ws.k_scale[scale_index(g, pg_s, k % ps, h, ps, Hk)], wp.k_scale[scale_index(g, pg_p, k % ps, h, ps, Hk)]);
              EXPECT_EQ(ws.v_scale[scale_index(g, pg_s, k % ps, h, ps, Hk)], wp.v_scale[scale_index(g, pg_p, k % ps, h, ps, Hk)]);
              for (int x = 0; x < D; ++x) {
                const int64_t os = kv_offset(s.kv_cache.layout, pg_s, k % ps, h, x, ps, Hk, D);
                const int64_t op = kv_offset(s.kv_cache.layout, pg_p, k % ps, h, x, ps, Hk, D);
                ASSERT_EQ(f32_bits(ws.k_pool[os]), f32_bits(wp.k_pool[op])) << "step " << i << " r " << r << " key " << k;
                ASSERT_EQ(f32_bits(ws.v_pool[os]), f32_bits(wp.v_pool[op])) << "step " << i << " r " << r << " key " << k;
              }
            }
      }
      EXPECT_GT(scales_differ, 0) << "the steps' own amax scales would equal the prefill's: the test could not fail";
    }
}

// A random small case made fit for the check: causal, n within every request (and past no prefix).
CaseSpec random_consistency_case(uint64_t seed, int* n) {
  testing::GenLimits lim;
  lim.max_requests = 3;
  lim.max_kv = 90;
  lim.allow_fp32 = false;
  CaseSpec c = testing::random_case(seed, lim);
  c.attention.causal = true;
  c.attention.window.reset();
  if (!c.attention.local_chunk && !c.attention.prefix_lm && seed % 3 == 0) c.attention.window = 1 + static_cast<int>(seed % 40);
  SplitMix64 g(seed + 5);
  int m = INT_MAX;
  for (const auto& r : c.requests) m = std::min({m, r.kv_len, r.kv_len - r.prefix_len.value_or(0) + 1});
  *n = std::max(1, std::min({m, 10, static_cast<int>(g.range(1, 10))}));
  if (seed % 2 == 0) {  // FP8, every granularity and format
    c.kv_cache.fp8 = g.coin() ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
    c.kv_cache.scales.granularity = static_cast<ScaleGranularity>(g.range(0, 2));
    if (g.coin()) c.fp8_attention = Fp8AttentionSpec{};
  }
  c.backends = {"cpu.reference", "cpu.lowp"};
  validate_case(c);
  return c;
}

TEST(Consistency, CpuReferenceAndLowpAreBitIdenticalOnRandomCases) {
  int fp8 = 0, windows = 0, gqa = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    int n = 0;
    const CaseSpec c = random_consistency_case(seed, &n);
    SCOPED_TRACE("seed " + std::to_string(seed) + ", n " + std::to_string(n));
    fp8 += c.fp8_kv();
    windows += c.attention.window.has_value();
    gqa += c.group_size() > 1;
    const ConsistencyReport r = check_consistency(c, n);
    ASSERT_EQ(r.backends.size(), 2u);
    for (const auto& b : r.backends) {
      EXPECT_TRUE(b.promises_bits) << b.backend;
      EXPECT_EQ(b.verdict, ConsistencyVerdict::kBitIdentical) << b.backend << ": " << b.verdict_text();
      EXPECT_EQ(b.identical_rows(), b.rows_per_position * n);
      EXPECT_EQ(b.max_diff, 0.0);
    }
    EXPECT_EQ(r.exit_code(), 0);
  }
  EXPECT_GE(fp8, 6);
  EXPECT_GE(windows, 3);
  EXPECT_GE(gqa, 6);
}

// A backend that moves O from decode step p on, by head 1 only: reported from exactly p.
ConsistencyRunFn shifted_from(const std::string& id, int p) {
  return [id, p](const std::string& b, int step, const CaseSpec& c, const Plan& pl, const Workload& w, const RunOptions& ro) {
    Result r = run_one(b == "test.shifted" ? "cpu.reference" : b, c, pl, w, ro);
    r.backend = b;
    if (b == id && step >= p)
      for (int64_t t = 0; t < c.total_q(); ++t) {
        float& x = r.o[(t * c.num_qo_heads + 1) * c.head_dim_vo + 2];
        x = round_to(c.dtype, x + 0.25f);
      }
    return r;
  };
}

TEST(Consistency, ReportsExactlyTheFirstDifferingPosition) {
  const CaseSpec c = fp8_case(ScaleGranularity::kTensor);
  for (int p : {0, 3, 11}) {
    SCOPED_TRACE(p);
    ConsistencyOptions opt;
    opt.backends = {"cpu.reference", "test.shifted"};
    opt.run = shifted_from("test.shifted", p);
    const ConsistencyReport r = check_consistency(c, 12, opt);
    const BackendConsistency& ref = r.backends[0];
    const BackendConsistency& b = r.backends[1];
    EXPECT_EQ(ref.verdict, ConsistencyVerdict::kBitIdentical);
    EXPECT_FALSE(b.promises_bits);
    EXPECT_EQ(b.verdict, ConsistencyVerdict::kDiffers);
    EXPECT_EQ(b.first_diff, p);
    EXPECT_EQ(b.first_request, 0);
    EXPECT_EQ(b.first_key, c.requests[0].kv_len - 12 + p);
    for (int i = 0; i < 12; ++i) {
      EXPECT_EQ(b.max_abs[i] > 0, i >= p) << i;
      EXPECT_EQ(b.rows_identical[i], i >= p ? b.rows_per_position - 3 : b.rows_per_position) << i;  // head 1 of 3 requests
    }
    EXPECT_NE(b.verdict_text().find("differs from position " + std::to_string(p)), std::string::npos) << b.verdict_text();
    EXPECT_EQ(r.exit_code(), 0);  // a backend that promises nothing: reported, not failed
  }
  // the same on a backend that promises bit identity: FAILED, exit 1
  ConsistencyOptions opt;
  opt.backends = {"cpu.lowp"};
  opt.run = shifted_from("cpu.lowp", 5);
  const ConsistencyReport r = check_consistency(c, 12, opt);
  EXPECT_EQ(r.backends[0].verdict, ConsistencyVerdict::kFailed);
  EXPECT_EQ(r.backends[0].first_diff, 5);
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(r.summary_line().rfind("FAILED", 0), 0u) << r.summary_line();
}

// The vLLM #54035 picture: a decode path that leaves the prefill path once its cache holds key 97.
// Requests whose last N keys span 97 show 97; the others differ from their first position.
TEST(Consistency, APathThatLeavesFromKey97ShowsKey97InEveryRequestThatReachesIt) {
  CaseSpec c = fp8_case(ScaleGranularity::kTensor);
  c.requests = {{1, 130}, {1, 187}, {1, 251}, {1, 300}};
  ConsistencyOptions opt;
  opt.backends = {"test.key97"};
  opt.run = [](const std::string&, int step, const CaseSpec& cs, const Plan& p, const Workload& w, const RunOptions& ro) {
    Result r = run_one("cpu.reference", cs, p, w, ro);
    r.backend = "test.key97";
    const int64_t row = static_cast<int64_t>(cs.num_qo_heads) * cs.head_dim_vo;
    if (step >= 0)  // a decode step: its request's one query sees keys 0 .. kv_len - 1
      for (int q = 0; q < static_cast<int>(cs.requests.size()); ++q)
        if (cs.requests[q].kv_len >= 98) r.o[q * row + 7] = round_to(cs.dtype, r.o[q * row + 7] * 1.5f + 0.01f);
    return r;
  };
  const BackendConsistency b = check_consistency(c, 128, opt).backends[0];
  EXPECT_EQ(b.first_key_by_request, (std::vector<int>{97, 97, 123, 172}));
  EXPECT_EQ(b.first_diff, 0);
  EXPECT_EQ(b.rows_identical[94], b.rows_per_position - 3);  // request 0 still agrees at key 96
  EXPECT_EQ(b.rows_identical[95], b.rows_per_position - 4);
  EXPECT_NE(b.verdict_text().find("first differing key per request: 97, 97, 123, 172"), std::string::npos) << b.verdict_text();
}

// cpu.tiled under FlashInfer's planner: the prefill (q_len n) gets another query tile and KV chunk
// than a decode step, so its partials merge differently and its bits differ.
TEST(Consistency, CpuTiledDiffersWhereThePlannerSplitsDifferently) {
  CaseSpec c;
  c.name = "tiled";
  c.requests = {{1, 700}, {1, 900}};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 64;
  c.dtype = DType::kBf16;
  c.split.num_sms = 16;
  c.backends = {"cpu.tiled"};
  const ConsistencyCases d = consistency_cases(c, 40);
  const Plan pp = plan_case(d.prefill), ps = plan_case(d.steps[0]);
  ASSERT_NE(pp.split.chunk_pages, ps.split.chunk_pages) << "the planner splits alike: the case shows nothing";
  const ConsistencyReport r = check_consistency(c, 40);
  const BackendConsistency& b = r.backends[0];
  EXPECT_EQ(b.verdict, ConsistencyVerdict::kDiffers) << b.verdict_text();
  EXPECT_GE(b.first_diff, 0);
  EXPECT_GT(b.max_diff, 0);
  EXPECT_EQ(r.exit_code(), 0);
}

// "P>D": the prefill on one backend, the decode steps on another (an engine's prefill and decode
// kernels). Two that round differently differ, and the pair promises nothing even when both do.
TEST(Consistency, APairRunsThePrefillOnOneBackendAndTheStepsOnAnother) {
  CaseSpec c;
  c.name = "pair";
  c.requests = {{1, 90}, {1, 120}};
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 64;
  c.dtype = DType::kBf16;
  ConsistencyOptions opt;
  opt.backends = {"cpu.reference>cpu.lowp", "cpu.reference>cpu.reference"};
  std::vector<std::pair<int, std::string>> ran;  // (step, backend) as the report asked for them
  opt.run = [&](const std::string& id, int step, const CaseSpec& cs, const Plan& p, const Workload& w, const RunOptions& ro) {
    ran.emplace_back(step, id);
    return run_one(id, cs, p, w, ro);
  };
  const ConsistencyReport r = check_consistency(c, 6, opt);
  ASSERT_EQ(r.backends.size(), 2u);
  EXPECT_EQ(r.backends[0].backend, "cpu.reference>cpu.lowp");
  EXPECT_FALSE(r.backends[0].promises_bits);
  EXPECT_EQ(r.backends[0].verdict, ConsistencyVerdict::kDiffers) << r.backends[0].verdict_text();
  EXPECT_GT(r.backends[0].max_diff, 0);
  EXPECT_EQ(r.backends[1].verdict, ConsistencyVerdict::kBitIdentical) << r.backends[1].verdict_text();
  EXPECT_TRUE(r.backends[1].promises_bits);
  int pre_ref = 0, step_lowp = 0, pre_lowp = 0;
  for (const auto& [step, id] : ran) {
    pre_ref += step < 0 && id == "cpu.reference";
    pre_lowp += step < 0 && id == "cpu.lowp";
    step_lowp += step >= 0 && id == "cpu.lowp";
  }
  EXPECT_EQ(pre_ref, 2);
  EXPECT_EQ(pre_lowp, 0);
  EXPECT_EQ(step_lowp, 6);
  EXPECT_EQ(consistency_pair("a>b"), (std::pair<std::string, std::string>{"a", "b"}));
  EXPECT_EQ(consistency_pair("a"), (std::pair<std::string, std::string>{"a", "a"}));
}

TEST(Consistency, NanIsAMismatchNeverANumber) {
  const CaseSpec c = small_case();
  ConsistencyOptions opt;
  opt.backends = {"test.nan"};
  opt.run = [](const std::string&, int step, const CaseSpec& cs, const Plan& p, const Workload& w, const RunOptions& ro) {
    Result r = run_one("cpu.reference", cs, p, w, ro);
    r.backend = "test.nan";
    if (step == 2) r.o[0] = NAN;                                      // request 0, head 0, dim 0 of step 2
    if (step == -1) r.o[5 * cs.num_qo_heads * cs.head_dim_vo] = NAN;  // request 0's query 5 in the prefill (and step 5)
    if (step == 5) r.o[0] = NAN;
    return r;
  };
  const BackendConsistency b = check_consistency(c, 8, opt).backends[0];
  EXPECT_EQ(b.first_diff, 2);
  EXPECT_EQ(b.nonfinite[2], 1);
  EXPECT_EQ(b.nonfinite[5], 1) << "NaN against NaN is a mismatch, as in compare.h";
  EXPECT_EQ(b.max_abs[2], 0.0);
  EXPECT_EQ(b.nonfinite_total(), 2);
  EXPECT_NE(b.verdict_text().find("2 NaN/Inf mismatches"), std::string::npos) << b.verdict_text();
}

TEST(Consistency, ABackendNotRunReportsItsStatusNeverANumber) {
  CaseSpec c = fp8_case(ScaleGranularity::kTensor);
  ConsistencyOptions opt;
  opt.backends = {"cpu.reference", "cpu.tiled"};  // cpu.tiled: does it take FP8? either way no number without a run
  opt.run = [](const std::string& id, int step, const CaseSpec& cs, const Plan& p, const Workload& w, const RunOptions& ro) {
    Result r = run_one(id, cs, p, w, ro);
    if (id == "cpu.tiled" && step == 4) {
      r.status = Status::kError;
      r.message = "device fault";
      r.o.clear();
    }
    return r;
  };
  const ConsistencyReport r = check_consistency(c, 8, opt);
  const BackendConsistency& b = r.backends[1];
  EXPECT_EQ(b.verdict, ConsistencyVerdict::kNotRun);
  EXPECT_TRUE(b.max_abs.empty());
  EXPECT_EQ(b.first_diff, -1);
  if (b.status == Status::kError) {
    EXPECT_EQ(b.run, "decode step 4");
    EXPECT_NE(b.verdict_text().find("device fault"), std::string::npos);
    EXPECT_EQ(r.exit_code(), 1);
  } else {  // refused FP8 in the prefill already
    EXPECT_EQ(b.run, "prefill");
    EXPECT_EQ(r.exit_code(), 3);
  }
}

TEST(Consistency, CancelStopsAndSaysSo) {
  const CaseSpec c = small_case();
  std::atomic<bool> cancel{false};
  ConsistencyOptions opt;
  opt.backends = {"cpu.reference"};
  opt.cancel = &cancel;
  std::vector<double> seen;
  std::mutex mu;  // backends report progress from their threads
  opt.progress = [&](const std::string& stage, double x) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(x);
    if (stage.find("decode step 3 ") != std::string::npos) cancel = true;
  };
  const ConsistencyReport r = check_consistency(c, 10, opt);
  EXPECT_TRUE(r.cancelled);
  EXPECT_EQ(r.backends[0].verdict, ConsistencyVerdict::kNotRun);
  EXPECT_EQ(r.backends[0].status, Status::kCancelled);
  EXPECT_EQ(r.exit_code(), 3);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 1.0);
  EXPECT_LT(*std::max_element(seen.begin(), seen.end() - 1), 0.6) << "steps after the cancel were run";
}

void expect_refused(const CaseSpec& c, int n, const std::string& path, const std::string& words) {
  try {
    consistency_cases(c, n);
    ADD_FAILURE() << "accepted; wanted " << path;
  } catch (const CaseError& e) {
    EXPECT_EQ(e.path(), path) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Consistency, RefusesWhatCannotBeCompared) {
  const CaseSpec c = small_case();
  expect_refused(c, 0, "--last", "must be >= 1");
  expect_refused(c, -3, "--last", "must be >= 1");
  expect_refused(c, 21, "--last", "request 0's kv_len 20");
  EXPECT_NO_THROW(consistency_cases(c, 20));
  CaseSpec nc = c;
  nc.attention.causal = false;
  expect_refused(nc, 4, "/attention/causal", "needs a causal mask");
  nc.attention.window = 3;  // a window bounds keys from below only
  expect_refused(nc, 4, "/attention/causal", "needs a causal mask");
  CaseSpec mm = c;  // the mask of an expression alone: the same keys as causal, accepted
  mm.attention.causal = false;
  mm.attention.mask_mod = "kv_idx <= q_idx";
  EXPECT_NO_THROW(consistency_cases(mm, 4));
  mm.attention.causal = true;  // reads the lengths: the prefill's queries see more than their steps
  mm.attention.mask_mod = "kv_idx >= kv_len - q_len";
  expect_refused(mm, 4, "/attention/mask_mod", "query 1 of the last 4");
  CaseSpec sm = c;
  sm.attention.score_mod = "score + kv_len * 0.001";
  expect_refused(sm, 4, "/attention/score_mod", "q_len or kv_len");
  CaseSpec pl = c;
  pl.attention.prefix_lm = true;
  pl.requests[1].prefix_len = 30;
  for (auto& r : pl.requests) r.prefix_len = r.prefix_len.value_or(0);
  expect_refused(pl, 5, "/requests/1/prefix_len", "use --last <= 4");
  EXPECT_NO_THROW(consistency_cases(pl, 4));
  CaseSpec big = c;  // a mask_mod the case can afford at q_len 1 but not as a prefill of N queries
  big.requests = {{1, 20000}};
  big.attention.mask_mod = "kv_idx <= q_idx";
  expect_refused(big, 16384, "--last", "the prefill of the last 16384 tokens is not a valid case (/attention/mask_mod");
}

// Documents and padding are cut to each step's cache and keep what its query sees.
TEST(Consistency, DocumentsAndPaddingKeepTheirMeaning) {
  CaseSpec c = small_case();
  c.requests[2].doc_starts = {0, 30, 46, 48};
  c.requests[1].pad_start = 31;
  const ConsistencyCases d = consistency_cases(c, 8);
  EXPECT_EQ(d.steps[0].requests[2].doc_starts, (std::vector<int>{0, 30}));  // kv_len 43
  EXPECT_EQ(d.steps[7].requests[2].doc_starts, (std::vector<int>{0, 30, 46, 48}));
  EXPECT_EQ(d.steps[0].requests[1].pad_start, std::nullopt);  // kv_len 26
  EXPECT_EQ(d.steps[7].requests[1].pad_start, 31);            // kv_len 33
  const ConsistencyReport r = check_consistency(c, 8);
  for (const auto& b : r.backends)
    if (b.promises_bits) {
      EXPECT_EQ(b.verdict, ConsistencyVerdict::kBitIdentical) << b.backend << ": " << b.verdict_text();
    }
}

}  // namespace
}  // namespace attnscope
