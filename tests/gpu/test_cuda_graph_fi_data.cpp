// /cuda_graph on flashinfer.decode / flashinfer.prefill with the data features engines capture
// (docs/conventions.md section 17): an fp8_e4m3 KV cache with its tensor scales (the FP8 launch and
// the wrapper's `out *= v_scale` in one graph), gpt-oss's attention sinks (the prefill's per-head
// sink rows) and ALiBi (positions relative to each entry). Random batches on shuffled pools with
// poisoned pages, captured at a bucket under SGLang's and vLLM's padding: the real rows against the
// eager run, the padded rows against what the kernel writes for them (FP8-dequantised V times v_scale,
// the sink's weight), the fit verdict. Skips with the reason without a device or the flashinfer family.
#include <gtest/gtest.h>

#include <cstdio>

#include "attnscope/paging.h"
#include "attnscope/registry.h"
#include "attnscope/workload.h"
#include "case_json.h"
#include "cuda_graph_run.h"
#include "gpu_test_util.h"
#include "graph_test_util.h"
#include "require.h"
#include "session.h"

using namespace attnscope;
using attnscope::testing::check_of;
using attnscope::testing::checks_text;
using attnscope::testing::graph_of;

namespace {

constexpr const char* kDecode = "flashinfer.decode";
constexpr const char* kPrefill = "flashinfer.prefill";

// graph_batch (graph_test_util.h) with the reference and low-precision baseline on the CPU (they take
// FP8 caches and sinks). Backends the case cannot run are left out by the caller.
CaseSpec data_case(int n, int q_len, int bucket, GraphEngine e, uint64_t seed, int max_kv = 600) {
  CaseSpec c = attnscope::testing::graph_batch(n, q_len, bucket, e, seed, max_kv);
  c.name = "graph-data-" + std::to_string(seed);
  c.backends = {"cpu.reference", "cpu.lowp", kPrefill};
  if (q_len == 1) c.backends.push_back(kDecode);
  return c;
}

// An e4m3 cache with tensor scales: from amax, or (odd seeds) given ones far from amax's.
void make_fp8(CaseSpec* c, uint64_t seed) {
  c->kv_cache.fp8 = Fp8Format::kE4M3;
  c->kv_cache.scales = KvScalesSpec{};
  c->kv_cache.scales.granularity = ScaleGranularity::kTensor;
  if (seed % 2) {
    c->kv_cache.scales.k = {0.0125};
    c->kv_cache.scales.v = {0.0075};
  }
}

// Captured, replayed, and every one of the three checks run and passed; the padded rows' detail.
std::string expect_replayed(const Session& s, const std::string& id, const std::string& label) {
  const Result* r = s.result(id);
  EXPECT_TRUE(r && r->ok()) << label << " " << id << ": " << (r ? r->message : "no result");
  const GraphReplayReport& g = graph_of(s, id);
  EXPECT_TRUE(g.captured) << label << " " << id << ": " << g.not_captured;
  if (!g.captured) return "";
  EXPECT_FALSE(g.failed()) << label << " " << id << checks_text(g);
  for (const char* what : {"real rows", "padded rows", "fits the captured grid"}) {
    const GraphCheck* k = check_of(g, what);
    EXPECT_NE(k, nullptr) << label << " " << id << " has no check " << what << checks_text(g);
    if (k) {
      EXPECT_FALSE(k->skipped) << label << " " << id << " " << what << ": " << k->detail;
    }
  }
  EXPECT_EQ(g.captured_grid, g.replay_grid) << label << " " << id;
  const GraphCheck* k = check_of(g, "padded rows");
  return k ? k->detail : "";
}

#define REQUIRE_FLASHINFER_GRAPHS()                            \
  do {                                                         \
    REQUIRE_GPU();                                             \
    REQUIRE_COMPILED(kPrefill);                                \
    CaseSpec c_ = data_case(1, 1, 2, GraphEngine::kSglang, 1); \
    validate_case(c_, &registry_ids());                        \
    REQUIRE_WHY_EMPTY(make_backend(kDecode)->check(c_));       \
  } while (0)

// A backend's own refusal of the case (not instantiated in this build): the test says so and skips it.
bool runs(const CaseSpec& c, const std::string& id, const std::string& label) {
  const std::string why = make_backend(id)->check(c);
  if (why.empty()) return true;
  std::printf("%s: %s not run: %s\n", label.c_str(), id.c_str(), why.c_str());
  EXPECT_NE(why.find("not instantiated"), std::string::npos) << label << " " << id << ": " << why;
  return false;
}

}  // namespace

