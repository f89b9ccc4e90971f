// The input generator and the paged workload.
#include <gtest/gtest.h>

#include <cmath>

#include "attnscope/plan.h"
#include "attnscope/workload.h"
#include "case_gen.h"

using namespace attnscope;

TEST(Generator, IsDeterministicAndRoughlyStandard) {
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float a = gen_standard(123, TensorId::kQ, i);
    ASSERT_EQ(f32_bits(a), f32_bits(gen_standard(123, TensorId::kQ, i)));
    ASSERT_TRUE(std::isfinite(a));
    ASSERT_LT(std::fabs(a), 3.47f);
    sum += a;
    sq += static_cast<double>(a) * a;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n), 1.0, 0.01);
  // streams differ by seed and tensor
  EXPECT_NE(gen_standard(1, TensorId::kQ, 5), gen_standard(2, TensorId::kQ, 5));
  EXPECT_NE(gen_standard(1, TensorId::kQ, 5), gen_standard(1, TensorId::kK, 5));
}

TEST(Generator, ValuesAreRepresentableInTheDtype) {
  for (DType t : {DType::kBf16, DType::kFp16, DType::kFp32})
    for (int i = 0; i < 1000; ++i) {
      const float v = gen_value(9, TensorId::kV, i, 0.1, 2.0, 1.0, t);
      ASSERT_EQ(v, round_to(t, v));
    }
}

TEST(Workload, PagedValuesMatchTheLogicalStream) {
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const CaseSpec c = attnscope::testing::random_case(seed);
    const PageTable pt = make_page_table(c);
    const Workload w = make_workload(c, pt);
    std::vector<char> touched(w.k_pool.size() / c.head_dim_qk, 0);
    for (size_t r = 0; r < c.requests.size(); ++r) {
      const uint64_t s = c.request_seed(static_cast<int>(r));
      for (int k = 0; k < c.requests[r].kv_len; ++k)
        for (int h = 0; h < c.num_kv_heads; ++h) {
          const int page = pt.page_of(static_cast<int>(r), k), slot = k % pt.page_size;
          const int64_t off = kv_offset(c.kv_cache.layout, page, slot, h, 0, pt.page_size, c.num_kv_heads, c.head_dim_qk);
          const double scale = 1.0;
          ASSERT_EQ(w.k_pool[off + 1 % c.head_dim_qk],
                    gen_value(s, TensorId::kK, kv_index(k, h, 1 % c.head_dim_qk, c.num_kv_heads, c.head_dim_qk), c.data.mean,
                              c.data.std, scale, c.dtype));
          touched[off / c.head_dim_qk] = 1;
        }
    }
    // every slot no request uses is poisoned (NaN) when asked, else 0
    for (size_t i = 0; i < touched.size(); ++i) {
      if (touched[i]) continue;
      const float v = w.k_pool[i * c.head_dim_qk];
      if (c.kv_cache.poison_unused)
        ASSERT_TRUE(std::isnan(v));
      else
        ASSERT_EQ(v, 0.0f);
    }
  }
}

TEST(Workload, RequestDataDoesNotDependOnTheBatch) {
  CaseSpec c = attnscope::testing::random_case(5);
  c.requests.push_back({3, 9});
  const Workload all = make_workload(c, make_page_table(c));
  const CaseSpec alone = sub_case(c, {static_cast<int>(c.requests.size()) - 1});
  const Workload one = make_workload(alone, make_page_table(alone));
  const int64_t off = all.q_indptr[c.requests.size() - 1] * c.num_qo_heads * c.head_dim_qk;
  for (size_t i = 0; i < one.q.size(); ++i) ASSERT_EQ(one.q[i], all.q[off + i]);
}

TEST(Workload, OutlierChannelsScaleK) {
  CaseSpec c = attnscope::testing::random_case(8);
  c.data.outlier_channels = {0};
  c.data.outlier_scale = 16.0;
  const PageTable pt = make_page_table(c);
  const Workload w = make_workload(c, pt);
  const int64_t off = kv_offset(c.kv_cache.layout, pt.page_of(0, 0), 0, 0, 0, pt.page_size, c.num_kv_heads, c.head_dim_qk);
  const float z = gen_standard(c.request_seed(0), TensorId::kK, 0);
  EXPECT_EQ(w.k_pool[off], round_to(c.dtype, static_cast<float>((c.data.mean + c.data.std * z) * 16.0)));
}
