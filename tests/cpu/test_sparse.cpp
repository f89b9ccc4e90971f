// DeepSeek Sparse Attention (/sparse, model/include/attnscope/sparse.h) on the CPU: the indexer, its FP8
// quantisation, top-k ties, NaN and padding, slot translation on values written by hand; the references
// against an fp64 computation over the kept tokens done here; cpu.tiled and cpu.lowp under the 2x rule;
// given indices against the indexer's own; the case rules and the registry's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "attnscope/compare.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "attnscope/sparse.h"
#include "case_json.h"
#include "mla_case_gen.h"
#include "stage_cache.h"

using namespace attnscope;

namespace {

Result run(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w) {
  auto b = make_backend(id);
  return run_backend(*b, c, p, w, RunOptions{});
}

// A seeded MLA case with /sparse: small top_k and lengths so that some rows keep every visible token
// (padding) and others only top_k of them; both scorings, both MLA forms.
CaseSpec sparse_case(uint64_t seed, bool absorbed) {
  CaseSpec c = attnscope::testing::mla_case(seed, absorbed);
  SplitMix64 g(seed * 31 + 7);
  SparseSpec s;
  const int ks[] = {1, 4, 16, 48};
  s.top_k = ks[g.range(0, 3)];
  s.index_heads = g.range(1, 8);
  const int dims[] = {8, 16, 64, 128};
  s.index_head_dim = dims[g.range(0, 3)];
  s.scoring = g.coin() ? SparseScoring::kFp8 : SparseScoring::kFp64;
  c.sparse = s;
  validate_case(c);
  return c;
}

const float* pool_row(const CaseSpec& c, const Plan& p, const std::vector<float>& pool, int r, int k, int h, int dim) {
  return pool.data() +
         kv_offset(c.kv_cache.layout, p.pages.page_of(r, k), k % p.pages.page_size, h, 0, p.pages.page_size, c.num_kv_heads, dim);
}

void expect_refused(const CaseSpec& c, const std::string& path, const std::string& rule) {
  try {
    validate_case(c);
    ADD_FAILURE() << "accepted, expected " << path;
  } catch (const CaseError& e) {
    EXPECT_EQ(e.path(), path) << e.what();
    EXPECT_NE(std::string(e.what()).find(rule), std::string::npos) << e.what();
  }
}

}  // namespace

// 2 heads, dim 2, 3 keys. fp64: I[s] = sum_j w_j / sqrt(2) / sqrt(2) * ReLU(q_j . k_s):
// head 0 dots 1, 2, -3 (ReLU 1, 2, 0), head 1 dots -1, 0.5, 0.5 (ReLU 0, 0.5, 0.5); w = 0.5, -2.
TEST(Sparse, IndexerScoresOnValuesWrittenByHand) {
  IndexerInputs in;
  in.heads = 2;
  in.dim = 2;
  in.q_len = 1;
  in.kv_len = 3;
  in.q = {1, 2, -1, 0.5f};
  in.w = {0.5f, -2};
  in.k = {1, 0, 0, 1, -1, -1};
  double s[3];
  indexer_scores_fp64(in, 0, 3, s);
  EXPECT_DOUBLE_EQ(s[0], 0.25);  // 0.5 x (0.5 x 1)
  EXPECT_DOUBLE_EQ(s[1], 0.0);   // 0.5 x (0.5 x 2 - 2 x 0.5)
  EXPECT_DOUBLE_EQ(s[2], -0.5);  // 0.5 x (-2 x 0.5)
  // FP8: every value is a power of two times 1 or 2, so q8 / k8 are exact: q_s = 2^-7 (head 0, amax 2) and
  // 2^-8 (head 1), k_s = 2^-8. The weights are bf16(w / sqrt(2)) (0.353515625 and -1.4140625) times q_s
  // times fp32(1 / sqrt(2)); the dots are 128 x 256 etc., so the scores are those weights' multiples.
  const IndexerFp8 f = quantize_indexer(in);
  EXPECT_EQ(f.q_scale, (std::vector<float>{0.0078125f, 0.00390625f}));
  EXPECT_EQ(f.k_scale, (std::vector<float>{0.00390625f, 0.00390625f, 0.00390625f}));
  EXPECT_EQ(f.q8, (std::vector<float>{128, 256, -256, 128}));
  indexer_scores_fp8(in, f, 0, 3, s);
  const float r2 = static_cast<float>(1 / std::sqrt(2.0));
  EXPECT_FLOAT_EQ(static_cast<float>(s[0]), 0.353515625f * r2);  // 2^-8 x 32768 x w0' = 128 x w0'
  EXPECT_EQ(s[1], 0.0);                                          // 256 w0' + 128 w1' = 0 exactly
  EXPECT_FLOAT_EQ(static_cast<float>(s[2]), -0.70703125f * r2);  // 128 x w1'
  // the quantisation error is the bf16 rounding of the weights only here
  EXPECT_NEAR(s[0], 0.25, 1e-3);
  EXPECT_NEAR(s[2], -0.5, 1e-3);
}

