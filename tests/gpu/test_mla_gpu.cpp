// MLA on the GPU's generic backends (docs/conventions.md section 13): the device generator gives the
// host's bits in both forms, cuda.reference agrees with cpu.reference, cuda.naive passes the 2x rule, and
// the two forms agree through W_uv on the device as on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnscope/compare.h"
#include "attnscope/mla.h"
#include "attnscope/plan.h"
#include "device_workload.h"
#include "gpu_test_util.h"
#include "mla_case_gen.h"

using namespace attnscope;
using attnscope::testing::gpu_cases;
using attnscope::testing::mla_case;
using attnscope::testing::run_id;

namespace {

void expect_same(const std::vector<float>& dev, const std::vector<float>& host, const std::string& what) {
  ASSERT_EQ(dev.size(), host.size()) << what;
  for (size_t i = 0; i < dev.size(); ++i) {
    if (std::isnan(dev[i]) && std::isnan(host[i])) continue;
    ASSERT_EQ(f32_bits(dev[i]), f32_bits(host[i])) << what << "[" << i << "] device " << dev[i] << " host " << host[i];
  }
}

}  // namespace

TEST(MlaGpu, DeviceInputsAreTheHostsBitsInBothForms) {
  REQUIRE_GPU();
  for (int seed = 1; seed <= gpu_cases(12, 4); ++seed)
    for (bool absorbed : {true, false}) {
      const CaseSpec c = mla_case(seed, absorbed, seed <= 2);
      SCOPED_TRACE(c.name + (absorbed ? " absorbed" : " non-absorbed"));
      const Plan p = make_plan(c);
      const Workload w = make_workload(c, p.pages);
      const cuda::DeviceWorkload d = cuda::make_device_workload(c, p);
      expect_same(cuda::download_as_float(d.q, d.q_elems, c.dtype), w.q, "Q");
      expect_same(cuda::download_as_float(d.k, d.k_elems, c.dtype), w.k_pool, "K pool");
      expect_same(cuda::download_as_float(d.v, d.v_elems, c.dtype), w.v_pool, "V pool");
    }
}

// cuda.reference is fp64 like cpu.reference: equal up to the order of fp64 sums (1e-5 on values of
// order 1, far below any dtype's rounding). cuda.naive (fp32, materialised scores) under the 2x rule.
TEST(MlaGpu, CudaReferenceAndNaiveInBothForms) {
  REQUIRE_GPU();
  for (int seed = 1; seed <= gpu_cases(12, 4); ++seed)
    for (bool absorbed : {true, false}) {
      const CaseSpec c = mla_case(100 + seed, absorbed, seed <= 2);
      SCOPED_TRACE(c.name + (absorbed ? " absorbed" : " non-absorbed"));
      const Plan p = make_plan(c);
      const Workload w = make_workload(c, p.pages);
      const Result cref = run_id("cpu.reference", c, p, w), gref = run_id("cuda.reference", c, p, w);
      const Result low = run_id("cpu.lowp", c, p, w), naive = run_id("cuda.naive", c, p, w);
      ASSERT_TRUE(cref.ok() && gref.ok() && low.ok() && naive.ok()) << gref.message << naive.message;
      ComparisonSpec tight{"cuda.reference", "cpu.reference", CompareRule::kMaxAbs, 0, 1e-5};
      EXPECT_TRUE(compare_results(c, gref, cref, tight, nullptr).verdict.pass);
      ComparisonSpec twice{"cuda.naive", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"};
      const DiffReport d = compare_results(c, naive, cref, twice, &low);
      EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
    }
}

// The forms through W_uv on the device: the bound of Mla.BothFormsAgreeThroughTheOutputProjection.
TEST(MlaGpu, BothFormsAgreeThroughTheOutputProjection) {
  REQUIRE_GPU();
  for (int seed = 1; seed <= gpu_cases(6, 2); ++seed) {
    const CaseSpec a = mla_case(200 + seed, true, seed <= 2);
    const CaseSpec n = mla_other_form(a);
    const Plan pa = make_plan(a), pn = make_plan(n);
    const Workload wa = make_workload(a, pa.pages), wn = make_workload(n, pn.pages);
    const Result ra = run_id("cuda.reference", a, pa, wa), rn = run_id("cuda.reference", n, pn, wn);
    const Result ln = run_id("cpu.lowp", n, pn, wn);
    ASSERT_TRUE(ra.ok() && rn.ok() && ln.ok()) << ra.message << rn.message;
    const std::vector<double> proj = mla_project_output(a, ra.o);
    ASSERT_EQ(proj.size(), rn.o.size());
    double err = 0, lowp = 0;
    for (size_t i = 0; i < proj.size(); ++i) {
      err = std::max(err, std::fabs(proj[i] - rn.o[i]));
      lowp = std::max(lowp, std::fabs(static_cast<double>(ln.o[i]) - rn.o[i]));
    }
    EXPECT_LE(err, 2 * lowp + 1e-3) << a.name << ": forms differ by " << err << ", lowp by " << lowp;
  }
}
