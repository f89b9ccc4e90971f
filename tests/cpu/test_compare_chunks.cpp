// The comparison's order-defined statistics (diff_chunks.h): the sums follow the documented order
// (lanes, their fold, chunks), the bits do not depend on the host's thread count, worst_index is the
// first maximum. A device reproduces this order bit for bit (tests/gpu/test_compare_device.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "attnscope/compare.h"

using namespace attnscope;

namespace {

// 200 tokens x 4 heads x 96 dims: 76800 O elements, 18.75 chunks, rows straddling chunk edges.
CaseSpec shape() {
  CaseSpec c;
  c.requests = {{120, 130}, {80, 90}};
  c.num_qo_heads = c.num_kv_heads = 4;
  c.head_dim_qk = c.head_dim_vo = 96;
  c.dtype = DType::kBf16;
  return c;
}

Result named(const std::string& id) {
  Result r;
  r.backend = id;
  return r;
}

// A baseline and a backend a few bf16 ulps from it, values over several magnitudes (so the order of a
// sum shows in its last bits).
std::pair<Result, Result> pair_of(const CaseSpec& c, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Result a = named("a"), b = named("b");
  const int64_t n = c.total_q() * c.num_qo_heads * c.head_dim_vo, rows = c.total_q() * c.num_qo_heads;
  for (int64_t i = 0; i < n; ++i) {
    const float x = round_to(c.dtype, u(g) * std::exp2(static_cast<float>(i % 13) - 6));
    b.o.push_back(x);
    a.o.push_back(round_to(c.dtype, x * (1 + u(g) * 0.02f)));
  }
  for (int64_t r = 0; r < rows; ++r) {
    b.lse.push_back(u(g) * 8);
    a.lse.push_back(b.lse.back() + u(g) * 1e-5f);
  }
  return {a, b};
}

uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}

// The documented order, written out here on its own: lane i % 32 of chunk i / 4096 sums in index
// order, the lanes fold at strides 16, 8, 4, 2, 1, the chunks add in order. skip: rows not compared.
double documented_sum(const std::vector<double>& x, const std::vector<bool>& skip) {
  double total = 0;
  for (size_t c0 = 0; c0 < x.size(); c0 += 4096) {
    double lane[32] = {};
    for (size_t i = c0; i < std::min(x.size(), c0 + 4096); ++i)
      if (!skip[i]) lane[i % 32] += x[i];
    for (int off = 16; off > 0; off /= 2)
      for (int l = 0; l < off; ++l) lane[l] += lane[l + off];
    total += lane[0];
  }
  return total;
}

bool same_partial(const DiffPartial& x, const DiffPartial& y) { return std::memcmp(&x, &y, sizeof x) == 0; }

}  // namespace

TEST(CompareChunks, SumsFollowTheDocumentedOrder) {
  const CaseSpec c = shape();
  auto [a, b] = pair_of(c, 1);
  a.row_valid.assign(c.total_q(), 1);
  for (int64_t t = 0; t < c.total_q(); t += 7) a.row_valid[t] = 0;  // sampled: every 7th token left out
  const int64_t per_token = c.num_qo_heads * c.head_dim_vo;
  std::vector<double> e, e2, r2;
  std::vector<bool> skip;
  for (size_t i = 0; i < a.o.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a.o[i]) - b.o[i]);
    e.push_back(d);
    e2.push_back(d * d);
    r2.push_back(static_cast<double>(b.o[i]) * b.o[i]);
    skip.push_back(!a.row_valid[i / per_token]);
  }
  const DiffPartial p = fold_chunks(host_diff_pass(c, a, b, 0, 0, 1).o);
  EXPECT_EQ(bits(p.sum_abs), bits(documented_sum(e, skip)));
  EXPECT_EQ(bits(p.sum_sq_err), bits(documented_sum(e2, skip)));
  EXPECT_EQ(bits(p.sum_sq_ref), bits(documented_sum(r2, skip)));
  // the order matters for these data: one plain running sum ends in other bits
  double running = 0;
  for (size_t i = 0; i < e2.size(); ++i)
    if (!skip[i]) running += e2[i];
  EXPECT_NE(bits(running), bits(p.sum_sq_err));
  // and the report is made of these sums
  const DiffReport d = diff_only(c, a, b);
  EXPECT_EQ(bits(d.o.mean_abs), bits(p.sum_abs / p.count));
  EXPECT_EQ(bits(d.o.rel_l2), bits(std::sqrt(p.sum_sq_err / p.sum_sq_ref)));
  EXPECT_EQ(d.rows_compared, (c.total_q() - (c.total_q() + 6) / 7) * c.num_qo_heads);
}