// e4m3 with a power-of-two scale: amax 500 -> 500 / 448 -> scale 2; 3 / 2 = 1.5 (exact), -0.05 rounds to
// -0.05078125 (1.625 x 2^-5), 250 to 256 (1.875 x 2^7 = 240 is further); an all-zero row takes amax 1e-4.
TEST(Sparse, QuantisationBlockByHand) {
  const float x[3] = {3.0f, -0.1f, 500.0f};
  float q8[3];
  EXPECT_EQ(quantize_block_e4m3(x, 3, q8), 2.0f);
  EXPECT_EQ(q8[0], 1.5f);
  EXPECT_EQ(q8[1], -0.05078125f);
  EXPECT_EQ(q8[2], 256.0f);
  const float z[2] = {0, 0};
  EXPECT_EQ(quantize_block_e4m3(z, 2, q8), std::ldexp(1.0f, -22));  // 1e-4 / 448 = 2^-22.09, rounded up
  EXPECT_EQ(q8[0], 0.0f);
}

TEST(Sparse, TopKTiesNanAndPadding) {
  int out[5];
  const double tied[5] = {1, 3, 3, 2, 3};
  EXPECT_EQ(select_top_k(tied, 5, 3, out), 0);
  EXPECT_EQ(std::vector<int>(out, out + 3), (std::vector<int>{1, 2, 4}));  // equal scores: lower index first
  select_top_k(tied, 5, 4, out);
  EXPECT_EQ(std::vector<int>(out, out + 4), (std::vector<int>{1, 2, 4, 3}));
  const double nan = std::nan("");
  const double with_nan[4] = {nan, 2, nan, 1};
  EXPECT_EQ(select_top_k(with_nan, 4, 3, out), 2);  // two NaN, counted and never selected
  EXPECT_EQ(std::vector<int>(out, out + 3), (std::vector<int>{1, 3, -1}));
  const double few[2] = {-INFINITY, 0.5};  // fewer candidates than top_k: all kept, -1 after them
  select_top_k(few, 2, 5, out);
  EXPECT_EQ(std::vector<int>(out, out + 5), (std::vector<int>{1, 0, -1, -1, -1}));
}

TEST(Sparse, SlotTranslationByHand) {
  const int pages[3] = {7, 3, 9};  // a request's page-table row, page size 4
  EXPECT_EQ(sparse_slot(pages, 4, 0), 28);
  EXPECT_EQ(sparse_slot(pages, 4, 5), 13);  // page 1 -> physical 3, offset 1
  EXPECT_EQ(sparse_slot(pages, 4, 11), 39);
  EXPECT_EQ(sparse_slot(pages, 4, -1), -1);
  // on a shuffled pool the table is the page table's own lookup
  const CaseSpec c = sparse_case(4, true);
  const Plan p = make_plan(c);
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    const SparseSelection& s = (*p.sparse)[r];
    const std::vector<int64_t> slots = sparse_slots(s, p.pages, r);
    for (size_t i = 0; i < s.idx.size(); ++i)
      EXPECT_EQ(slots[i], s.idx[i] < 0 ? -1
                                       : static_cast<int64_t>(p.pages.page_of(r, s.idx[i])) * p.pages.page_size +
                                             s.idx[i] % p.pages.page_size);
  }
}

