// /cuda_graph on the GPU (docs/conventions.md, "CUDA-graph replay"): cuda.flash, flashinfer.decode,
// flashinfer.prefill and (on sm_90) flashinfer.prefill_sm90 captured into a CUDA graph at the bucket and replayed for the real
// batch padded as SGLang and vLLM pad it, on seeded random cases with shuffled pools and poisoned pages: the real rows against
// the eager run, the padded rows against the engine's expectation, the fit of the real batch's plan in the captured grid both
// ways (FlashInfer #1675's fixed split), and the backends that do not capture saying why. Skips with the reason without a device
// or the flashinfer family.
#include <gtest/gtest.h>

#include <cstdio>

#include "attnscope/registry.h"
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
constexpr const char* kFlash = "cuda.flash";
constexpr const char* kSm90 = "flashinfer.prefill_sm90";

#define REQUIRE_FLASHINFER()                                                        \
  do {                                                                              \
    REQUIRE_GPU();                                                                  \
    REQUIRE_COMPILED(kPrefill);                                                     \
    REQUIRE_WHY_EMPTY(refusal(kDecode, small_case(1, 1, 2, GraphEngine::kSglang))); \
  } while (0)

// graph_batch (graph_test_util.h) with the GPU references, FlashInfer and cuda.flash.
CaseSpec small_case(int n, int q_len, int bucket, GraphEngine e, uint64_t seed = 1, int max_kv = 700) {
  CaseSpec c = attnscope::testing::graph_batch(n, q_len, bucket, e, seed, max_kv);
  c.name = "graph";
  c.backends = {"cuda.reference", "cpu.lowp", kPrefill, "cuda.flash"};
  if (q_len == 1) c.backends.push_back(kDecode);
  validate_case(c, &registry_ids());
  return c;
}

// flashinfer.prefill_sm90 joins the case where it runs (compiled, instantiated for it, device 0 sm_90);
// elsewhere the caller skips its checks and this says why on stdout.
bool with_sm90(CaseSpec* c) {
  const std::string why = refusal(kSm90, *c);
  if (!why.empty()) {
    std::printf("%s not checked here: %s\n", kSm90, why.c_str());
    return false;
  }
  c->backends.push_back(kSm90);
  validate_case(*c, &registry_ids());
  return true;
}

// small_case for cuda.flash alone (no FlashInfer build needed), with its reference and lowp baseline.
CaseSpec flash_case(int n, int q_len, int bucket, GraphEngine e, uint64_t seed, int max_kv = 700) {
  CaseSpec c = small_case(n, q_len, bucket, e, seed, max_kv);
  c.backends = {"cuda.reference", "cpu.lowp", kFlash};
  validate_case(c, &registry_ids());
  return c;
}

// Every check of a captured replay passes, and there are the three of them.
void expect_replayed(const Session& s, const std::string& id, const std::string& label) {
  const GraphReplayReport& g = graph_of(s, id);
  ASSERT_TRUE(g.captured) << label << " " << id << ": " << g.not_captured;
  EXPECT_FALSE(g.failed()) << label << " " << id << checks_text(g);
  for (const char* what : {"real rows", "padded rows", "fits the captured grid"}) {
    const GraphCheck* k = check_of(g, what);
    ASSERT_NE(k, nullptr) << label << " " << id << " has no check " << what << checks_text(g);
    EXPECT_FALSE(k->skipped) << label << " " << id << " " << what << ": " << k->detail;
  }
  EXPECT_EQ(g.captured_grid, g.replay_grid) << label << " " << id;
  EXPECT_GT(g.captured_grid.padded_batch, 0);
}

// cuda.flash: every check passes; its captured grid is the replay plan's (the bucket's rows), its
// items and partials within what was captured (they are data: the chunk may differ).
void expect_flash_replayed(const Session& s, const std::string& label) {
  const GraphReplayReport& g = graph_of(s, kFlash);
  ASSERT_TRUE(g.captured) << label << ": " << g.not_captured;
  EXPECT_FALSE(g.failed()) << label << checks_text(g);
  for (const char* what : {"real rows", "padded rows", "fits the captured grid"}) {
    const GraphCheck* k = check_of(g, what);
    ASSERT_NE(k, nullptr) << label << " has no check " << what << checks_text(g);
    EXPECT_FALSE(k->skipped) << label << " " << what << ": " << k->detail;
  }
  EXPECT_EQ(g.captured_grid.padded_batch, g.replay_grid.padded_batch) << label;
  EXPECT_EQ(g.captured_grid.cta_tile_q, g.replay_grid.cta_tile_q) << label;
  EXPECT_LE(g.replay_grid.new_batch, g.captured_grid.padded_batch) << label;
  EXPECT_LE(g.replay_grid.float_ws, g.captured_grid.float_ws) << label;
  EXPECT_TRUE(g.captured_grid.split_kv && g.replay_grid.split_kv) << label;
}

