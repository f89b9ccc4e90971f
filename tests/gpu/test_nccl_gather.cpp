// The gather of partials across GPUs through NCCL (attnscope/collective.h, issue 44): seeded partials on
// GPUs 0 .. n-1, as device copies and as host rows, arrive on GPU 0 bit for bit, in rank order, with more
// ranks than GPUs too (rank r on GPU r % n); cuda.merge on the gathered buffers is merge_partials bit for
// bit. Needs 2 or more GPUs and NCCL: skipped with the reason otherwise (tests/cpu/test_merge.cpp checks
// the gather's refusal there).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "attnscope/collective.h"
#include "cuda_merge.h"
#include "device_result.h"
#include "gpu_test_util.h"
#include "merge_gen.h"
#include "scoped_device.h"

using namespace attnscope;
using attnscope::testing::make_merge_partials;
using attnscope::testing::MergePartials;

namespace {

bool same_bits(const std::vector<float>& a, const float* b, size_t n) {
  return a.size() == n && std::memcmp(a.data(), b, n * 4) == 0;
}

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Rank r's partial as a device copy on GPU r % n (even ranks) or as host rows (odd ranks).
std::vector<RankPartial> ranks_of(const MergePartials& m, int n, std::vector<std::shared_ptr<const cuda::DeviceResult>>* keep) {
  std::vector<RankPartial> out;
  for (size_t r = 0; r < m.o.size(); ++r) {
    RankPartial p;
    p.o = m.o[r].data();
    p.lse = m.lse[r].data();
    if (r % 2 == 0) {
      cuda::ScopedDevice on(static_cast<int>(r % n));
      Result res;
      res.o = m.o[r];
      res.lse = m.lse[r];
      keep->push_back(cuda::upload_device_copy(res));
      p.device = keep->back();
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace

TEST(NcclGather, PartialsArriveBitIdenticalAndMergeAsOnTheHost) {
  REQUIRE_GPU();
  REQUIRE_WHY_EMPTY(gather_unavailable(2));
  const int n = gpu_count();
  for (int R : {n, 2 * n + 1}) {  // one rank per GPU, and more ranks than GPUs
    if (R > cuda::kMaxMergeParts) continue;
    SCOPED_TRACE(std::to_string(R) + " ranks on " + std::to_string(n) + " GPUs");
    const MergePartials m = make_merge_partials(20 + R, R, 3 * 32, 128, DType::kBf16);
    std::vector<std::shared_ptr<const cuda::DeviceResult>> copies;
    const std::vector<RankPartial> ranks = ranks_of(m, n, &copies);
    const GatheredPartials g = gather_partials(ranks, m.rows, m.dv, true);
    ASSERT_EQ(g.status, Status::kOk) << g.message;
    EXPECT_EQ(g.gpus, std::min(n, R));
    EXPECT_GT(g.collective_ms, 0);
    EXPECT_NE(g.message.find("NCCL"), std::string::npos) << g.message;
    ASSERT_EQ(g.o.size(), static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) {
      EXPECT_EQ(g.rank_gpu[r], r % g.gpus) << "rank " << r;
      EXPECT_TRUE(same_bits(g.o[r], m.o[r].data(), m.o[r].size())) << "rank " << r << " O";
      EXPECT_TRUE(same_bits(g.lse[r], m.lse[r].data(), m.lse[r].size())) << "rank " << r << " LSE";
    }
    // cuda.merge on GPU 0 reads the gathered buffers where they are: merge_partials' bits
    MergeInput in = m.input(LseBase::k2, LseBase::k2);
    in.on_device = g.on_gpu0;
    std::vector<float> want_o, want_lse;
    merge_partials(in.parts, in.rows, in.dv, in.dtype, in.native, in.read, &want_o, &want_lse);
    const MergeRun got = cuda::run_cuda_merge(in);
    ASSERT_EQ(got.status, Status::kOk) << got.message;
    EXPECT_NE(got.message.find("already there"), std::string::npos) << got.message;
    EXPECT_TRUE(same_bits(got.o, want_o.data(), want_o.size()));
    EXPECT_TRUE(same_bits(got.lse, want_lse.data(), want_lse.size()));
  }
}

TEST(NcclGather, TwoGpusOfMoreAndHostRowsOnly) {
  REQUIRE_GPU();
  REQUIRE_WHY_EMPTY(gather_unavailable(2));
  const MergePartials m = make_merge_partials(31, 5, 17, 64, DType::kFp16);
  std::vector<RankPartial> ranks;
  for (int r = 0; r < 5; ++r) ranks.push_back({m.o[r].data(), m.lse[r].data(), nullptr});
  const GatheredPartials g = gather_partials(ranks, m.rows, m.dv, false, 2);
  ASSERT_EQ(g.status, Status::kOk) << g.message;
  EXPECT_EQ(g.gpus, 2);
  EXPECT_EQ(g.on_gpu0, nullptr);
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(g.rank_gpu[r], r % 2);
    EXPECT_TRUE(same_bits(g.o[r], m.o[r].data(), m.o[r].size())) << "rank " << r;
    EXPECT_TRUE(same_bits(g.lse[r], m.lse[r].data(), m.lse[r].size())) << "rank " << r;
  }
}