// The plan's selection: rows with fewer visible tokens than top_k keep them all and pad with -1; the
// others keep exactly top_k, all causally visible, each once; the mask bits are exactly the kept tokens.
TEST(Sparse, SelectionPaddingAndMaskBits) {
  int padded = 0, full = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    const CaseSpec c = sparse_case(seed, seed % 2 == 0);
    const Plan p = make_plan(c);
    ASSERT_TRUE(p.sparse && p.mask_store);
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      const SparseSelection& s = (*p.sparse)[r];
      const RowMask& m = p.masks[r];
      for (int q = 0; q < s.q_len; ++q) {
        const int qa = q_abs_of(m, q), visible = qa + 1;
        EXPECT_EQ(s.kept(q), std::min(visible, s.top_k)) << seed;
        EXPECT_EQ(s.padding(q), std::max(0, s.top_k - visible)) << seed;
        padded += s.padding(q) > 0;
        full += s.padding(q) == 0;
        std::set<int> kept;
        for (int i = 0; i < s.top_k; ++i)
          if (s.row(q)[i] >= 0) {
            EXPECT_LE(s.row(q)[i], qa);
            kept.insert(s.row(q)[i]);
          } else {
            for (int j = i; j < s.top_k; ++j) EXPECT_EQ(s.row(q)[j], -1) << "-1 only after the kept tokens";
            break;
          }
        EXPECT_EQ(static_cast<int>(kept.size()), s.kept(q)) << "each kept token once";
        for (int k = 0; k < c.requests[r].kv_len; ++k) EXPECT_EQ(allowed(m, qa, k), kept.count(k) > 0) << seed << " " << k;
      }
    }
  }
  EXPECT_GT(padded, 5);
  EXPECT_GT(full, 5);
}

// cpu.reference over the plan's mask against an fp64 softmax over exactly the kept tokens, computed here
// from the workload's Q and K / V rows; and unlike the dense reference where a row drops tokens.
TEST(Sparse, ReferenceIsDenseAttentionOverTheKeptTokens) {
  int dropped_rows = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const CaseSpec c = sparse_case(seed, seed % 3 != 0);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result ref = run("cpu.reference", c, p, w);
    ASSERT_TRUE(ref.ok()) << ref.message;
    CaseSpec dense = c;
    dense.sparse.reset();
    const Plan pd = make_plan(dense);
    const Result dref = run("cpu.reference", dense, pd, make_workload(dense, pd.pages));
    const int Hq = c.num_qo_heads, G = c.group_size(), Dq = c.head_dim_qk, Dv = c.head_dim_vo;
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      const SparseSelection& s = (*p.sparse)[r];
      for (int q = 0; q < s.q_len; ++q) {
        const int64_t t = w.q_indptr[r] + q;
        for (int h = 0; h < Hq; ++h) {
          std::vector<double> x, o(Dv, 0.0);
          double mx = -INFINITY;
          for (int i = 0; i < s.kept(q); ++i) {
            const float* kr = pool_row(c, p, w.k_pool, r, s.row(q)[i], h / G, Dq);
            double dot = 0;
            for (int d = 0; d < Dq; ++d) dot += static_cast<double>(w.q_row(t, h, c)[d]) * kr[d];
            x.push_back(dot * c.scale());
            mx = std::max(mx, x.back());
          }
          double den = 0;
          for (int i = 0; i < s.kept(q); ++i) {
            const double e = std::exp(x[i] - mx);
            den += e;
            const float* vr = pool_row(c, p, w.v_pool, r, s.row(q)[i], h / G, Dv);
            for (int d = 0; d < Dv; ++d) o[d] += e * vr[d];
          }
          const size_t row = static_cast<size_t>(t) * Hq + h;
          EXPECT_NEAR(ref.lse[row], mx + std::log(den), 1e-5 * std::max(1.0, std::fabs(mx))) << seed;
          double diff_dense = 0;
          for (int d = 0; d < Dv; ++d) {
            EXPECT_NEAR(ref.o[row * Dv + d], o[d] / den, 1e-6 * std::max(1.0, std::fabs(o[d] / den))) << seed;
            diff_dense = std::max(diff_dense, std::fabs(static_cast<double>(ref.o[row * Dv + d]) - dref.o[row * Dv + d]));
          }
          if (s.kept(q) < q_abs_of(p.masks[r], q) + 1 && h == 0) {
            ++dropped_rows;
            EXPECT_GT(diff_dense, 0.0) << "a row that drops tokens must differ from dense attention";
          }
        }
      }
    }
  }
  EXPECT_GT(dropped_rows, 5);
}

