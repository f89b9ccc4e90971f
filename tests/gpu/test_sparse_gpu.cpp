// DeepSeek Sparse Attention on the GPU (issue 46; sparse_gather.h): cuda.flash and FlashInfer's MLA kernels
// (flashinfer.mla, flashinfer.mla_sm90) run a /sparse case's gathered form, one request per query row over
// a page table of page size 1 holding the kept tokens' slots, within the 2x rule against cpu.reference
// with cpu.lowp as the baseline; the references on the GPU run the selection's mask bits. Seeded absorbed
// cases of DeepSeek's dims (16 / 64 / 128 heads), page sizes 1 / 16 / 64 in every allocation and layout,
// poisoned unused slots, top_k below and above the rows' lengths, given indices with -1 padding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnscope/compare.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "attnscope/sparse.h"
#include "attnscope/workload.h"
#include "case_json.h"
#include "explain.h"
#include "fi_topk.h"
#include "gpu_test_util.h"

using namespace attnscope;
using attnscope::testing::gpu_cases;
using attnscope::testing::run_id;

namespace {

CaseSpec sparse_gpu_case(uint64_t seed) {
  SplitMix64 g(seed * 6151 + 46);
  const int heads[] = {16, 64, 128};
  const DType dt = g.coin() ? DType::kBf16 : DType::kFp16;
  CaseSpec c = attnscope::testing::absorbed_mla_case("dsa-gpu-" + std::to_string(seed), heads[seed % 3], dt);
  const int pss[] = {1, 16, 64};
  c.kv_cache.page_size = pss[g.range(0, 2)];
  c.kv_cache.allocation = static_cast<PageAlloc>(g.range(0, 2));
  c.kv_cache.allocation_seed = g.next() % 1000;
  c.kv_cache.layout = g.coin() ? KvLayout::kNHD : KvLayout::kHND;  // one latent head: the same pool
  c.kv_cache.poison_unused = true;
  const int max_kv = std::getenv("ATTNSCOPE_GPU_QUICK") ? 600 : 3000;
  for (int i = g.range(1, 4); i > 0; --i) {
    RequestSpec r;
    r.kv_len = g.range(1, max_kv);
    r.q_len = g.range(1, std::min(r.kv_len, 3));
    c.requests.push_back(r);
  }
  SparseSpec s;
  const int ks[] = {1, 64, 256, 2048};
  s.top_k = ks[g.range(0, 3)];
  s.index_heads = g.range(1, 8);
  s.index_head_dim = 64;
  s.scoring = g.coin() ? SparseScoring::kFp8 : SparseScoring::kFp64;
  c.sparse = s;
  c.data.seed = g.next();
  const int mode = static_cast<int>(seed % 3);
  c.split.planner = mode == 0 ? Planner::kOff : mode == 1 ? Planner::kFlashInfer : Planner::kFixed;
  if (c.split.planner == Planner::kFixed) c.split.fixed_split_size = g.range(2, 64);
  validate_case(c);
  return c;
}

// Runs `id` on c within the 2x rule; returns false (with the reason printed) when it refuses the case
// for a reason of this device or build (not compiled, another GPU generation).
bool check_sparse(const CaseSpec& c, const std::string& id, const Result& ref, const Result& lowp, const Plan& p,
                  const Workload& w) {
  const std::string why = refusal(id, c);
  if (!why.empty()) {
    EXPECT_EQ(why.find("/sparse"), std::string::npos) << id << " refused the case naming /sparse: " << why;
    std::cout << "[ refused  ] " << c.name << " " << id << ": " << why << "\n";
    return false;
  }
  const Result a = run_id(id, c, p, w);
  EXPECT_TRUE(a.ok()) << id << ": " << a.message;
  if (!a.ok()) return false;
  EXPECT_NE(a.message.find("/sparse gathered: " + std::to_string(c.total_q()) + " query rows"), std::string::npos) << a.message;
  for (float x : a.o) EXPECT_FALSE(std::isnan(x)) << c.name << ": " << id << " read a poisoned (NaN) slot";
  // 1e-5 floor: FlashAttention's rounding allowance, as every GPU test of the 2x rule
  const DiffReport d = compare_results(c, a, ref, {id, "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  EXPECT_TRUE(d.verdict.pass) << c.name << " " << id << ": " << d.verdict.detail;
  return true;
}

}  // namespace

TEST(SparseGpu, GatheredKernelsWithinTwiceLowp) {
  REQUIRE_GPU();
  int flash = 0, fi = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(gpu_cases(18, 6)); ++seed) {
    const CaseSpec c = sparse_gpu_case(seed);
    SCOPED_TRACE(c.name + " heads " + std::to_string(c.num_qo_heads) + " page " + std::to_string(c.kv_cache.page_size) +
                 " top_k " + std::to_string(c.sparse->top_k));
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result ref = run_id("cpu.reference", c, p, w), lowp = run_id("cpu.lowp", c, p, w);
    ASSERT_TRUE(ref.ok() && lowp.ok()) << ref.message << " / " << lowp.message;
    flash += check_sparse(c, "cuda.flash", ref, lowp, p, w);
    fi += check_sparse(c, "flashinfer.mla", ref, lowp, p, w);
    fi += check_sparse(c, "flashinfer.mla_sm90", ref, lowp, p, w);
    // the GPU reference runs the mask bits: fp64 as cpu.reference, only the summation order differs
    const Result g = run_id("cuda.reference", c, p, w);
    ASSERT_TRUE(g.ok()) << g.message;
    const DiffReport d =
        compare_results(c, g, ref, {"cuda.reference", "cpu.reference", CompareRule::kAllclose, 1e-6, 1e-6, ""}, nullptr);
    EXPECT_TRUE(d.verdict.pass) << c.name << ": " << d.verdict.detail;
  }
  EXPECT_EQ(flash, gpu_cases(18, 6)) << "cuda.flash must run every case";
  EXPECT_GT(fi, 0) << "no FlashInfer MLA kernel ran (not compiled?)";
}

// The examples run on cuda.flash; a given row that keeps no token has no gathered form: refused by name.
TEST(SparseGpu, EmptyGivenRowIsRefusedByName) {
  REQUIRE_GPU();
  CaseSpec c = sparse_gpu_case(4);
  c.requests = {RequestSpec{.q_len = 2, .kv_len = 40}};
  c.sparse->top_k = 4;
  c.sparse->indices = {{{3, 1, -1, -1}, {-1, -1, -1, -1}}};
  validate_case(c);
  for (const char* id : {"cuda.flash", "flashinfer.mla"}) {
    const Plan p = make_plan(c);
    const Result r = run_id(id, c, p, make_workload(c, p.pages));
    if (r.message.find("not compiled") != std::string::npos) continue;
    EXPECT_FALSE(r.ok()) << id;
    EXPECT_NE(r.message.find("/sparse/indices/0/1 keeps no token"), std::string::npos) << r.message;
  }
}

// FlashInfer's top-k (topk.cuh, TopKTieBreak::Small) on the FP8 indexer's scores (fp32 values, exact as
// doubles) selects the same tokens as attnscope's select_top_k, row by row, ties included: rows shorter
// than top_k keep every position and pad with -1, and the FP8 scores tie often (exact zeros after ReLU).
TEST(SparseGpu, FlashInferTopKSelectsAsTheReference) {
  REQUIRE_GPU();
  int rows_checked = 0, tied_rows = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    CaseSpec c = sparse_gpu_case(seed);
    c.sparse->scoring = SparseScoring::kFp8;
    c.sparse->index_heads = 1 + static_cast<int>(seed % 2);  // few heads: more exact ties at 0
    validate_case(c);
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      const IndexerInputs in = indexer_inputs(c, r);
      const IndexerFp8 f = quantize_indexer(in);
      const int stride = in.kv_len, k = c.sparse->top_k;
      std::vector<float> rows(static_cast<size_t>(in.q_len) * stride, -INFINITY);
      std::vector<int> lengths(in.q_len);
      std::vector<int> want(static_cast<size_t>(in.q_len) * k);
      for (int q = 0; q < in.q_len; ++q) {
        const int n = in.kv_len - in.q_len + q + 1;  // causal: keys [0, q_abs]
        std::vector<double> s(n);
        indexer_scores_fp8(in, f, q, n, s.data());
        for (int i = 0; i < n; ++i) rows[static_cast<size_t>(q) * stride + i] = static_cast<float>(s[i]);
        lengths[q] = n;
        ASSERT_EQ(select_top_k(s.data(), n, k, want.data() + static_cast<size_t>(q) * k), 0);
        std::vector<double> sorted = s;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        tied_rows += n > k && sorted[k - 1] == sorted[k];
      }
      std::vector<int> got;
      try {
        got = attnscope::peers::flashinfer::flashinfer_top_k(rows, lengths, stride, k);
      } catch (const std::runtime_error& e) {  // only FlashInfer's own refusal is a skip; a CUDA error fails
        const std::string why = e.what();
        if (why.find("cudaErrorNotSupported") != std::string::npos || why.find("not compiled") != std::string::npos)
          GTEST_SKIP() << why;
        FAIL() << why;
      }
      for (int q = 0; q < in.q_len; ++q) {
        std::vector<int> a(want.begin() + static_cast<size_t>(q) * k, want.begin() + static_cast<size_t>(q + 1) * k);
        std::vector<int> b(got.begin() + static_cast<size_t>(q) * k, got.begin() + static_cast<size_t>(q + 1) * k);
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        EXPECT_EQ(a, b) << c.name << " request " << r << " row " << q;
        ++rows_checked;
      }
    }
  }
  EXPECT_GT(rows_checked, 6);
  std::cout << "[ top-k    ] " << rows_checked << " rows, " << tied_rows << " with a tie at the k-th score\n";
}

// explain's check of a GPU library's own top-k (BackendFamily::gpu_top_k) runs on the GPU: FlashInfer's
// top-k keeps the plan's tokens on every row of the FP8-indexer example (4 decodes, 2048 of 4096 to 8192).
TEST(SparseGpu, ExplainRunsFlashInfersTopKBesideThePlans) {
  REQUIRE_GPU();
  const CaseSpec c = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/deepseek-v32-dsa-decode.json").spec;
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    const SoftmaxTrace t = explain_case(c, r, 0, 3, /*sparse_checks=*/true);
    ASSERT_TRUE(t.sparse.has_value());
    if (t.sparse->gpu_top_k_note.find("not compiled") != std::string::npos) GTEST_SKIP() << t.sparse->gpu_top_k_note;
    EXPECT_EQ(t.sparse->gpu_top_k_note, "") << "request " << r;
    EXPECT_EQ(t.sparse->gpu_top_k_differs, 0) << "request " << r;
  }
}