// FP8 e4m3 with scales != 1 on decode and prefill, both engines, NHD and HND: the captured graph
// holds the FP8 launch and `out *= v_scale`; SGLang's padded rows are the dequantised key times
// v_scale (bit-exact), vLLM's zero.
TEST(CudaGraphFiData, Fp8DecodeAndPrefillReplayForBothEngines) {
  REQUIRE_FLASHINFER_GRAPHS();
  const int n = attnscope::testing::gpu_cases(6, 2);
  int replayed = 0;
  for (int i = 0; i < n; ++i) {
    const GraphEngine e = i % 2 ? GraphEngine::kVllm : GraphEngine::kSglang;
    const int live = 1 + i * 5 % 12;
    const uint64_t seed = 4100 + i;
    CaseSpec c = data_case(live, 1, live + 1 + i % 4, e, seed);
    if (i % 3 == 1) c.kv_cache.layout = KvLayout::kHND;
    make_fp8(&c, seed);
    validate_case(c, &registry_ids());
    const std::string label = "fp8 case " + std::to_string(i) + " (" + graph_engine_name(e) + ", " + std::to_string(live) +
                              " live, bucket " + std::to_string(c.cuda_graph->bucket) + ")";
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    ASSERT_FALSE(w.v_scale.empty());
    EXPECT_NE(w.v_scale[0], 1.0f) << label << ": the test needs v_scale != 1";
    auto s = run_session(CaseFile{c});
    for (const char* id : {kDecode, kPrefill}) {
      if (!runs(c, id, label)) continue;
      EXPECT_NE(s->result(id)->message.find("FP8"), std::string::npos) << s->result(id)->message;
      const std::string padded = expect_replayed(*s, id, label);
      ++replayed;
      if (e == GraphEngine::kSglang) {
        EXPECT_NE(padded.find("v_scale"), std::string::npos) << label << ": " << padded;
      }
    }
  }
  EXPECT_GT(replayed, 0) << "neither backend took an FP8 case in this build";
}

// FP8 prefill under a fixed split: the live entries' chunks are the eager run's, so the replayed real
// rows carry its bits (k_scale in the captured sm_scale, v_scale on the captured output).
TEST(CudaGraphFiData, Fp8FixedSplitPrefillIsBitIdenticalToTheEagerRun) {
  REQUIRE_FLASHINFER_GRAPHS();
  CaseSpec c = data_case(6, 1, 9, GraphEngine::kSglang, 4201);
  make_fp8(&c, 4201);
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 64;
  c.backends = {"cpu.reference", "cpu.lowp", kPrefill};
  validate_case(c, &registry_ids());
  if (!runs(c, kPrefill, "fp8 fixed split")) GTEST_SKIP() << "FP8 prefill not instantiated";
  auto s = run_session(CaseFile{c});
  expect_replayed(*s, kPrefill, "fp8 fixed split");
  const GraphCheck* k = check_of(graph_of(*s, kPrefill), "real rows");
  ASSERT_NE(k, nullptr);
  EXPECT_NE(k->detail.find("bit-identical"), std::string::npos) << k->detail;
}