// cpu.tiled (cuda.flash's twin) and cpu.lowp under the 2x rule against cpu.reference, both forms.
TEST(Sparse, CpuTiledPassesTheTwiceLowpRule) {
  for (uint64_t seed = 1; seed <= 16; ++seed)
    for (bool absorbed : {true, false}) {
      const CaseSpec c = sparse_case(seed, absorbed);
      const Plan p = make_plan(c);
      const Workload w = make_workload(c, p.pages);
      const Result ref = run("cpu.reference", c, p, w), low = run("cpu.lowp", c, p, w), til = run("cpu.tiled", c, p, w);
      ASSERT_TRUE(ref.ok() && low.ok() && til.ok()) << til.message << low.message;
      ComparisonSpec k{"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"};
      const DiffReport d = compare_results(c, til, ref, k, &low);
      EXPECT_TRUE(d.verdict.pass) << "seed " << seed << ": " << d.verdict.detail;
      EXPECT_EQ(d.o.nan_a, 0);
    }
}

// The indexer's own selection given back as /sparse/indices (trimmed of its -1 padding, as an engine may
// write shorter rows) makes the same mask and the same bits on every CPU backend.
TEST(Sparse, GivenIndicesEqualTheIndexersSelection) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const CaseSpec c = sparse_case(seed, true);
    const Plan p = make_plan(c);
    CaseSpec g = c;
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      const SparseSelection& s = (*p.sparse)[r];
      g.sparse->indices.emplace_back();
      for (int q = 0; q < s.q_len; ++q) g.sparse->indices.back().emplace_back(s.row(q), s.row(q) + s.kept(q));
    }
    validate_case(g);
    EXPECT_EQ(parse_case_text(case_to_text(g)).spec, g);
    const Plan pg = make_plan(g);
    ASSERT_TRUE((*pg.sparse)[0].given);
    for (size_t r = 0; r < c.requests.size(); ++r) {
      EXPECT_EQ((*pg.sparse)[r].idx, (*p.sparse)[r].idx);
      EXPECT_EQ((*pg.mask_store)[r].bits, (*p.mask_store)[r].bits);
    }
    const Workload w = make_workload(c, p.pages);
    for (const char* id : {"cpu.reference", "cpu.lowp", "cpu.tiled"}) {
      const Result a = run(id, c, p, w), b = run(id, g, pg, w);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(a.o, b.o) << id;
      EXPECT_EQ(a.lse, b.lse) << id;
    }
  }
}

// The FP8 indexer against its fp64 twin on the same inputs: the same kept counts, and a selection that
// differs in a minority of the tokens (quantisation moves scores near the cut); identical rows count 0.
TEST(Sparse, Fp8AgainstFp64Indexer) {
  int64_t kept = 0, differ = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    CaseSpec c = sparse_case(seed, true);
    c.sparse->index_head_dim = 128;
    for (auto& r : c.requests) r.kv_len = std::max(r.kv_len, 60);
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      const SparseSelection a = indexer_selection(c, r, SparseScoring::kFp8), b = indexer_selection(c, r, SparseScoring::kFp64);
      for (int q = 0; q < a.q_len; ++q) {
        EXPECT_EQ(a.kept(q), b.kept(q));
        EXPECT_EQ(selection_differs(a.row(q), a.row(q), a.top_k), 0);
        const int n = selection_differs(a.row(q), b.row(q), a.top_k);
        EXPECT_EQ(n, selection_differs(b.row(q), a.row(q), a.top_k)) << "as many leave as enter";
        kept += a.kept(q);
        differ += n;
      }
    }
  }
  EXPECT_LT(differ * 5, kept) << differ << " of " << kept;
}

