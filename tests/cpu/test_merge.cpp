// The merge registry (attnscope/merge.h) on any build: the host merge comes first and is merge_partials
// bit for bit; an empty partial (LSE -inf, O = 0) changes no bit; a row empty in every partial merges
// to O = 0, LSE = -inf with no NaN; the portable exp2 / log2 the merges share with the device are
// within 1 ulp; a base mix-up (log2 partials read as natural log) is a large error; the gather across
// GPUs says why it cannot run where it cannot.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attnscope/collective.h"
#include "attnscope/merge.h"
#include "attnscope/softmax_state.h"
#include "merge_gen.h"

using namespace attnscope;
using attnscope::testing::make_merge_partials;
using attnscope::testing::MergePartials;

namespace {

void expect_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    if (f32_bits(a[i]) != f32_bits(b[i])) {
      ADD_FAILURE() << what << ": first difference at " << i << ": " << a[i] << " vs " << b[i];
      return;
    }
}

// ulps between two finite floats of one sign
int64_t ulps(float a, float b) { return std::llabs(static_cast<int64_t>(f32_bits(a)) - static_cast<int64_t>(f32_bits(b))); }

struct Merged {
  std::vector<float> o, lse;
};
Merged host_merge(const MergeInput& in) {
  Merged m;
  merge_partials(in.parts, in.rows, in.dv, in.dtype, in.native, in.read, &m.o, &m.lse);
  return m;
}

}  // namespace

TEST(Merge, PortableExp2Log2AreWithinOneUlp) {
  SplitMix64 g(5);
  for (int i = 0; i < 200000; ++i) {
    const float x = attnscope::testing::uniform(g, -150.f, 0.f);
    const float want = static_cast<float>(std::exp2(static_cast<double>(x)));
    if (want > 0x1p-126f) {  // normal values: a subnormal's ulp is not relative
      EXPECT_LE(ulps(exp2_portable(x), want), 1) << "exp2 " << x;
    }
    const float y = attnscope::testing::uniform(g, 1.f, 2.f);
    EXPECT_LE(ulps(log2_portable(y), static_cast<float>(std::log2(static_cast<double>(y)))), 1) << "log2 " << y;
  }
  // the values the merge's empty partials and equal weights rely on are exact
  EXPECT_EQ(exp2_portable(0.f), 1.f);
  EXPECT_EQ(exp2_portable(-1.f), 0.5f);
  EXPECT_EQ(exp2_portable(-INFINITY), 0.f);
  EXPECT_EQ(exp2_portable(-200.f), 0.f);
  EXPECT_EQ(exp2_portable(-149.f), 0x1p-149f);
  EXPECT_EQ(log2_portable(1.f), 0.f);
  EXPECT_EQ(log2_portable(2.f), 1.f);
  EXPECT_EQ(log2_portable(0x1p-140f), -140.f);
  EXPECT_EQ(log2_portable(0.f), -INFINITY);
  EXPECT_TRUE(std::isnan(log2_portable(-1.f)));
}

TEST(Merge, TheHostMergeComesFirstAndIsMergePartials) {
  for (DType dt : {DType::kBf16, DType::kFp16, DType::kFp32})
    for (int P : {2, 4, 8}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " P " + std::to_string(P));
      const MergePartials m = make_merge_partials(P * 10 + static_cast<int>(dt), P, 37, 24, dt);
      const MergeInput in = m.input(LseBase::k2, LseBase::k2);
      const std::vector<MergeRun> runs = run_merges(in);
      ASSERT_FALSE(runs.empty());
      EXPECT_EQ(runs[0].id, "attnscope");
      ASSERT_EQ(runs[0].status, Status::kOk) << runs[0].message;
      EXPECT_EQ(runs[0].device_ms, 0);
      const Merged want = host_merge(in);
      expect_bits(runs[0].o, want.o, "O");
      expect_bits(runs[0].lse, want.lse, "LSE");
      // every other merger of this build ran or said why not; none compared unless it ran
      for (size_t i = 1; i < runs.size(); ++i) {
        EXPECT_FALSE(runs[i].id.empty());
        if (runs[i].status == Status::kOk)
          EXPECT_FALSE(runs[i].vs_attnscope.empty()) << runs[i].id;
        else
          EXPECT_FALSE(runs[i].message.empty()) << runs[i].id;
      }
    }
}

