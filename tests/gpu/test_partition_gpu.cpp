// Partitions across kernels on the GPU (issue 44, docs/partitions.md): the device generator follows a
// partition's key numbering bit for bit, and each GPU backend run over 2 / 4 / 8 virtual ranks x
// interleave 1 / 16 / 64 (and over a cascade) is within the 2x rule of the unpartitioned reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "attnscope/device.h"
#include "attnscope/partition.h"
#include "attnscope/registry.h"
#include "case_builders.h"
#include "case_json.h"
#include "gpu_test_util.h"
#include "session.h"

using namespace attnscope;
using attnscope::testing::add_requests;

namespace {

// Decode over 4 requests (one shorter than a rank's turn, so some ranks hold none of its keys); poisoned
// shuffled pages, so a kernel reading a slot its partition does not own shows NaN.
CaseSpec decode_case(const std::string& id, int ranks, int interleave, uint64_t seed) {
  CaseSpec c;
  c.name = id + "-cp" + std::to_string(ranks) + "x" + std::to_string(interleave);
  c.num_qo_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.kv_cache.page_size = id == "flash_attn.kvcache" ? 256 : 16;  // FA2's paged cache takes multiples of 256
  c.kv_cache.allocation = PageAlloc::kShuffled;
  c.kv_cache.allocation_seed = seed;
  c.kv_cache.poison_unused = true;
  c.data.seed = seed;
  add_requests(c, {{1, 3}, {1, 200}, {1, 1000}, {1, 3001}});
  if (id == "flashinfer.mla" || id == "flashinfer.mla_sm90") {
    c.mla = MlaSpec{};
    c.num_qo_heads = 16;
    c.num_kv_heads = 1;
    c.head_dim_qk = 576;
    c.head_dim_vo = 512;
    c.kv_cache.page_size = 64;
  }
  c.parallel = ParallelSpec{ContextParallelSpec{ranks, interleave}, std::nullopt, {}};
  c.backends = {"cpu.reference", "cpu.lowp", id};
  c.comparisons = {{id, "cpu.reference", CompareRule::kTwiceLowp, 1e-2, 1e-5, "cpu.lowp"}};
  validate_case(c);
  return c;
}

void expect_partitioned_pass(const CaseSpec& c, const std::string& id) {
  const auto s = run_session(CaseFile{c});
  const Result* r = s->result(id);
  ASSERT_TRUE(r && r->ok()) << c.name << ": " << (r ? r->message : "not run");
  ASSERT_TRUE(r->partition);
  for (float v : r->o) ASSERT_TRUE(std::isfinite(v)) << c.name;
  EXPECT_TRUE(s->diffs[0].verdict.pass) << c.name << ": " << s->diffs[0].verdict.detail;
  // every merger of the build ran on the partials; attnscope's own device merge has its host's bits
  for (const MergeRun& m : r->partition->merges) {
    EXPECT_EQ(m.status, Status::kOk) << c.name << " " << m.id << ": " << m.message;
    if (m.id == "cuda.merge") EXPECT_EQ(m.vs_attnscope, "bit-identical") << c.name;
  }
}

}  // namespace

TEST(PartitionGpu, DeviceGeneratorFollowsThePartitionsKeys) {
  REQUIRE_GPU();
  for (const char* id : {"cuda.flash", "flashinfer.mla"}) {
    CaseSpec c = decode_case(id, 3, 16, 7);
    std::vector<CaseSpec> subs;
    for (const Partition& p : make_partitions(c)) subs.push_back(p.sub);
    c.requests.erase(c.requests.begin());  // the 3-key request is shorter than one page of shared prefix
    c.parallel = ParallelSpec{std::nullopt, CascadeSpec{c.kv_cache.page_size}, {}};
    for (const Partition& p : make_partitions(c)) subs.push_back(p.sub);
    subs.push_back(c);  // the cascade case itself: its shared prefix from one stream
    for (const CaseSpec& s : subs) {
      const Plan p = make_plan(s);
      const Workload w = make_workload(s, p.pages);
      std::vector<float> q, k, v;
      std::string why;
      ASSERT_TRUE(device_generated_inputs(s, p, &q, &k, &v, &why)) << why;
      ASSERT_EQ(k.size(), w.k_pool.size());
      for (size_t i = 0; i < k.size(); ++i) {
        if (std::isnan(k[i]) && std::isnan(w.k_pool[i])) continue;  // poisoned slots
        ASSERT_EQ(f32_bits(k[i]), f32_bits(w.k_pool[i])) << id << " K[" << i << "]";
      }
      for (size_t i = 0; i < v.size(); ++i) {
        if (std::isnan(v[i]) && std::isnan(w.v_pool[i])) continue;
        ASSERT_EQ(f32_bits(v[i]), f32_bits(w.v_pool[i])) << id << " V[" << i << "]";
      }
    }
  }
}

