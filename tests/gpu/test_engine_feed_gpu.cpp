// /engine vllm-flashinfer on the device: flashinfer.decode and flashinfer.prefill launched on the
// units vLLM's FlashInfer backend builds (fi_engine_feed.h), checked against cuda.reference under
// FlashAttention's 2x rule (cpu.lowp the same-precision baseline) plus FlashInfer's LSE bound, on
// seeded random batches over shuffled pools with poisoned unused pages (poisoned outputs: the
// backends' own). A batch vLLM splits between the two wrappers is refused naming the split, no launch.
// Skips with the reason where the flashinfer family is not compiled or there is no device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "fi_lse_bound.h"
#include "gpu_test_util.h"

using namespace attnscope;
using attnscope::testing::fi_lse_excess;
using attnscope::testing::gpu_cases;
using attnscope::testing::run_id;

namespace {

constexpr const char* kPrefill = "flashinfer.prefill";
constexpr const char* kDecode = "flashinfer.decode";

// kind 0: decodes; 1: extends and prefills; 2: either with chunked local attention; 3: mixed.
CaseSpec vllm_batch(uint64_t seed, int kind) {
  std::mt19937_64 g(seed * 7919 + static_cast<uint64_t>(kind));
  auto pick = [&g](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  CaseSpec c;
  c.name = "vllm-flashinfer seed " + std::to_string(seed) + " kind " + std::to_string(kind);
  c.dtype = seed % 2 ? DType::kBf16 : DType::kFp16;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.num_kv_heads = 1 << pick(0, 2);
  c.num_qo_heads = c.num_kv_heads << pick(0, 3);
  c.attention.causal = true;
  c.kv_cache.page_size = 1 << pick(2, 6);
  c.kv_cache.allocation = PageAlloc::kShuffled;
  c.kv_cache.allocation_seed = seed + 11;
  c.kv_cache.poison_unused = true;
  c.data.seed = seed * 31 + 5;
  c.engine = "vllm-flashinfer";
  const bool decode = kind == 0 || (kind == 2 && seed % 2 == 0);
  const int n = pick(1, 9);
  for (int r = 0; r < n; ++r) {
    const int kv = pick(1, 2500);
    const int q = decode ? 1 : (pick(0, 2) == 0 ? kv : std::min(kv, pick(2, 300)));  // a third are plain prefills
    c.requests.push_back({q, kv});
  }
  if (kind == 3) {  // a decode first, an extend last: vLLM runs both wrappers
    c.requests.insert(c.requests.begin(), RequestSpec{1, pick(2, 900)});
    c.requests.push_back(RequestSpec{pick(2, 64), pick(300, 900)});
  }
  if (kind == 2) c.attention.local_chunk = c.kv_cache.page_size * pick(1, 8) * 4;
  validate_case(c);
  return c;
}

// The 2x rule on O, FlashInfer's LSE bound, no NaN. The run's message, or the refusal when refused.
std::string check_fed(const std::string& id, const CaseSpec& c, bool* ran) {
  const Plan p = plan_case(c);
  const Workload w = make_workload(c, p.pages);
  const Result a = run_id(id, c, p, w);
  *ran = a.ok();
  if (!a.ok()) return a.message;
  const Result ref = run_id("cuda.reference", c, p, w), lowp = run_id("cpu.lowp", c, p, w);
  EXPECT_TRUE(ref.ok()) << ref.message;
  int64_t nan = 0;
  for (float x : a.o) nan += std::isnan(x);
  for (float x : a.lse) nan += std::isnan(x);
  EXPECT_EQ(nan, 0) << c.name << ": NaN (a poisoned page read or an output left unwritten)\n  " << a.message;
  const DiffReport d = compare_results(c, a, ref, {id, "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  EXPECT_TRUE(d.verdict.pass) << c.name << " (" << id << "): " << d.verdict.detail << "\n  " << a.message;
  EXPECT_LE(fi_lse_excess(c, a, ref, id == std::string(kPrefill)), 0.0) << c.name << " (" << id << "): LSE";
  EXPECT_NE(a.message.find("fed from vLLM's "), std::string::npos) << a.message;
  return a.message;
}

}  // namespace

TEST(FlashInferFeed, FedFromVllmsTensors) {
  const BackendFamily* f = family_of(kPrefill);
  if (!f || !f->compiled) GTEST_SKIP() << "the flashinfer family is not compiled: " << (f ? f->note : "absent");
  std::string why;
  if (query_devices(&why).empty()) GTEST_SKIP() << why;
  const int want = gpu_cases(12, 2);
  int ran[3] = {0, 0, 0}, split_refusals = 0;
  for (uint64_t seed = 1000; seed < 1000 + static_cast<uint64_t>(want) * 4; ++seed)
    for (int kind = 0; kind < 3; ++kind) {
      if (ran[kind] >= want) continue;
      const CaseSpec c = vllm_batch(seed, kind);
      const bool decode = c.requests[0].q_len == 1 && c.requests.back().q_len == 1;
      const std::string id = decode ? kDecode : kPrefill;
      if (const std::string w = make_backend(id)->check(c); !w.empty()) {
        ASSERT_NE(w.find("not instantiated"), std::string::npos) << c.name << ": " << w;
        GTEST_SKIP() << w;
      }
      SCOPED_TRACE(c.name + " on " + id);
      bool ok = false;
      const std::string msg = check_fed(id, c, &ok);
      if (ok) {
        ++ran[kind];
      } else {  // a local batch whose first virtual batch holds one query is split between the wrappers
        EXPECT_NE(msg.find("split_decodes_and_prefills"), std::string::npos) << msg;
        ++split_refusals;
      }
    }
  for (int k = 0; k < 3; ++k) EXPECT_GE(ran[k], want) << "kind " << k << " ran " << ran[k] << " of " << want;
  // mixed prefill + decode: each backend refuses, naming the wrapper vLLM gives the other requests
  for (uint64_t seed = 2000; seed < 2003; ++seed) {
    const CaseSpec c = vllm_batch(seed, 3);
    for (const char* id : {kDecode, kPrefill}) {
      const Plan p = plan_case(c);
      const Result r = run_id(id, c, p, make_workload(c, p.pages));
      EXPECT_EQ(r.status, Status::kUnsupported) << c.name << " " << id << ": " << r.message;
      if (std::string(id) == kPrefill)
        EXPECT_NE(r.message.find("to its decode wrapper: split_decodes_and_prefills"), std::string::npos) << r.message;
    }
  }
  std::cout << "[ fed      ] decode " << ran[0] << ", prefill " << ran[1] << ", local " << ran[2] << "; " << split_refusals
            << " local batches split between the wrappers\n";
}