#define REQUIRE_FLASH()                                                               \
  do {                                                                                \
    REQUIRE_GPU();                                                                    \
    REQUIRE_WHY_EMPTY(refusal(kFlash, flash_case(1, 1, 2, GraphEngine::kSglang, 1))); \
  } while (0)

}  // namespace

TEST(CudaGraphGpu, RandomDecodeBatchesReplayForBothEngines) {
  REQUIRE_FLASHINFER();
  const int n = attnscope::testing::gpu_cases(6, 2);
  for (int i = 0; i < n; ++i) {
    const GraphEngine e = i % 2 ? GraphEngine::kVllm : GraphEngine::kSglang;
    const int live = 1 + i * 3 % 13;
    CaseSpec c = small_case(live, 1, live + 1 + i % 5, e, 100 + i);
    const bool sm90 = with_sm90(&c);
    const std::string label = "case " + std::to_string(i) + " (" + graph_engine_name(e) + ", " + std::to_string(live) +
                              " live, bucket " + std::to_string(c.cuda_graph->bucket) + ")";
    auto s = run_session(CaseFile{c});
    expect_replayed(*s, kDecode, label);
    expect_replayed(*s, kPrefill, label);
    if (sm90) expect_replayed(*s, kSm90, label);
    expect_flash_replayed(*s, label);
    EXPECT_NE(s->summary().state, RunSummary::State::kFailed) << label << ": " << s->summary().line();
  }
}

TEST(CudaGraphGpu, TargetVerifyBatchesReplayOnPrefill) {
  REQUIRE_FLASHINFER();
  CaseSpec c = small_case(5, 3, 8, GraphEngine::kSglang, 7);
  const bool sm90 = with_sm90(&c);
  auto s = run_session(CaseFile{c});
  expect_replayed(*s, kPrefill, "target verify");
  if (sm90) expect_replayed(*s, kSm90, "target verify");
  const GraphCheck* k = check_of(graph_of(*s, kPrefill), "padded rows");
  ASSERT_NE(k, nullptr);
  EXPECT_NE(k->detail.find("draft tokens"), std::string::npos) << k->detail;
}

TEST(CudaGraphGpu, FixedSplitThatFitsIsBitIdenticalToTheEagerRun) {
  REQUIRE_FLASHINFER();
  // a split size past every request (700 keys = 44 pages): one chunk in the capture and the replay
  CaseSpec c = small_case(6, 1, 9, GraphEngine::kSglang, 11);
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 64;
  c.backends = {"cuda.reference", "cpu.lowp", kPrefill};
  auto s = run_session(CaseFile{c});
  expect_replayed(*s, kPrefill, "fixed split 64 pages");
  const GraphCheck* k = check_of(graph_of(*s, kPrefill), "real rows");
  ASSERT_NE(k, nullptr);
  EXPECT_NE(k->detail.find("bit-identical"), std::string::npos) << k->detail;
}

TEST(CudaGraphGpu, FixedSplitThatOutgrowsTheCaptureIsAVerdictNotACrash) {
  REQUIRE_FLASHINFER();
  // FlashInfer #1675: captured with one-key entries (one chunk each: no split-KV), the real batch's
  // 1-page chunks split it; the captured kernel has no merge and its grid was sized for one chunk each
  CaseSpec c = small_case(12, 1, 16, GraphEngine::kSglang, 13, 100);
  c.requests[0].kv_len = 100;
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 1;
  c.backends = {kPrefill};
  auto s = run_session(CaseFile{c});
  const Result* r = s->result(kPrefill);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->ok()) << r->message;  // the eager run stands
  const GraphReplayReport& g = graph_of(*s, kPrefill);
  ASSERT_TRUE(g.captured) << g.not_captured;
  const GraphCheck* k = check_of(g, "fits the captured grid");
  ASSERT_NE(k, nullptr) << checks_text(g);
  EXPECT_FALSE(k->pass);
  EXPECT_NE(k->detail.find("does not fit"), std::string::npos) << k->detail;
  EXPECT_NE(k->detail.find("captured"), std::string::npos) << k->detail;
  EXPECT_EQ(check_of(g, "real rows"), nullptr) << "a replay that does not fit is not replayed";
  std::printf("verdict: %s\n", k->detail.c_str());
  EXPECT_EQ(s->summary().state, RunSummary::State::kFailed);
}