TEST(CompareChunks, TheHostsThreadCountChangesNoBit) {
  const CaseSpec c = shape();
  const auto [a, b] = pair_of(c, 2);
  const DiffPass one = host_diff_pass(c, a, b, 1e-2, 1e-3, 1);
  ASSERT_EQ(one.o.size(), 19u);  // 76800 / 4096, rounded up
  for (int threads : {2, 3, 8, 64}) {
    SCOPED_TRACE(threads);
    const DiffPass many = host_diff_pass(c, a, b, 1e-2, 1e-3, threads);
    ASSERT_EQ(many.o.size(), one.o.size());
    for (size_t k = 0; k < one.o.size(); ++k) EXPECT_TRUE(same_partial(many.o[k], one.o[k])) << "chunk " << k;
    ASSERT_EQ(many.lse.size(), one.lse.size());
    for (size_t k = 0; k < one.lse.size(); ++k) EXPECT_TRUE(same_partial(many.lse[k], one.lse[k])) << "LSE chunk " << k;
  }
}

TEST(CompareChunks, WorstIndexIsTheFirstMaximum) {
  const CaseSpec c = shape();
  auto [a, b] = pair_of(c, 3);
  a.o = b.o;
  // the same largest error at three places, in different chunks and lanes; a NaN does not count
  for (int64_t i : {int64_t{70001}, int64_t{9000}, int64_t{40007}}) {
    b.o[i] = 0.25f;
    a.o[i] = 0.75f;
  }
  a.o[5] = NAN;
  const DiffReport d = diff_only(c, a, b);
  EXPECT_EQ(d.o.worst_index, 9000);
  EXPECT_EQ(d.o.max_abs, 0.5);
  EXPECT_EQ(d.o.nonfinite_mismatch, 1);
  // no finite pair at all: no worst index
  Result n = b;
  for (auto& x : n.o) x = NAN;
  EXPECT_EQ(diff_only(c, n, b).o.worst_index, -1);
}

TEST(CompareChunks, RuleCountsAreThePasses) {
  const CaseSpec c = shape();
  auto [a, b] = pair_of(c, 4);
  int64_t outside = 0, raw = 0;
  for (size_t i = 0; i < a.o.size(); ++i) {
    outside += !(std::fabs(a.o[i] - b.o[i]) <= 1e-3 + 1e-2 * std::fabs(b.o[i]));
    raw += f32_bits(a.o[i]) != f32_bits(b.o[i]);
  }
  for (size_t i = 0; i < a.lse.size(); ++i) raw += f32_bits(a.lse[i]) != f32_bits(b.lse[i]);
  ASSERT_GT(outside, 0);
  const DiffReport al = compare_results(c, a, b, {"a", "b", CompareRule::kAllclose, 1e-2, 1e-3, ""}, nullptr);
  EXPECT_EQ(al.verdict.detail.substr(0, al.verdict.detail.find(' ')), std::to_string(outside));
  const DiffReport bw = compare_results(c, a, b, {"a", "b", CompareRule::kBitwise, 0, 0, ""}, nullptr);
  EXPECT_EQ(bw.verdict.detail.substr(0, bw.verdict.detail.find(' ')), std::to_string(raw));
}

TEST(CompareChunks, AGivenPassIsUsedForTheLowpComparisonToo) {
  const CaseSpec c = shape();
  const auto [a, b] = pair_of(c, 5);
  int calls = 0;
  const DiffPassFn counting = [&](const Result& x, const Result& y, double rtol, double atol) {
    ++calls;
    return host_diff_pass(c, x, y, rtol, atol);
  };
  const DiffReport d = compare_results(c, a, b, {"a", "b", CompareRule::kTwiceLowp, 0, 0, "a"}, &a, counting);
  EXPECT_EQ(calls, 2);
  const DiffReport h = compare_results(c, a, b, {"a", "b", CompareRule::kTwiceLowp, 0, 0, "a"}, &a);
  EXPECT_EQ(d.verdict.detail, h.verdict.detail);
  EXPECT_TRUE(d.verdict.pass);
}