// gpt-oss's sinks on flashinfer.prefill (the decode kernel has no sinks variant): decode batches
// under both engines and SGLang's target verify, with and without a window. SGLang's padded decode
// rows carry the sink's weight V / (1 + e^sink), vLLM's are zero.
TEST(CudaGraphFiData, SinksPrefillReplaysWithTheSinkInThePaddedRows) {
  REQUIRE_FLASHINFER_GRAPHS();
  const int n = attnscope::testing::gpu_cases(6, 3);
  int replayed = 0;
  for (int i = 0; i < n; ++i) {
    const GraphEngine e = i % 3 == 1 ? GraphEngine::kVllm : GraphEngine::kSglang;
    const int q_len = i % 3 == 2 ? 3 : 1;  // SGLang's target verify on every third
    const int live = 1 + i * 3 % 10;
    CaseSpec c = data_case(live, q_len, live + 1 + i % 3, e, 4300 + i);
    c.attention.sinks = SinksSpec{};
    if (i % 2) c.attention.window = 128;
    c.backends = {"cpu.reference", "cpu.lowp", kPrefill};
    validate_case(c, &registry_ids());
    const std::string label = "sinks case " + std::to_string(i) + " (" + graph_engine_name(e) + ", q_len " +
                              std::to_string(q_len) + ", " + std::to_string(live) + " live" + (i % 2 ? ", window" : "") + ")";
    if (!runs(c, kPrefill, label)) continue;
    auto s = run_session(CaseFile{c});
    const std::string padded = expect_replayed(*s, kPrefill, label);
    ++replayed;
    if (e == GraphEngine::kSglang && q_len == 1) {
      EXPECT_NE(padded.find("e^sink"), std::string::npos) << label << ": " << padded;
    }
    EXPECT_NE(s->summary().state, RunSummary::State::kFailed) << label << ": " << s->summary().line();
  }
  if (replayed == 0) GTEST_SKIP() << "the sinks variant is not instantiated for head_dim 128 bf16 in this build";
}

// ALiBi: the kernels' positions are relative to each entry (FlashInfer's qo_idx / kv_idx), the LSE
// shift of the real rows comes from the padded batch's origins. Decode and prefill, both engines,
// one case with chunked local attention; under a fixed split the prefill's O and LSE are the eager bits.
TEST(CudaGraphFiData, AlibiDecodeAndPrefillReplayForBothEngines) {
  REQUIRE_FLASHINFER_GRAPHS();
  const int n = attnscope::testing::gpu_cases(6, 2);
  for (int i = 0; i < n; ++i) {
    const GraphEngine e = i % 2 ? GraphEngine::kVllm : GraphEngine::kSglang;
    const int live = 2 + i * 3 % 9;
    CaseSpec c = data_case(live, 1, live + 2 + i % 3, e, 4400 + i);
    c.attention.alibi = true;
    if (i == 2) {
      c.attention.local_chunk = 256;
      c.requests[0].kv_len = 257;
    }
    if (i == 3) c.attention.window = 200;
    validate_case(c, &registry_ids());
    const std::string label = "alibi case " + std::to_string(i) + " (" + graph_engine_name(e) + ", " + std::to_string(live) +
                              " live" + (i == 2 ? ", chunked local" : "") + ")";
    auto s = run_session(CaseFile{c});
    for (const char* id : {kDecode, kPrefill})
      if (runs(c, id, label)) expect_replayed(*s, id, label);
  }
  // fixed split: bit-identical LSE needs each live entry's ALiBi origin in the replay's units
  CaseSpec c = data_case(5, 1, 8, GraphEngine::kSglang, 4450);
  c.attention.alibi = true;
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 64;
  c.backends = {"cpu.reference", "cpu.lowp", kPrefill};
  validate_case(c, &registry_ids());
  auto s = run_session(CaseFile{c});
  expect_replayed(*s, kPrefill, "alibi fixed split");
  const GraphCheck* k = check_of(graph_of(*s, kPrefill), "real rows");
  ASSERT_NE(k, nullptr);
  EXPECT_NE(k->detail.find("bit-identical"), std::string::npos) << k->detail;
}

// Sinks with ALiBi stay uncaptured: the sinks variant's rows hold each unit's ALiBi origin shift.
TEST(CudaGraphFiData, SinksWithAlibiSayWhyTheyAreNotCaptured) {
  REQUIRE_FLASHINFER_GRAPHS();
  CaseSpec c = data_case(3, 1, 4, GraphEngine::kSglang, 4500);
  c.attention.alibi = true;
  c.attention.sinks = SinksSpec{};
  c.backends = {kPrefill};
  validate_case(c, &registry_ids());
  if (!runs(c, kPrefill, "sinks with alibi")) GTEST_SKIP() << "the sinks variant is not instantiated";
  auto s = run_session(CaseFile{c});
  const GraphReplayReport& g = graph_of(*s, kPrefill);
  EXPECT_FALSE(g.captured);
  EXPECT_NE(g.not_captured.find("sinks with ALiBi"), std::string::npos) << g.not_captured;
  EXPECT_TRUE(s->result(kPrefill)->ok()) << s->result(kPrefill)->message;
}