// Recall of mass: all visible tokens carry all the mass, none carry none, a selection and its complement
// add up to 1 per head.
TEST(Sparse, RecallOfMass) {
  const CaseSpec c = sparse_case(6, true);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    const SparseSelection& s = (*p.sparse)[r];
    for (int q = 0; q < s.q_len; ++q) {
      const int qa = q_abs_of(p.masks[r], q);
      std::vector<int> all(qa + 1), none = {-1}, rest;
      for (int k = 0; k <= qa; ++k) {
        all[k] = k;
        if (std::find(s.row(q), s.row(q) + s.top_k, k) == s.row(q) + s.top_k) rest.push_back(k);
      }
      const auto full = recall_of_mass(c, p.pages, w, r, q, all.data(), qa + 1);
      const auto zero = recall_of_mass(c, p.pages, w, r, q, none.data(), 1);
      const auto sel = recall_of_mass(c, p.pages, w, r, q, s.row(q), s.top_k);
      const auto comp = recall_of_mass(c, p.pages, w, r, q, rest.data(), static_cast<int>(rest.size()));
      for (int h = 0; h < c.num_qo_heads; ++h) {
        EXPECT_NEAR(full[h], 1.0, 1e-12);
        EXPECT_EQ(zero[h], 0.0);
        EXPECT_NEAR(sel[h] + comp[h], 1.0, 1e-12);
        EXPECT_GT(sel[h], 0.0);
      }
    }
  }
}

// The indexer's streams are their own: /sparse changes no input the backends read.
TEST(Sparse, InputsAreTheDenseCasesInputs) {
  const CaseSpec c = sparse_case(9, true);
  CaseSpec dense = c;
  dense.sparse.reset();
  const Plan p = make_plan(c), pd = make_plan(dense);
  const Workload a = make_workload(c, p.pages), b = make_workload(dense, pd.pages);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.k_pool.size(), b.k_pool.size());
  EXPECT_TRUE(std::equal(a.k_pool.begin(), a.k_pool.end(), b.k_pool.begin(),
                         [](float x, float y) { return f32_bits(x) == f32_bits(y); }));
  // so the live run's inputs stage is shared, and each backend's result is not (its key reads /sparse)
  EXPECT_EQ(inputs_key(c), inputs_key(dense));
  EXPECT_NE(backend_key(c, "cpu.reference", std::nullopt), backend_key(dense, "cpu.reference", std::nullopt));
  // and the indexer is deterministic
  EXPECT_EQ(indexer_selection(c, 0, SparseScoring::kFp8).idx, indexer_selection(c, 0, SparseScoring::kFp8).idx);
}

TEST(Sparse, RulesNameThePath) {
  CaseSpec base = sparse_case(3, true);
  base.requests = {RequestSpec{2, 5}, RequestSpec{1, 3}};
  base.sparse->top_k = 3;
  validate_case(base);
  CaseSpec c = base;
  c.mla.reset();
  c.num_kv_heads = 1;
  expect_refused(c, "/sparse", "needs /mla");
  c = base;
  c.sparse->top_k = 0;
  expect_refused(c, "/sparse/top_k", "out of range");
  c = base;
  c.sparse->index_head_dim = 256;
  c.sparse->scoring = SparseScoring::kFp8;
  expect_refused(c, "/sparse/index_head_dim", "one e4m3 quantisation block");
  c.sparse->scoring = SparseScoring::kFp64;
  validate_case(c);
  c = base;
  c.requests[0] = RequestSpec{64, 64};  // 65 queries x 2^20 entries: past the index buffer's 2^26
  c.sparse->top_k = static_cast<int>(kMaxSelectionEntries / 64);
  expect_refused(c, "/sparse/top_k", "makes an index buffer of 68157440 entries");
  c = base;
  c.sparse->index_heads = 64;
  c.sparse->index_head_dim = 128;
  c.requests = {RequestSpec{64, 4096}};  // 64 x 4096 x 64 x 128 = 2^31 multiply-adds: allowed
  validate_case(c);
  c.requests = {RequestSpec{1024, 4096}};  // 2^35: refused
  expect_refused(c, "/sparse", "the indexer would take 34359738368 multiply-adds");
  c = base;
  c.attention.window = 4;
  expect_refused(c, "/attention/window", "not with /sparse");
  c = base;
  c.attention.causal = false;
  expect_refused(c, "/attention/causal", "false with /sparse");
  c = base;
  c.requests[1].tree_parents = {-1};
  expect_refused(c, "/requests/1/tree_parents", "not with /sparse");
  // given indices: request 0 has queries at positions 3 and 4, request 1 one at position 2
  c = base;
  c.sparse->indices = {{{0, 3}, {4, 1, -1}}, {{2}}};
  validate_case(c);
  c.sparse->indices = {{{0, 3}, {4, 1}}};
  expect_refused(c, "/sparse/indices", "one per request (2)");
  c.sparse->indices = {{{0, 3}}, {{2}}};
  expect_refused(c, "/sparse/indices/0", "one per query token (q_len 2)");
  c.sparse->indices = {{{0, 3}, {4, 1, 2, 0}}, {{2}}};
  expect_refused(c, "/sparse/indices/0/1", "more than top_k 3");
  c.sparse->indices = {{{0, 5}, {4}}, {{2}}};
  expect_refused(c, "/sparse/indices/0/0/1", "out of range, must be -1 (padding) or a token index in [0, kv_len 5)");
  c.sparse->indices = {{{0, 4}, {4}}, {{2}}};
  expect_refused(c, "/sparse/indices/0/0/1", "not visible to query 0 (position 3)");
  c.sparse->indices = {{{0, -1, 2}, {4}}, {{2}}};
  expect_refused(c, "/sparse/indices/0/0/2", "follows a -1");
  c.sparse->indices = {{{0, 3}, {4, 0, 0}}, {{2}}};  // 0 where -1 belongs
  expect_refused(c, "/sparse/indices/0/1/2", "repeats entry 1 of this row");
  c.sparse->indices = {{{0, 3}, {4}}, {{-2}}};
  expect_refused(c, "/sparse/indices/1/0/0", "out of range");
}