TEST(Merge, AnEmptyPartialChangesNoBit) {
  const MergePartials m = make_merge_partials(3, 1, 29, 16, DType::kBf16);
  std::vector<float> eo(m.o[0].size(), 0.f), el(m.lse[0].size(), -INFINITY);
  for (LseBase native : {LseBase::kE, LseBase::k2})
    for (LseBase read : {LseBase::kE, LseBase::k2}) {
      MergeInput one = m.input(native, read);
      const Merged alone = host_merge(one);
      MergeInput before = one, after = one;
      before.parts.insert(before.parts.begin(), PartialRows{eo.data(), el.data()});
      after.parts.push_back(PartialRows{eo.data(), el.data()});
      const Merged b = host_merge(before), a = host_merge(after);
      expect_bits(b.o, alone.o, "empty first: O");
      expect_bits(b.lse, alone.lse, "empty first: LSE");
      expect_bits(a.o, alone.o, "empty last: O");
      expect_bits(a.lse, alone.lse, "empty last: LSE");
    }
}

TEST(Merge, ARowEmptyEverywhereIsZeroWithNoNaN) {
  for (int P : {2, 4, 8}) {
    const MergePartials m = make_merge_partials(40 + P, P, 21, 8, DType::kFp16);
    const Merged r = host_merge(m.input(LseBase::kE, LseBase::kE));
    ASSERT_FALSE(m.empty_rows.empty());
    for (int64_t row : m.empty_rows) {
      EXPECT_EQ(r.lse[row], -INFINITY) << "row " << row;
      for (int d = 0; d < m.dv; ++d) EXPECT_EQ(f32_bits(r.o[row * m.dv + d]), 0u) << "row " << row << " d " << d;
    }
    for (float x : r.o) ASSERT_FALSE(std::isnan(x));
    for (float x : r.lse) ASSERT_FALSE(std::isnan(x));
  }
}

// sglang #40903: base-2 partials read as natural log weigh them by 2^(x log2(e)^2 ...): far off
TEST(Merge, BaseMixIsALargeError) {
  const MergePartials m = make_merge_partials(7, 4, 64, 16, DType::kFp32);
  const Merged right = host_merge(m.input(LseBase::k2, LseBase::k2));
  const Merged mixed = host_merge(m.input(LseBase::k2, LseBase::kE));
  double worst = 0;
  for (size_t i = 0; i < right.o.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(right.o[i]) - mixed.o[i]));
  EXPECT_GT(worst, 0.1);
  MergeRun a, b;
  a.o = mixed.o;
  a.lse = mixed.lse;
  b.o = right.o;
  b.lse = right.lse;
  const std::string v = merge_versus(a, b, m.dv);
  EXPECT_NE(v.find("max |diff|"), std::string::npos) << v;
  EXPECT_EQ(merge_versus(b, b, m.dv), "bit-identical");
}

TEST(Merge, VersusNamesTheFirstDifference) {
  MergeRun a, b;
  b.o = {1, 2, 3, 4, 5, 6};
  b.lse = {0.5f, 0.25f};
  a = b;
  a.o[4] = 5.5f;  // row 1, d 1
  EXPECT_EQ(merge_versus(a, b, 3), "max |diff| 0.5 (O), first at row 1 d 1; LSE bit-identical");
  a = b;
  a.lse[1] = 0.375f;
  EXPECT_EQ(merge_versus(a, b, 3), "O bit-identical; LSE max |diff| 0.12, first at row 1");
  a.o.pop_back();
  EXPECT_NE(merge_versus(a, b, 3).find("not compared"), std::string::npos);
}

// Without NCCL, CUDA, or a second GPU the gather across GPUs refuses with its reason (as a status).
TEST(Merge, TheGatherSaysWhyNotWhereItCannotRun) {
  const std::string why = gather_unavailable(2);
  if (why.empty()) GTEST_SKIP() << "the gather runs here (NcclGather.* in the GPU tests check it)";
  const MergePartials m = make_merge_partials(1, 2, 8, 64, DType::kBf16);
  std::vector<RankPartial> ranks(2);
  for (int r = 0; r < 2; ++r) ranks[r] = {m.o[r].data(), m.lse[r].data(), nullptr};
  const GatheredPartials g = gather_partials(ranks, m.rows, m.dv, true);
  EXPECT_NE(g.status, Status::kOk);
  EXPECT_EQ(g.message, why);
  EXPECT_TRUE(g.o.empty());
}
