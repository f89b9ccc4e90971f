// The merges of partitioned runs on the GPU (issue 44): cuda.merge gives merge_partials' bits (host
// partials uploaded, partials already on the device, and through run_merges); FlashInfer's MergeState /
// MergeStates / VariableLengthMergeStates come within a bound of it that each one's arithmetic
// explains; rows empty in every partial stay O = 0, LSE = -inf with no NaN; and reading base-2 partials
// as natural log (sglang #40903) is a large error that these checks would see.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attnscope/merge.h"
#include "cuda_merge.h"
#include "device_partials.h"
#include "gpu_test_util.h"
#include "merge_gen.h"

using namespace attnscope;
using attnscope::testing::make_merge_partials;
using attnscope::testing::MergePartials;

namespace {

// The first element whose bits differ ("" = none).
std::string first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (f32_bits(a[i]) != f32_bits(b[i]))
      return "at " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
  return "";
}

MergeRun host(const MergeInput& in) {
  MergeRun r;
  merge_partials(in.parts, in.rows, in.dv, in.dtype, in.native, in.read, &r.o, &r.lse);
  return r;
}

const MergeRun* find_run(const std::vector<MergeRun>& runs, const std::string& id) {
  for (const auto& r : runs)
    if (r.id == id) return &r;
  return nullptr;
}

bool has_merger(const std::string& id) {
  for (const auto& m : mergers())
    if (m.id == id) return true;
  return false;
}

// The shapes every check runs: dtypes, 2 / 4 / 8 partials, head dims, rows as [tokens, heads]
struct Shape {
  DType dt;
  int P, dv, tokens, heads;
};
std::vector<Shape> shapes() {
  std::vector<Shape> s;
  for (DType dt : {DType::kBf16, DType::kFp16, DType::kFp32})
    for (int P : {2, 4, 8}) s.push_back({dt, P, P == 4 ? 64 : 128, 37, 8});
  s.push_back({DType::kBf16, 8, 512, 5, 4});  // MLA's vo width; fewer tokens than partials
  s.push_back({DType::kFp16, 3, 256, 2, 2});  // 3 partials, 4 rows: MergeStates' many-partials kernel
  return s;
}
std::string name(const Shape& s) {
  return std::string(dtype_name(s.dt)) + " P " + std::to_string(s.P) + " dv " + std::to_string(s.dv) + " rows " +
         std::to_string(s.tokens) + " x " + std::to_string(s.heads);
}
MergePartials partials(const Shape& s, uint64_t seed) {
  return make_merge_partials(seed, s.P, static_cast<int64_t>(s.tokens) * s.heads, s.dv, s.dt);
}

}  // namespace

TEST(CudaMerge, IsMergePartialsBitForBit) {
  REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Shape& s : shapes())
    for (auto [native, read] :
         {std::pair{LseBase::kE, LseBase::kE}, std::pair{LseBase::k2, LseBase::k2}, std::pair{LseBase::k2, LseBase::kE}}) {
      SCOPED_TRACE(name(s) + ", base " + lse_base_name(native) + " read as " + lse_base_name(read));
      const MergePartials m = partials(s, ++seed);
      MergeInput in = m.input(native, read);
      in.qo_heads = s.heads;
      const MergeRun want = host(in);
      const MergeRun got = cuda::run_cuda_merge(in);
      ASSERT_EQ(got.status, Status::kOk) << got.message;
      EXPECT_EQ(first_bit_difference(got.o, want.o), "") << "O";
      EXPECT_EQ(first_bit_difference(got.lse, want.lse), "") << "LSE";
      EXPECT_GT(got.device_ms, 0);
    }
}