// flashinfer.prefill_sm90 with /split/planner fixed, both engines' padding. Its plan never splits KV:
// each row is computed by one CTA over all its keys in the same order whatever the schedule, so the
// replay promises the eager run's bits (the session checks bits under the fixed planner, else the
// twice_lowp rule). Its fit verdict: the persistent grid (one CTA per SM) and the CUDA-graph-sized
// work arrays depend only on the rows and the entries, which the padded batch shares with the capture.
TEST(CudaGraphGpu, Sm90ReplayIsBitIdenticalAndFitsTheCapturedGrid) {
  REQUIRE_FLASHINFER();
  for (int i = 0; i < 2; ++i) {
    const GraphEngine e = i ? GraphEngine::kVllm : GraphEngine::kSglang;
    CaseSpec c = small_case(5 + i, 1, 9 + 2 * i, e, 61 + i);
    c.split.planner = Planner::kFixed;
    c.split.fixed_split_size = 64;
    c.backends = {"cuda.reference", "cpu.lowp"};
    if (!with_sm90(&c)) GTEST_SKIP() << refusal(kSm90, c);
    const std::string label = std::string("sm90, ") + graph_engine_name(e);
    SessionOptions o;
    o.bench_reps = i == 0 ? 5 : 0;  // the first run timed: the replay's median beside the eager launch's
    auto s = run_session(CaseFile{c}, o);
    expect_replayed(*s, kSm90, label);
    const GraphReplayReport& g = graph_of(*s, kSm90);
    const GraphCheck* rows = check_of(g, "real rows");
    ASSERT_NE(rows, nullptr) << label << checks_text(g);
    EXPECT_NE(rows->detail.find("bit-identical"), std::string::npos) << label << ": " << rows->detail;
    const GraphCheck* fit = check_of(g, "fits the captured grid");
    ASSERT_NE(fit, nullptr) << label << checks_text(g);
    EXPECT_TRUE(fit->pass) << label << ": " << fit->detail;
    EXPECT_NE(fit->detail.find("grid " + std::to_string(g.captured_grid.padded_batch) + " x 1 CTAs"), std::string::npos)
        << label << ": " << fit->detail;
    EXPECT_FALSE(g.captured_grid.split_kv) << label;
    EXPECT_EQ(g.captured_grid.cta_tile_q, 128) << label;
    EXPECT_GT(g.captured_grid.int_ws, 0) << label;
    std::printf("%s: %s\n", label.c_str(), fit->detail.c_str());
    if (i == 0) {
      EXPECT_EQ(g.replay_reps, 20) << label;
      EXPECT_GT(g.replay_ms, 0) << label;
      EXPECT_EQ(g.eager_ms, s->result(kSm90)->timing.device_ms) << label;
      std::printf("%s bucket %d (%d live): %s\n", kSm90, g.bucket, g.live, graph_time_text(g).c_str());
    } else {
      EXPECT_EQ(g.replay_reps, 0) << label << ": an untimed run times no replay";
    }
    EXPECT_NE(s->summary().state, RunSummary::State::kFailed) << label << ": " << s->summary().line();
  }
}

