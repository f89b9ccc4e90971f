// Partitions across kernels (issue 44, docs/partitions.md): the context-parallel layout against positions
// written by hand, the sub-cases' inputs against the whole case's, attnscope's merge on rows worked by
// hand, empty shards, the partitioned runs of cpu.tiled against the reference, the base-mix example, the
// case rules, and the repro of a partitioned case.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnscope/partition.h"
#include "attnscope/registry.h"
#include "case_builders.h"
#include "case_json.h"
#include "repro.h"
#include "session.h"

using namespace attnscope;
using attnscope::testing::add_requests;
using attnscope::testing::rule_of;

namespace {

// The positions rank r owns of a `len`-key request, from shard_position / shard_size.
std::vector<int64_t> owned(int64_t len, int c, int r, int i) {
  std::vector<int64_t> v;
  for (int64_t j = 0; j < shard_size(len, c, r, i); ++j) v.push_back(shard_position(j, c, r, i));
  return v;
}

CaseSpec decode_case(int ranks, int interleave, const std::vector<int>& kv) {
  CaseSpec c;
  c.name = "cp";
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 32;
  c.kv_cache.page_size = 8;
  for (int n : kv) add_requests(c, {{1, n}});
  c.parallel = ParallelSpec{ContextParallelSpec{ranks, interleave}, std::nullopt, {}};
  c.backends = {"cpu.reference", "cpu.lowp", "cpu.tiled"};
  c.comparisons = {{"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 1e-2, 1e-5, "cpu.lowp"}};
  return c;
}

}  // namespace

TEST(Partition, ShardLayoutsAreTheHandWrittenPositions) {
  using V = std::vector<int64_t>;
  // c = 2, i = 1: SGLang's --dcp-size layout, even and odd positions
  EXPECT_EQ(owned(10, 2, 0, 1), (V{0, 2, 4, 6, 8}));
  EXPECT_EQ(owned(10, 2, 1, 1), (V{1, 3, 5, 7, 9}));
  // c = 2, i = 4: runs of 4
  EXPECT_EQ(owned(10, 2, 0, 4), (V{0, 1, 2, 3, 8, 9}));
  EXPECT_EQ(owned(10, 2, 1, 4), (V{4, 5, 6, 7}));
  // c = 4, i = 2: rank 3's run ends before the request does
  EXPECT_EQ(owned(10, 4, 0, 2), (V{0, 1, 8, 9}));
  EXPECT_EQ(owned(10, 4, 1, 2), (V{2, 3}));
  EXPECT_EQ(owned(10, 4, 2, 2), (V{4, 5}));
  EXPECT_EQ(owned(10, 4, 3, 2), (V{6, 7}));
  // c = 8, i = 64 on 70 keys: ranks 2..7 hold nothing
  EXPECT_EQ(shard_size(70, 8, 0, 64), 64);
  EXPECT_EQ(shard_size(70, 8, 1, 64), 6);
  EXPECT_EQ(shard_size(70, 8, 2, 64), 0);
  for (int64_t p = 0; p < 10; ++p) EXPECT_EQ(owner_rank(p, 4, 2), (p / 2) % 4) << p;
}

// A partition's inputs are the whole case's, key for key: its local key j holds the values of the
// position it owns (context) or of the prefix / suffix (cascade); the shared prefix is one stream.
TEST(Partition, SubCaseInputsAreTheWholeCasesKeys) {
  CaseSpec c = decode_case(3, 4, {37, 5, 100});
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const int Hk = c.num_kv_heads, D = c.head_dim_qk, ps = c.kv_cache.page_size;
  auto key = [&](const CaseSpec& cc, const PageTable& pt, const Workload& ww, int r, int k, int h, int d) {
    return ww.k_pool[kv_offset(cc.kv_cache.layout, pt.page_of(r, k), k % ps, h, d, ps, Hk, D)];
  };
  for (const Partition& part : make_partitions(c)) {
    const Plan sp = make_plan(part.sub);
    const Workload sw = make_workload(part.sub, sp.pages);
    for (size_t i = 0; i < part.requests.size(); ++i)
      for (int j = 0; j < part.sub.requests[i].kv_len; ++j) {
        const int64_t pos = shard_position(j, 3, part.rank, 4);
        ASSERT_EQ(key(part.sub, sp.pages, sw, static_cast<int>(i), j, 1, 7),
                  key(c, p.pages, w, part.requests[i], static_cast<int>(pos), 1, 7))
            << part.label << " request " << part.requests[i] << " key " << j;
      }
  }
  CaseSpec k = decode_case(2, 1, {40, 64});
  k.parallel = ParallelSpec{std::nullopt, CascadeSpec{16}, {}};
  const Plan kp = make_plan(k);
  const Workload kw = make_workload(k, kp.pages);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(key(k, kp.pages, kw, 0, j, 0, 3), key(k, kp.pages, kw, 1, j, 0, 3)) << j;
  EXPECT_NE(key(k, kp.pages, kw, 0, 16, 0, 3), key(k, kp.pages, kw, 1, 16, 0, 3));  // own keys: own streams
  const auto levels = make_partitions(k);
  const Plan l1 = make_plan(levels[1].sub);
  const Workload w1 = make_workload(levels[1].sub, l1.pages);
  EXPECT_EQ(key(levels[1].sub, l1.pages, w1, 1, 5, 1, 2), key(k, kp.pages, kw, 1, 21, 1, 2));
}

// Two partials of one element worked by hand: shares 1/4 and 3/4 (LSE 0 and ln 3), O = 1/4 + 3/4 * 3.
TEST(Partition, MergeOfTwoPartialsByHand) {
  const std::vector<float> oa{1.0f}, ob{3.0f}, la{0.0f}, lb{std::log(3.0f)};
  std::vector<float> o, lse;
  merge_partials({{oa.data(), la.data()}, {ob.data(), lb.data()}}, 1, 1, DType::kFp32, LseBase::kE, LseBase::kE, &o, &lse);
  EXPECT_NEAR(o[0], 2.5f, 2e-6f);
  EXPECT_NEAR(lse[0], std::log(4.0f), 2e-6f);
  // read in the wrong base the shares are m^k / sum m^k (docs/partitions.md): not 2.5
  merge_partials({{oa.data(), la.data()}, {ob.data(), lb.data()}}, 1, 1, DType::kFp32, LseBase::kE, LseBase::k2, &o, &lse);
  EXPECT_GT(std::fabs(o[0] - 2.5f), 0.1f);
}

TEST(Partition, EmptyPartialsWeighNothingAndGiveNoNaN) {
  const std::vector<float> oa{0.5f, -2.0f}, la{1.25f}, zero{0.0f, 0.0f}, none{-INFINITY};
  std::vector<float> o, lse;
  merge_partials({{zero.data(), none.data()}, {oa.data(), la.data()}, {zero.data(), none.data()}}, 1, 2, DType::kBf16,
                 LseBase::kE, LseBase::kE, &o, &lse);
  EXPECT_EQ(o, oa);
  EXPECT_NEAR(lse[0], 1.25f, 1e-6f);
  merge_partials({{zero.data(), none.data()}, {zero.data(), none.data()}}, 1, 2, DType::kBf16, LseBase::k2, LseBase::kE, &o,
                 &lse);
  EXPECT_EQ(o, zero);
  EXPECT_EQ(lse[0], -INFINITY);
}

// cpu.tiled over 2 / 4 / 8 ranks x interleave 1 / 16 / 64: within the 2x rule of the unpartitioned
// reference, its result the merge of its own partials, empty ranks O = 0 / LSE = -inf.
TEST(Partition, ContextParallelCpuTiledWithinTheTwiceLowpRule) {
  for (int ranks : {2, 4, 8})
    for (int il : {1, 16, 64}) {
      CaseSpec c = decode_case(ranks, il, {3, 70, 200, 700});
      c.data.seed = static_cast<uint64_t>(ranks * 100 + il);
      const auto s = run_session(CaseFile{c});
      const Result* t = s->result("cpu.tiled");
      ASSERT_TRUE(t && t->ok() && t->partition) << (t ? t->message : "");
      ASSERT_EQ(t->partition->parts.size(), static_cast<size_t>(ranks));
      EXPECT_TRUE(s->diffs[0].verdict.pass) << ranks << " x " << il << ": " << s->diffs[0].verdict.detail;
      for (float v : t->o) ASSERT_TRUE(std::isfinite(v));
      for (const auto& part : t->partition->parts)
        if (part.keys[0] == 0)  // request 0 (3 keys) on a rank that holds none of them
          for (int h = 0; h < c.num_qo_heads; ++h) {
            EXPECT_EQ(part.lse[h], -INFINITY) << part.label;
            EXPECT_EQ(part.o[h * c.head_dim_vo], 0.0f) << part.label;
          }
      std::vector<PartialRows> rows;
      for (const auto& part : t->partition->parts) rows.push_back({part.o.data(), part.lse.data()});
      std::vector<float> o, lse;
      merge_partials(rows, c.total_q() * c.num_qo_heads, c.head_dim_vo, c.dtype, LseBase::kE, LseBase::kE, &o, &lse);
      EXPECT_EQ(o, t->o);
    }
}

TEST(Partition, CascadeWithinTheTwiceLowpRuleOfThePlainRun) {
  CaseFile f = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/cascade-shared-prefix.json");
  f.spec.backends = {"cpu.reference", "cpu.lowp", "cpu.tiled"};
  f.spec.comparisons.resize(1);
  const auto s = run_session(f);
  ASSERT_TRUE(s->result("cpu.tiled")->partition);
  EXPECT_EQ(s->result("cpu.tiled")->partition->parts.size(), 2u);
  EXPECT_TRUE(s->diffs[0].verdict.pass) << s->diffs[0].verdict.detail;
}

// The shipped base-mix example: cpu.tiled's natural-log partials merged as base 2 fail the comparison,
// which names the bases; the base check finds the base they merge correctly in.
TEST(Partition, BaseMixExampleFailsAndNamesTheBase) {
  const auto s = run_session(read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/lse-base-mixup.json"));
  const DiffReport& d = s->diffs[0];
  ASSERT_EQ(d.backend, "cpu.tiled");
  EXPECT_FALSE(d.verdict.pass);
  EXPECT_NE(d.verdict.detail.find("natural-log LSE as base 2"), std::string::npos) << d.verdict.detail;
  ASSERT_EQ(s->merge_checks.size(), 1u);
  EXPECT_EQ(s->merge_checks[0].verdict.rfind("base e", 0), 0u) << s->merge_checks[0].verdict;
  EXPECT_GT(s->merge_checks[0].err_2, 10 * s->merge_checks[0].err_e);
}

TEST(Partition, RulesNameThePath) {
  CaseSpec c = decode_case(2, 1, {10, 20});
  EXPECT_EQ(rule_of(c), "");
  CaseSpec w = c;
  w.attention.window = 8;
  EXPECT_EQ(rule_of(w).rfind("/attention/window: ", 0), 0u) << rule_of(w);
  CaseSpec q = c;
  q.requests[1].q_len = 2;
  EXPECT_EQ(rule_of(q).rfind("/requests/1/q_len: ", 0), 0u) << rule_of(q);
  q.attention.causal = false;
  EXPECT_EQ(rule_of(q), "");
  CaseSpec k = c;
  k.parallel = ParallelSpec{std::nullopt, CascadeSpec{12}, {}};
  EXPECT_EQ(rule_of(k).rfind("/parallel/cascade/shared_prefix: 12 is not a multiple of the page size 8", 0), 0u) << rule_of(k);
  k.parallel->cascade->shared_prefix = 16;
  EXPECT_EQ(rule_of(k).rfind("/parallel/cascade/shared_prefix: 16 is more than request 0", 0), 0u) << rule_of(k);
  CaseSpec both = c;
  both.parallel->cascade = CascadeSpec{8};
  EXPECT_EQ(rule_of(both).rfind("/parallel: give exactly one", 0), 0u);
  CaseSpec r = c;
  r.parallel->context->ranks = 1;
  EXPECT_EQ(rule_of(r).rfind("/parallel/context/ranks: ", 0), 0u);
  const std::string bad = R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 9}], "heads": {"qo": 1, "kv": 1},
    "head_dim": {"qk": 32, "vo": 32}, "dtype": "bf16", "backends": ["cpu.reference"],
    "parallel": {"context": {"ranks": 2}, "merge_base": {"cpu.tiled": "e"}}})";
  try {
    parse_case_text(bad);
    FAIL() << "accepted a merge_base for a backend the case does not run";
  } catch (const CaseError& e) {
    EXPECT_EQ(e.path(), "/parallel/merge_base/cpu.tiled");
  }
}

// A partitioned case's repro replays bit for bit: /parallel written and read back, digests equal.
TEST(Partition, ReproReplaysBitForBit) {
  CaseSpec c = decode_case(4, 16, {50, 300});
  c.parallel->merge_base[""] = LseBase::kE;
  const auto s = run_session(CaseFile{c});
  const CaseFile repro = parse_case(case_file_to_json(make_repro(*s)));
  EXPECT_EQ(repro.spec.parallel, c.parallel);
  const auto again = run_session(repro);
  ASSERT_FALSE(again->replay.empty());
  for (const auto& r : again->replay) EXPECT_TRUE(r.match()) << r.backend << ": " << r.why;
}