class ContextParallel : public ::testing::TestWithParam<const char*> {};

TEST_P(ContextParallel, RanksByInterleaveWithinTheTwiceLowpRule) {
  const std::string id = GetParam();
  REQUIRE_COMPILED_GPU(id);
  REQUIRE_TAKES(id, decode_case(id, 2, 1, 1));
  uint64_t seed = 100;
  for (int ranks : {2, 4, 8})
    for (int il : {1, 16, 64}) expect_partitioned_pass(decode_case(id, ranks, il, ++seed), id);
}

INSTANTIATE_TEST_SUITE_P(Backends, ContextParallel,
                         ::testing::Values("cuda.flash", "flashinfer.decode", "flashinfer.prefill", "flashinfer.mla",
                                           "flash_attn.kvcache"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '.') ch = '_';
                           return n;
                         });

// The shipped cascade example on each GPU backend it lists: within the 2x rule of the plain reference.
TEST(PartitionGpu, CascadeExampleWithinTheTwiceLowpRule) {
  REQUIRE_GPU();
  const CaseSpec base = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/cascade-shared-prefix.json").spec;
  int ran = 0;
  for (const char* id : {"cuda.flash", "flashinfer.prefill"}) {
    if (!make_backend(id)->check(base).empty()) continue;
    CaseSpec c = base;
    c.backends = {"cpu.reference", "cpu.lowp", id};
    c.comparisons = {{id, "cpu.reference", CompareRule::kTwiceLowp, 1e-2, 1e-5, "cpu.lowp"}};
    c.kv_cache.poison_unused = true;
    expect_partitioned_pass(c, id);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "neither cuda.flash nor flashinfer.prefill takes the cascade example here";
}

// The base-mix example on the GPU: flashinfer.decode's base-2 partials merged as natural log fail and
// name the base (sglang #40903); cuda.flash, merged in its own base, passes.
TEST(PartitionGpu, BaseMixExampleFailsOnFlashInferOnly) {
  REQUIRE_COMPILED_GPU("flashinfer.decode");
  const auto s = run_session(read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/lse-base-mixup.json"));
  for (const DiffReport& d : s->diffs) {
    if (d.backend == "cuda.flash") EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
    if (d.backend == "flashinfer.decode") {
      EXPECT_FALSE(d.verdict.pass);
      EXPECT_NE(d.verdict.detail.find("base-2 LSE as natural log"), std::string::npos) << d.verdict.detail;
    }
  }
  bool checked = false;
  for (const MergeBaseCheck& m : s->merge_checks)
    if (m.backend == "flashinfer.decode") {
      checked = true;
      EXPECT_EQ(m.verdict.rfind("base 2", 0), 0u) << m.verdict;
    }
  EXPECT_TRUE(checked);
}

// Ranks on 2 or more GPUs at once give the bits of the same ranks run one after another on one GPU
// (the same merge order), for each GPU backend; the report says where each rank ran.
TEST(PartitionGpu, RanksOnSeveralGpusAreTheVirtualRunsBits) {
  REQUIRE_GPU();
  std::string why;
  const int n = static_cast<int>(query_devices(&why).size());
  if (n < 2) GTEST_SKIP() << "one GPU here: the ranks run virtually (this test needs 2 or more)";
  for (const char* id : {"cuda.flash", "flashinfer.decode", "flashinfer.prefill"}) {
    if (!make_backend(id)->check(decode_case(id, 4, 16, 3)).empty()) continue;
    const CaseSpec c = decode_case(id, 4, 16, 3);
    SessionOptions one, many;
    one.partition_gpus = 1;
    many.partition_gpus = n;
    const auto a = run_session(CaseFile{c}, one), b = run_session(CaseFile{c}, many);
    const Result *ra = a->result(id), *rb = b->result(id);
    ASSERT_TRUE(ra && ra->ok() && rb && rb->ok()) << id;
    EXPECT_EQ(ra->partition->gpus, 1);
    EXPECT_EQ(rb->partition->gpus, std::min(n, 4));
    EXPECT_EQ(rb->partition->parts[1].device, 1);
    ASSERT_EQ(ra->o.size(), rb->o.size());
    for (size_t i = 0; i < ra->o.size(); ++i) ASSERT_EQ(f32_bits(ra->o[i]), f32_bits(rb->o[i])) << id << " O[" << i << "]";
    for (size_t i = 0; i < ra->lse.size(); ++i)
      ASSERT_EQ(f32_bits(ra->lse[i]), f32_bits(rb->lse[i])) << id << " LSE[" << i << "]";
    std::cout << id << ": " << rb->partition->collective << "\n";
  }
}