TEST(CudaGraphGpu, UncapturedCasesSayWhy) {
  REQUIRE_FLASHINFER();
  CaseSpec c = small_case(3, 1, 4, GraphEngine::kSglang, 17);
  c.attention.alibi = true;  // ALiBi alone is captured; with sinks the sink rows carry per-unit origins
  c.attention.sinks = SinksSpec{};
  c.backends = {kPrefill};
  auto s = run_session(CaseFile{c});
  const GraphReplayReport& g = graph_of(*s, kPrefill);
  EXPECT_FALSE(g.captured);
  EXPECT_NE(g.not_captured.find("ALiBi"), std::string::npos) << g.not_captured;
  EXPECT_TRUE(s->result(kPrefill)->ok());
  // flashinfer.prefill_sm90 runs FP8 attention eagerly; the padded batch does not model an FP8 cache
  CaseSpec f = small_case(3, 1, 4, GraphEngine::kSglang, 19);
  f.kv_cache.fp8 = Fp8Format::kE4M3;
  f.fp8_attention = Fp8AttentionSpec{};
  f.backends.clear();
  if (!with_sm90(&f)) return;
  auto s8 = run_session(CaseFile{f});
  const Result* r8 = s8->result(kSm90);
  ASSERT_NE(r8, nullptr);
  ASSERT_TRUE(r8->ok()) << r8->message;
  const GraphReplayReport& g8 = graph_of(*s8, kSm90);
  EXPECT_FALSE(g8.captured);
  EXPECT_NE(g8.not_captured.find("FP8"), std::string::npos) << g8.not_captured;
}

// cuda.flash under the flashinfer planner (the chunk follows the batch: twice_lowp rule), both engines'
// padding, decode and target verify, with and without ALiBi and sinks (per-head buffers).
TEST(CudaGraphGpu, FlashRandomBatchesReplayForBothEngines) {
  REQUIRE_FLASH();
  const int n = attnscope::testing::gpu_cases(8, 3);
  for (int i = 0; i < n; ++i) {
    const GraphEngine e = i % 2 ? GraphEngine::kVllm : GraphEngine::kSglang;
    const int q_len = e == GraphEngine::kSglang && i % 3 == 2 ? 3 : 1;  // vLLM's full graphs are pure decode
    const int live = 1 + i * 5 % 11;
    CaseSpec c = flash_case(live, q_len, live + 1 + i % 4, e, 300 + i);
    if (i % 4 == 1) c.attention.alibi = true;
    if (i % 4 == 3) c.attention.sinks = SinksSpec{};
    validate_case(c, &registry_ids());
    const std::string label = "case " + std::to_string(i) + " (" + graph_engine_name(e) + ", " + std::to_string(live) +
                              " live, q_len " + std::to_string(q_len) + ", bucket " + std::to_string(c.cuda_graph->bucket) +
                              (c.attention.alibi ? ", alibi" : "") + (c.has_sinks() ? ", sinks" : "") + ")";
    auto s = run_session(CaseFile{c});
    expect_flash_replayed(*s, label);
    EXPECT_NE(s->summary().state, RunSummary::State::kFailed) << label << ": " << s->summary().line();
  }
}

// A fixed split: the live requests' chunks are the eager run's, so the real rows are its bits, here
// with requests split into several chunks (the eager run merges too) and with sinks folded in.
TEST(CudaGraphGpu, FlashFixedSplitIsBitIdenticalToTheEagerRun) {
  REQUIRE_FLASH();
  for (int i = 0; i < 2; ++i) {
    CaseSpec c = flash_case(6, 1, 9, GraphEngine::kSglang, 21 + i);
    c.split.planner = Planner::kFixed;
    c.split.fixed_split_size = 4;  // 64 keys a chunk: up to 11 chunks a request
    if (i == 1) c.attention.sinks = SinksSpec{};
    validate_case(c, &registry_ids());
    auto s = run_session(CaseFile{c});
    expect_flash_replayed(*s, "fixed split 4 pages" + std::string(i ? ", sinks" : ""));
    const GraphCheck* k = check_of(graph_of(*s, kFlash), "real rows");
    ASSERT_NE(k, nullptr);
    EXPECT_NE(k->detail.find("bit-identical"), std::string::npos) << k->detail;
    EXPECT_GT(graph_of(*s, kFlash).replay_grid.new_batch, 9) << "some request must split";
  }
}