TEST(Sparse, JsonDefaultsRoundTripAndErrors) {
  const char* text = R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 9}], "heads": {"qo": 4},
    "mla": {}, "sparse": {}, "dtype": "bf16"})";
  const CaseSpec c = parse_case_text(text).spec;
  ASSERT_TRUE(c.sparse);
  EXPECT_EQ(c.sparse->top_k, 2048);  // DeepSeek-V3.2's index_topk, index_n_heads, index_head_dim
  EXPECT_EQ(c.sparse->index_heads, 64);
  EXPECT_EQ(c.sparse->index_head_dim, 128);
  EXPECT_EQ(c.sparse->scoring, SparseScoring::kFp8);
  EXPECT_EQ(parse_case_text(case_to_text(c)).spec, c);
  auto path_of = [](const std::string& sparse) {
    try {
      parse_case_text(R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 9}], "heads": {"qo": 4},
        "mla": {}, "dtype": "bf16", "sparse": )" +
                      sparse + "}");
    } catch (const CaseError& e) {
      return e.path();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(path_of(R"({"topk": 4})"), "/sparse/topk");
  EXPECT_EQ(path_of(R"({"scoring": "fp16"})"), "/sparse/scoring");
  EXPECT_EQ(path_of(R"({"indices": [[[1, 2.5]]]})"), "/sparse/indices/0/0/1");
  EXPECT_EQ(path_of(R"({"indices": [[3]]})"), "/sparse/indices/0/0");
  EXPECT_EQ(path_of(R"({"top_k": 2, "indices": [[[8, 3]]]})"), "accepted");
}

// A backend that does not run the selection refuses the case naming /sparse and who runs it; only the CPU
// backends' descriptors take it (the GPU kernels would run the case without its mask bits), and the engines'
// DSA adapters, which run the engine's sparse kernel on its index buffer (worker_dsa.py).
TEST(Sparse, RegistryRefusesBackendsWithoutIt) {
  const CaseSpec c = sparse_case(2, true);
  for (const char* id : {"cpu.reference", "cpu.lowp", "cpu.tiled"}) EXPECT_EQ(refusal(id, c), "") << id;
  for (const auto& f : backend_families())
    for (const auto& b : f.backends)
      EXPECT_EQ(b.sparse != SparseRun::kNo, f.name == "cpu" || b.id == "python.sgl_dsa" || b.id == "python.vllm_dsa" ||
                                                b.id == "cuda.reference" || b.id == "cuda.naive" || b.id == "cuda.flash" ||
                                                b.id == "flashinfer.mla" || b.id == "flashinfer.mla_sm90")
          << b.id;
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  BackendInfo info = *backend_info("cpu.tiled");
  info.sparse = SparseRun::kNo;
  auto b = make_backend("cpu.tiled");
  const Result r = run_backend(*b, c, p, w, RunOptions{}, &info);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message.find("cpu.tiled does not take DeepSeek sparse attention (/sparse"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("cpu.reference, cpu.lowp, cpu.tiled, cuda.reference, cuda.naive, cuda.flash, flashinfer.mla, "
                           "flashinfer.mla_sm90, python.sgl_dsa and python.vllm_dsa do"),
            std::string::npos)
      << r.message;
}

