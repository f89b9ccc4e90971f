// The device inputs shared by the GPU backends of one live run (issue 43 item 2, device_workload.h):
// one key, one generation; another key or no key, another workload; and every GPU backend's result
// on the shared inputs has the bits of its run on its own inputs. Skips without a device.
#include <gtest/gtest.h>

#include "attnscope/compare.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "case_gen.h"
#include "device_workload.h"
#include "require.h"

using namespace attnscope;

namespace {

CaseSpec small_case() {
  CaseSpec c;
  c.name = "shared-inputs";
  c.requests = {RequestSpec{9, 300}, RequestSpec{1, 77}, RequestSpec{64, 64}};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.dtype = DType::kBf16;
  c.kv_cache.page_size = 16;
  c.kv_cache.allocation = PageAlloc::kShuffled;
  c.kv_cache.poison_unused = true;
  validate_case(c);
  return c;
}

}  // namespace

TEST(SharedInputs, OneKeyOneGenerationAnotherKeyAnother) {
  REQUIRE_GPU();
  const CaseSpec c = small_case();
  const Plan p = make_plan(c);
  RunOptions a, b, none;
  a.inputs_key = "key a";
  b.inputs_key = "key b";
  const auto first = cuda::device_workload(c, p, a), again = cuda::device_workload(c, p, a);
  EXPECT_EQ(first.get(), again.get()) << "the same key generated twice";
  const auto other = cuda::device_workload(c, p, b);
  EXPECT_NE(other.get(), first.get());
  EXPECT_NE(cuda::device_workload(c, p, none).get(), cuda::device_workload(c, p, none).get()) << "no key, no sharing";
  // a backend that holds the old key's workload keeps it alive and intact after the key moved on
  const auto q0 = cuda::download_as_float(first->q, first->q_elems, c.dtype);
  const auto q1 = cuda::download_as_float(other->q, other->q_elems, c.dtype);
  ASSERT_EQ(q0.size(), q1.size());
  for (size_t i = 0; i < q0.size(); ++i) ASSERT_EQ(f32_bits(q0[i]), f32_bits(q1[i])) << i;
}

TEST(SharedInputs, EveryGpuBackendGivesItsOwnInputsBits) {
  REQUIRE_GPU();
  CaseSpec c = small_case();
  const Plan p = make_plan(c);
  int ran = 0;
  for (const char* id : {"cuda.reference", "cuda.naive", "cuda.flash", "flashinfer.prefill", "flashinfer.decode", "cudnn.sdpa"}) {
    SCOPED_TRACE(id);
    if (!refusal(id, c).empty()) continue;  // not compiled here, or not this case
    RunOptions own, shared;
    shared.inputs_key = std::string("shared ") + id;
    auto b = make_backend(id);
    const Result x = run_backend(*b, c, p, Workload{}, own);
    (void)cuda::device_workload(c, p, shared);  // generated before the backend asks, as by an earlier backend
    const Result y = run_backend(*b, c, p, Workload{}, shared);
    ASSERT_TRUE(x.ok() && y.ok()) << x.message << "\n" << y.message;
    EXPECT_EQ(result_digest(x), result_digest(y));
    ++ran;
  }
  EXPECT_GE(ran, 3);
}