// FlashInfer #1675's analogue: 1-page chunks of 12 long requests need more work items than the grid
// captured for the bucket's rows: a verdict naming both numbers, no replay, the eager run stands.
TEST(CudaGraphGpu, FlashBatchThatOutgrowsTheCapturedGridIsAVerdict) {
  REQUIRE_FLASH();
  CaseSpec c = flash_case(12, 1, 16, GraphEngine::kSglang, 29);
  for (auto& r : c.requests) r.kv_len = std::max(r.kv_len, 400);
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 1;
  c.backends = {kFlash};
  validate_case(c, &registry_ids());
  auto s = run_session(CaseFile{c});
  ASSERT_TRUE(s->result(kFlash)->ok()) << s->result(kFlash)->message;
  const GraphReplayReport& g = graph_of(*s, kFlash);
  ASSERT_TRUE(g.captured) << g.not_captured;
  const GraphCheck* k = check_of(g, "fits the captured grid");
  ASSERT_NE(k, nullptr) << checks_text(g);
  EXPECT_FALSE(k->pass);
  EXPECT_NE(k->detail.find("the real batch needs " + std::to_string(g.replay_grid.new_batch) + " work items"), std::string::npos)
      << k->detail;
  EXPECT_GT(g.replay_grid.new_batch, g.captured_grid.padded_batch);
  EXPECT_EQ(check_of(g, "real rows"), nullptr) << "a replay that does not fit is not replayed";
  EXPECT_EQ(s->summary().state, RunSummary::State::kFailed);
  // the same batch with 64-page chunks fits
  c.split.fixed_split_size = 64;
  auto s2 = run_session(CaseFile{c});
  const GraphCheck* k2 = check_of(graph_of(*s2, kFlash), "fits the captured grid");
  ASSERT_NE(k2, nullptr);
  EXPECT_TRUE(k2->pass) << k2->detail;
}

TEST(CudaGraphGpu, FlashUncapturedCasesSayWhy) {
  REQUIRE_FLASH();
  // chunked local attention in target verify: an entry's queries may straddle two chunks
  CaseSpec c = flash_case(3, 3, 4, GraphEngine::kSglang, 31);
  c.attention.local_chunk = 256;
  validate_case(c, &registry_ids());
  auto s = run_session(CaseFile{c});
  const GraphReplayReport& g = graph_of(*s, kFlash);
  EXPECT_FALSE(g.captured);
  EXPECT_NE(g.not_captured.find("straddle"), std::string::npos) << g.not_captured;
  EXPECT_TRUE(s->result(kFlash)->ok());
}

// Llama-4's chunked local attention in decode (vLLM #28739): every entry, padding included, is the
// virtual batch of its query's chunk; captured and replayed on the three backends for both engines,
// with requests across one and several chunks and one that opens a chunk alone (257 keys).
TEST(CudaGraphGpu, ChunkedLocalDecodeBatchesReplayOnEveryBackend) {
  REQUIRE_FLASHINFER();
  for (int i = 0; i < 2; ++i) {
    const GraphEngine e = i ? GraphEngine::kVllm : GraphEngine::kSglang;
    CaseSpec c = small_case(7, 1, 11, e, 41 + i);
    c.attention.local_chunk = 256;
    c.requests[0].kv_len = 257;
    c.requests[1].kv_len = 256;
    validate_case(c, &registry_ids());
    const bool sm90 = with_sm90(&c);
    const std::string label = std::string("chunked local, ") + graph_engine_name(e);
    auto s = run_session(CaseFile{c});
    expect_replayed(*s, kDecode, label);
    expect_replayed(*s, kPrefill, label);
    if (sm90) expect_replayed(*s, kSm90, label);
    expect_flash_replayed(*s, label);
    EXPECT_NE(s->summary().state, RunSummary::State::kFailed) << label << ": " << s->summary().line();
  }
}

// A timed run (bench_reps) times the replay too: the median of 20 graph launches beside the eager
// launch's median, on every captured backend; an untimed run carries none. A measurement: only its
// presence and sign are checked.
TEST(CudaGraphGpu, TimedRunsReportTheReplayBesideTheEagerLaunch) {
  REQUIRE_FLASH();
  const CaseSpec c = flash_case(5, 1, 8, GraphEngine::kSglang, 51);
  SessionOptions o;
  o.bench_reps = 5;
  auto s = run_session(CaseFile{c}, o);
  const GraphReplayReport& g = graph_of(*s, kFlash);
  ASSERT_TRUE(g.captured) << g.not_captured;
  EXPECT_EQ(g.replay_reps, 20);
  EXPECT_GT(g.replay_ms, 0);
  EXPECT_EQ(g.eager_ms, s->result(kFlash)->timing.device_ms);
  EXPECT_GT(g.eager_ms, 0);
  std::printf("cuda.flash bucket 8 (5 live): %s\n", graph_time_text(g).c_str());
  EXPECT_EQ(graph_of(*run_session(CaseFile{c}), kFlash).replay_reps, 0);
}