// examples/dsa-index-bug.json: request 1 is request 0 (same seed, same buffer) with token 0's softmax
// weight multiplied by 1949, what a gathering kernel computes from a 2048-wide buffer of 100 tokens whose
// 1948 -1 slots hold 0; checked here against that sum written out, and the buggy buffer itself is refused.
TEST(Sparse, IndexBugExampleIsTokenZeroCountedOncePerRepeat) {
  const CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/dsa-index-bug.json").spec;
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result ref = run("cpu.reference", c, p, w);
  ASSERT_TRUE(ref.ok()) << ref.message;
  const int Hq = c.num_qo_heads, Dq = c.head_dim_qk, Dv = c.head_dim_vo, n = c.requests[1].kv_len;
  ASSERT_EQ(c.requests[0].kv_len, n);
  for (int h = 0; h < Hq; ++h) {
    std::vector<double> x(n), o(Dv, 0.0);
    double mx = -INFINITY, den = 0, moved = 0;
    for (int k = 0; k < n; ++k) {
      const float* kr = pool_row(c, p, w.k_pool, 1, k, 0, Dq);
      double dot = 0;
      for (int d = 0; d < Dq; ++d) dot += static_cast<double>(w.q_row(1, h, c)[d]) * kr[d];
      x[k] = dot * c.scale();
      mx = std::max(mx, x[k]);
    }
    for (int k = 0; k < n; ++k) {
      const double e = std::exp(x[k] - mx) * (k == 0 ? 1949.0 : 1.0);  // token 0 gathered 1 + 1948 times
      den += e;
      const float* vr = pool_row(c, p, w.v_pool, 1, k, 0, Dv);
      for (int d = 0; d < Dv; ++d) o[d] += e * vr[d];
    }
    for (int d = 0; d < Dv; ++d) {
      const double got = ref.o[(static_cast<size_t>(Hq) + h) * Dv + d];
      EXPECT_NEAR(got, o[d] / den, 1e-6 * std::max(1.0, std::fabs(o[d] / den))) << h << " " << d;
      moved = std::max(moved, std::fabs(got - ref.o[static_cast<size_t>(h) * Dv + d]));
    }
    EXPECT_GT(moved, 0.05) << "head " << h << ": the bug must change the output visibly";
  }
  CaseSpec bad = c;
  bad.attention.score_mod.reset();
  bad.sparse->indices[1][0].resize(2048, 0);  // the engine's buffer: 0 where -1 belongs
  expect_refused(bad, "/sparse/indices/1/0/100", "repeats entry 0 of this row");
}

// The indexer reads positions, not the batch: a decode step that replays query j of a prefill (kv_len
// j + 1 + prefix, q_offset j) selects what the prefill's row j selected; a request run alone (sub_case,
// given indices following their request) keeps its selection.
TEST(Sparse, SelectionFollowsPositionsNotTheBatch) {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    CaseSpec c = sparse_case(seed, true);
    c.requests = {RequestSpec{6, 40}, RequestSpec{1, 25}};
    validate_case(c);
    const SparseSelection pre = sparse_selection(c, 0);
    for (int j = 0; j < 6; ++j) {
      CaseSpec d = c;
      d.requests = {RequestSpec{1, 40 - 6 + j + 1}};
      d.requests[0].seed = c.request_seed(0);
      d.requests[0].q_offset = j;
      const SparseSelection step = sparse_selection(d, 0);
      EXPECT_EQ(std::vector<int>(step.row(0), step.row(0) + step.top_k), std::vector<int>(pre.row(j), pre.row(j) + pre.top_k))
          << seed << " " << j;
    }
    CaseSpec g = c;
    g.sparse->top_k = std::max(g.sparse->top_k, 2);
    g.sparse->indices = {{{0, 1}, {2}, {}, {3, 4}, {5}, {39, 38}}, {{24}}};
    validate_case(g);
    const CaseSpec alone = sub_case(g, {1});
    validate_case(alone);
    EXPECT_EQ(sparse_selection(alone, 0).idx, sparse_selection(g, 1).idx);
    EXPECT_EQ(sparse_selection(sub_case(c, {1}), 0).idx, sparse_selection(c, 1).idx);
  }
}