TEST(CudaMerge, ReadsPartialsAlreadyOnTheDevice) {
  REQUIRE_GPU();
  const MergePartials m = make_merge_partials(7, 4, 300, 128, DType::kBf16);
  const MergeInput in = m.input(LseBase::k2, LseBase::k2);
  const MergeRun want = host(in);
  auto on = std::make_shared<cuda::GpuPartials>(0, 4, m.rows, m.dv);
  for (int k = 0; k < 4; ++k) {
    ASSERT_EQ(cudaMemcpy(on->o(k), m.o[k].data(), m.o[k].size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(on->lse(k), m.lse[k].data(), m.lse[k].size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  // the device-pointer entry point
  cuda::DeviceBuffer o(m.o[0].size() * 4), lse(m.lse[0].size() * 4);
  cuda::launch_merge_partials(on->o_ptrs(), on->lse_ptrs(), m.rows, m.dv, m.dtype, in.native, in.read, o.as<float>(),
                              lse.as<float>(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(first_bit_difference(o.to_host<float>(m.o[0].size()), want.o), "");
  EXPECT_EQ(first_bit_difference(lse.to_host<float>(m.lse[0].size()), want.lse), "");
  // and the merger given them through MergeInput::on_device
  MergeInput given = in;
  given.on_device = on;
  const MergeRun got = cuda::run_cuda_merge(given);
  ASSERT_EQ(got.status, Status::kOk) << got.message;
  EXPECT_NE(got.message.find("already there"), std::string::npos) << got.message;
  EXPECT_EQ(first_bit_difference(got.o, want.o), "");
  EXPECT_EQ(first_bit_difference(got.lse, want.lse), "");
}

TEST(CudaMerge, RunMergesSaysBitIdentical) {
  REQUIRE_GPU();
  const MergePartials m = make_merge_partials(9, 8, 160, 128, DType::kFp16);
  const std::vector<MergeRun> runs = run_merges(m.input(LseBase::kE, LseBase::kE));
  const MergeRun* c = find_run(runs, "cuda.merge");
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->status, Status::kOk) << c->message;
  EXPECT_EQ(c->vs_attnscope, "bit-identical");
}

// FlashInfer's merges against merge_partials. Why they differ, and so the bound:
// - all three weigh with ex2.approx / lg2.approx (math::ptx_exp2 / ptx_log2: about 2 ulp) where
//   attnscope's merge rounds exp2 / log2 once: LSE within 1e-5 (1 + |LSE|), a weight within a few float ulps;
// - MergeStates and the variable-length merge keep a running max and sum (state_t) in fp32 and round O
//   once: another operation order, so the rounding to the dtype may land one ulp (of values below 2) away;
// - MergeState writes V in the dtype after every pairwise step: P - 1 more roundings of half an ulp each.
TEST(FlashInferMerge, WithinTheBoundOfItsArithmetic) {
  REQUIRE_COMPILED_GPU("flashinfer.decode");
  for (const std::string id : {"flashinfer.merge_state", "flashinfer.merge_states", "flashinfer.merge_states_varlen"})
    ASSERT_TRUE(has_merger(id)) << id;
  uint64_t seed = 300;
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(name(s));
    const MergePartials m = partials(s, ++seed);
    MergeInput in = m.input(LseBase::k2, LseBase::k2);
    in.qo_heads = s.heads;
    const MergeRun want = host(in);
    const std::vector<MergeRun> runs = run_merges(in);
    for (const std::string id : {"flashinfer.merge_state", "flashinfer.merge_states", "flashinfer.merge_states_varlen"}) {
      SCOPED_TRACE(id);
      const MergeRun* r = find_run(runs, id);
      ASSERT_NE(r, nullptr);
      if (s.dt == DType::kFp32) {  // FlashInfer's merges take 16-bit values only
        EXPECT_EQ(r->status, Status::kUnsupported) << r->message;
        continue;
      }
      ASSERT_EQ(r->status, Status::kOk) << r->message;
      EXPECT_NE(r->message.find("base 2"), std::string::npos) << r->message;
      const double ulp = s.dt == DType::kBf16 ? 0x1p-7 : 0x1p-10;  // of values in [1, 2)
      const double tol_o = (id == "flashinfer.merge_state" ? s.P : 1) * ulp + 1e-6;
      double worst_o = 0, worst_l = 0;
      for (size_t i = 0; i < want.o.size(); ++i) {
        ASSERT_FALSE(std::isnan(r->o[i])) << "O " << i;
        worst_o = std::max(worst_o, std::fabs(static_cast<double>(r->o[i]) - want.o[i]));
      }
      for (size_t i = 0; i < want.lse.size(); ++i) {
        ASSERT_FALSE(std::isnan(r->lse[i])) << "LSE " << i;
        if (std::isinf(want.lse[i])) {
          EXPECT_EQ(r->lse[i], want.lse[i]) << "row " << i;
          continue;
        }
        const double e = std::fabs(static_cast<double>(r->lse[i]) - want.lse[i]);
        worst_l = std::max(worst_l, e / (1 + std::fabs(want.lse[i])));
      }
      EXPECT_LE(worst_o, tol_o);
      EXPECT_LE(worst_l, 1e-5);
      for (int64_t row : m.empty_rows)
        for (int d = 0; d < m.dv; ++d) EXPECT_EQ(r->o[row * m.dv + d], 0.f) << "empty row " << row;
    }
  }
}

// sglang #40903: FlashInfer's base-2 partials merged as if natural log. Each merge read that way is far
// from the right merge (so a check of the read base can fail), and cuda.merge's mistaken read is still
// merge_partials' mistaken read bit for bit (the read base is what both were given).
TEST(MergeBaseMix, ReadingBase2AsNaturalLogIsFarOff) {
  REQUIRE_GPU();
  const MergePartials m = make_merge_partials(11, 4, 96, 128, DType::kBf16);
  const MergeRun right = host(m.input(LseBase::k2, LseBase::k2));
  const MergeInput mixed_in = m.input(LseBase::k2, LseBase::kE);
  const MergeRun mixed_host = host(mixed_in);
  const std::vector<MergeRun> runs = run_merges(mixed_in);
  int checked = 0;
  for (const MergeRun& r : runs) {
    if (r.status != Status::kOk) continue;
    SCOPED_TRACE(r.id);
    double worst = 0;
    for (size_t i = 0; i < right.o.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(r.o[i]) - right.o[i]));
    EXPECT_GT(worst, 0.05);
    EXPECT_NE(merge_versus(r, right, m.dv), "bit-identical");
    ++checked;
  }
  EXPECT_GE(checked, 2);  // the host merge and cuda.merge at least
  const MergeRun* c = find_run(runs, "cuda.merge");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(first_bit_difference(c->o, mixed_host.o), "");
}
