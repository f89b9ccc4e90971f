// The GUI's runner: staged snapshots, a newer case cancels the stale run, nothing blocks.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "case_gen.h"
#include "runner.h"

using namespace attnscope;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<const Snapshot> wait_done(const Runner& r, uint64_t gen, std::chrono::seconds limit = 120s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    auto s = r.latest();
    if (s && s->generation == gen && s->done) return s;
    if (std::chrono::steady_clock::now() - t0 > limit) return nullptr;
    std::this_thread::sleep_for(2ms);
  }
}

CaseFile file_of(uint64_t seed, const char* name) {
  CaseFile f;
  f.spec = attnscope::testing::random_case(seed);
  f.spec.name = name;
  f.spec.comparisons = {{"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}};
  return f;
}

}  // namespace

TEST(Runner, PublishesThePlanFirstThenEveryStage) {
  Runner r;
  const uint64_t gen = r.submit(file_of(3, "staged"));
  std::vector<size_t> seen;  // results count of each snapshot observed
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const Snapshot> last;
  while (std::chrono::steady_clock::now() - t0 < 60s) {
    auto s = r.latest();
    if (s && s->generation == gen && s->session && s != last) {
      seen.push_back(s->session->results.size());
      last = s;
      if (s->done) break;
    }
    std::this_thread::sleep_for(100us);
  }
  ASSERT_TRUE(last && last->done);
  EXPECT_EQ(last->session->results.size(), 3u);
  EXPECT_EQ(last->session->diffs.size(), 1u);
  EXPECT_TRUE(last->error.empty());
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i], seen[i - 1]) << "stages only add results";
}

TEST(Runner, ANewerCaseCancelsTheStaleRun) {
  Runner r;
  CaseFile big = file_of(1, "stale");
  big.spec.requests.assign(8, RequestSpec{256, 4096});
  big.spec.attention = AttentionSpec{};
  big.spec.kv_cache = KvCacheSpec{};
  big.spec.split = SplitSpec{};
  big.spec.sample_rows.reset();
  r.submit(big);
  const uint64_t gen = r.submit(file_of(2, "fresh"));
  const auto t0 = std::chrono::steady_clock::now();
  auto s = wait_done(r, gen);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->session->spec().name, "fresh");
  // the stale run (seconds of cpu.reference on 8 x 256 x 4096) was cut short
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(r.latest()->generation, gen);
}

TEST(Runner, AnInvalidCaseIsAnErrorSnapshot) {
  Runner r;
  CaseFile f = file_of(4, "invalid");
  f.spec.num_kv_heads = 3;
  f.spec.num_qo_heads = 4;
  const uint64_t gen = r.submit(f);
  auto s = wait_done(r, gen);
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->session);
  EXPECT_NE(s->error.find("/heads/kv"), std::string::npos) << s->error;
}

// A run that superseded another finishes, but only up to its sampled pass: the full reference after it
// (minutes here) is the background's, and a newer case supersedes it at once.
TEST(Runner, ANewerCaseSupersedesTheBackgroundFill) {
  Runner r;
  CaseFile first = file_of(1, "first");  // seconds of cpu.reference: still running when the next case comes
  first.spec.requests.assign(8, RequestSpec{256, 4096});
  first.spec.attention = AttentionSpec{};
  first.spec.kv_cache = KvCacheSpec{};
  first.spec.split = SplitSpec{};
  first.spec.sample_rows.reset();
  CaseFile large = first;
  large.spec.name = "large";
  large.spec.requests.assign(2, RequestSpec{8192, 8192});
  large.spec.num_qo_heads = large.spec.num_kv_heads = 8;
  large.spec.head_dim_qk = large.spec.head_dim_vo = 128;
  large.spec.backends = {"cpu.reference"};
  large.spec.comparisons.clear();
  ASSERT_TRUE(sample_first(large.spec, large.spec.backends, kFullReferenceBudget));
  r.submit(first);
  const auto t0 = std::chrono::steady_clock::now();
  while (!r.busy() && std::chrono::steady_clock::now() - t0 < 10s) std::this_thread::sleep_for(1ms);
  const uint64_t g_large = r.submit(large);  // supersedes "first", so it would finish
  std::shared_ptr<const Snapshot> sampled;
  while (!sampled && std::chrono::steady_clock::now() - t0 < 120s) {
    auto s = r.latest();
    if (s->generation == g_large && s->first_gen == g_large) sampled = s;
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(sampled) << "the sampled pass reached the screen";
  EXPECT_FALSE(sampled->done);
  ASSERT_TRUE(sampled->session);
  EXPECT_TRUE(sampled->session->is_sampled("cpu.reference"));
  EXPECT_NE(sampled_note(*sampled->session), "");
  const auto t1 = std::chrono::steady_clock::now();
  const uint64_t gen = r.submit(file_of(2, "fresh"));
  auto s = wait_done(r, gen);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->session->spec().name, "fresh");
  // the full reference of "large" (2 x 8192 x 8192 x 8 heads) was cut short, not waited for
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 20.0);
  EXPECT_EQ(s->first_gen, gen);
}
