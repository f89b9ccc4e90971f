// Attention sinks and speculative-decoding trees (docs/conventions.md section 12) on the CPU backends:
// each checked against an fp64 computation written here from the definitions (its own mask, its own
// softmax with the sink term), on seeded random cases with windows, GQA, paged storage and split-KV
// on and off; the case rules and the JSON form; the registry's refusal for backends that take neither.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnscope/compare.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "attnscope/softmax_trace.h"
#include "case_json.h"

using namespace attnscope;

namespace {

Result run(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w) {
  auto b = make_backend(id);
  return run_backend(*b, c, p, w, RunOptions{});
}

// A random tree over n new tokens: each parent -1 or an earlier token.
std::vector<int> random_tree(SplitMix64& g, int n) {
  std::vector<int> t(n);
  for (int i = 0; i < n; ++i) t[i] = i == 0 || g.range(0, 4) == 0 ? -1 : g.range(0, i - 1);
  return t;
}

// Seeded case: GQA, a window or chunked local attention on some, paged (page size, layout, allocation) or ragged, split-KV forced
// on (planner fixed, small chunks) or off; sinks given, seeded or absent; trees on some requests.
CaseSpec random_shape_case(uint64_t seed, bool sinks, bool trees, bool split) {
  SplitMix64 g(seed * 104729 + 3);
  CaseSpec c;
  c.name = "shape-" + std::to_string(seed);
  c.num_kv_heads = g.range(1, 2);
  c.num_qo_heads = c.num_kv_heads * g.range(1, 4);
  c.head_dim_qk = g.coin() ? 32 : 16;
  c.head_dim_vo = g.coin() ? c.head_dim_qk : 8;
  c.dtype = g.coin() ? DType::kBf16 : DType::kFp16;
  if (g.range(0, 3) == 0) {
    c.kv_cache.storage = KvStorage::kRagged;
    c.kv_cache.page_size = 1;
    c.kv_cache.null_page = false;
  } else {
    const int pss[] = {1, 4, 16};
    c.kv_cache.page_size = pss[g.range(0, 2)];
    c.kv_cache.layout = g.coin() ? KvLayout::kNHD : KvLayout::kHND;
    c.kv_cache.allocation = static_cast<PageAlloc>(g.range(0, 2));
    c.kv_cache.allocation_seed = g.next() % 100;
  }
  const int mask = g.range(0, 3);  // 0 window, 1 chunked local, else causal only
  if (mask == 0) c.attention.window = g.range(1, 90);
  if (mask == 1) c.attention.local_chunk = c.effective_page_size() * std::max(1, g.range(8, 64) / c.effective_page_size());
  const int n = g.range(1, 4);
  for (int i = 0; i < n; ++i) {
    RequestSpec r;
    r.kv_len = g.range(1, 260);
    r.q_len = g.range(1, std::min(r.kv_len, 24));
    if (trees && g.range(0, 3) != 0) r.tree_parents = random_tree(g, r.q_len);
    if (g.range(0, 5) == 0) r.pad_start = g.range(0, r.kv_len);  // fully masked rows
    c.requests.push_back(r);
  }
  if (trees && !c.has_trees()) c.requests[0].tree_parents = random_tree(g, c.requests[0].q_len);
  if (sinks) {
    c.attention.sinks = SinksSpec{};
    if (g.coin())
      for (int h = 0; h < c.num_qo_heads; ++h)
        c.attention.sinks->logits.push_back((static_cast<double>(g.next() % 1201) - 600.0) / 100.0);
  }
  c.data.seed = seed;
  if (split) {
    c.split.planner = Planner::kFixed;
    c.split.fixed_split_size = std::max(1, 32 / c.effective_page_size());
    c.split.fixed_tile_q = 16;
  } else {
    c.split.planner = Planner::kOff;
  }
  validate_case(c);
  return c;
}

// Key k visible to new token q of request r, from the definitions: causal (bottom-right), window W,
// padding, and the tree (prefix keys, the token itself and its ancestors).
bool visible_here(const CaseSpec& c, int r, int q, int k) {
  const RequestSpec& rq = c.requests[r];
  const int prefix = rq.kv_len - rq.q_len, qa = prefix + q;
  if (rq.pad_start && (qa >= *rq.pad_start || k >= *rq.pad_start)) return false;
  if (c.attention.causal && k > qa) return false;
  if (c.attention.window && k <= qa - *c.attention.window) return false;
  if (c.attention.local_chunk && k / *c.attention.local_chunk != qa / *c.attention.local_chunk) return false;
  if (rq.tree_parents.empty() || k < prefix) return true;
  for (int a = q; a >= 0; a = rq.tree_parents[a])  // walk up from the token itself
    if (a == k - prefix) return true;
  return false;
}

// fp64 O and LSE of every (token, head), from the workload's values (pool via the page table).
void independent_fp64(const CaseSpec& c, const Plan& p, const Workload& w, std::vector<double>* o, std::vector<double>* lse) {
  const int Hq = c.num_qo_heads, G = c.group_size(), Dq = c.head_dim_qk, Dv = c.head_dim_vo;
  const std::vector<float> sinks = sink_logits(c);
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dq));
  o->assign(static_cast<size_t>(c.total_q()) * Hq * Dv, 0.0);
  lse->assign(static_cast<size_t>(c.total_q()) * Hq, 0.0);
  int64_t t = 0;
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    for (int q = 0; q < c.requests[r].q_len; ++q, ++t) {
      for (int h = 0; h < Hq; ++h) {
        const float* qv = w.q.data() + (t * Hq + h) * Dq;
        std::vector<double> e, num(Dv, 0.0);
        std::vector<int> keys;
        for (int k = 0; k < c.requests[r].kv_len; ++k) {
          if (!visible_here(c, r, q, k)) continue;
          const int pg = p.pages.page_of(r, k), sl = k % p.pages.page_size;
          const float* kr =
              w.k_pool.data() + kv_offset(c.kv_cache.layout, pg, sl, h / G, 0, p.pages.page_size, c.num_kv_heads, Dq);
          double dot = 0;
          for (int d = 0; d < Dq; ++d) dot += static_cast<double>(qv[d]) * kr[d];
          e.push_back(dot * scale);
          keys.push_back(k);
        }
        double den = sinks.empty() ? 0.0 : std::exp(static_cast<double>(sinks[h]));  // the sink: no value vector
        for (size_t i = 0; i < e.size(); ++i) {
          const double x = std::exp(e[i]);
          den += x;
          const int pg = p.pages.page_of(r, keys[i]), sl = keys[i] % p.pages.page_size;
          const float* vr =
              w.v_pool.data() + kv_offset(c.kv_cache.layout, pg, sl, h / G, 0, p.pages.page_size, c.num_kv_heads, Dv);
          for (int d = 0; d < Dv; ++d) num[d] += x * vr[d];
        }
        for (int d = 0; d < Dv; ++d) (*o)[(t * Hq + h) * Dv + d] = den > 0 ? num[d] / den : 0.0;
        (*lse)[t * Hq + h] = den > 0 ? std::log(den) : -INFINITY;
      }
    }
  }
}

// cpu.reference against the fp64 computation above (tight), cpu.tiled and cpu.lowp against the
// reference (the 2x rule), every value finite where the row sees a key or has a sink.
void check_backends(const CaseSpec& c) {
  SCOPED_TRACE(case_to_text(c));
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  std::vector<double> o, lse;
  independent_fp64(c, p, w, &o, &lse);
  const Result ref = run("cpu.reference", c, p, w), tl = run("cpu.tiled", c, p, w), lp = run("cpu.lowp", c, p, w);
  ASSERT_TRUE(ref.ok() && tl.ok() && lp.ok()) << ref.message << " / " << tl.message << " / " << lp.message;
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(ref.o[i], o[i], 1e-6 + 1e-6 * std::fabs(o[i])) << "O element " << i;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse[i])) {
      ASSERT_TRUE(std::isinf(ref.lse[i]) && ref.lse[i] < 0) << "LSE row " << i;
      continue;
    }
    ASSERT_NEAR(ref.lse[i], lse[i], 1e-4 + 1e-6 * std::fabs(lse[i])) << "LSE row " << i;
  }
  for (const Result* r : {&tl, &lp}) {
    const DiffReport d =
        compare_results(c, *r, ref, {r->backend, "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lp);
    EXPECT_TRUE(d.verdict.pass) << r->backend << ": " << d.verdict.detail;
    EXPECT_LT(d.lse.max_abs, 2e-2) << r->backend;
  }
}

std::string error_of(const CaseSpec& c) {
  try {
    validate_case(c);
  } catch (const CaseError& e) {
    return e.what();
  }
  return "";
}

std::string parse_error(const std::string& text) {
  try {
    parse_case_text(text);
  } catch (const CaseError& e) {
    return e.what();
  }
  return "";
}

CaseSpec small_case() {
  CaseSpec c;
  c.name = "small";
  c.requests = {{4, 10}, {3, 7}};
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 16;
  return c;
}

}  // namespace

TEST(Sinks, SeededLogitsAreDeterministicPerHeadAndRoundedToTheDtype) {
  CaseSpec c = small_case();
  c.num_qo_heads = 16;
  c.num_kv_heads = 4;
  c.attention.sinks = SinksSpec{};
  const auto a = sink_logits(c), b = sink_logits(c);
  ASSERT_EQ(a.size(), 16u);
  EXPECT_EQ(a, b);
  double mean = 0;
  for (float x : a) {
    EXPECT_EQ(x, round_to(c.dtype, x));
    mean += x / 16.0;
  }
  EXPECT_NE(a[0], a[1]);
  EXPECT_GT(mean, -1.0);  // about N(1, 2^2): the mean of 16 is within 2 of 1 except by a 1-in-10^4 draw
  EXPECT_LT(mean, 3.0);
  c.data.seed = 2;
  EXPECT_NE(sink_logits(c), a);
  c.attention.sinks->logits = std::vector<double>(16, 0.1);
  EXPECT_EQ(sink_logits(c)[3], 0.1f);  // given: rounded to fp32
  c.attention.sinks.reset();
  EXPECT_TRUE(sink_logits(c).empty());
}

TEST(Sinks, BackendsMatchAnIndependentFp64ComputationUnsplit) {
  for (uint64_t s = 1; s <= 16; ++s) check_backends(random_shape_case(s, true, false, false));
}

TEST(Sinks, BackendsMatchAnIndependentFp64ComputationSplit) {
  int split_rows = 0;
  for (uint64_t s = 101; s <= 116; ++s) {
    const CaseSpec c = random_shape_case(s, true, false, true);
    split_rows += make_plan(c).split.split_kv;
    check_backends(c);
  }
  EXPECT_GT(split_rows, 8);  // the split path really ran
}

// The sink counted once per row, not once per partial: with many chunks a per-chunk sink would add
// (chunks - 1) e^s to the denominator; cpu.tiled's LSE stays on the reference's.
TEST(Sinks, SplitRowCountsTheSinkOnce) {
  CaseSpec c = small_case();
  c.requests = {{1, 512}, {2, 300}};
  c.attention.sinks = SinksSpec{{3.0, 5.0, 4.0, 6.0}};
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 2;  // 32 keys per chunk: 16 chunks
  validate_case(c);
  const Plan p = make_plan(c);
  ASSERT_TRUE(p.split.split_kv);
  ASSERT_GE(p.split.unit_chunks[0], 8);
  const Workload w = make_workload(c, p.pages);
  const Result ref = run("cpu.reference", c, p, w), tl = run("cpu.tiled", c, p, w);
  ASSERT_TRUE(ref.ok() && tl.ok());
  for (size_t i = 0; i < ref.lse.size(); ++i) EXPECT_NEAR(tl.lse[i], ref.lse[i], 1e-3) << i;
  for (size_t i = 0; i < ref.o.size(); ++i) EXPECT_NEAR(tl.o[i], ref.o[i], 2e-2 * (1 + std::fabs(ref.o[i]))) << i;
}

// Worked by hand: one head, sink s = 2, two keys with logits 0 and 1 (q = e_0, k_0 = 0, k_1 = e_0,
// sm_scale 1), V rows 1 and -2 in every element. O = (e^0 x 1 + e^1 x (-2)) / (e^2 + e^0 + e^1) and
// LSE = log(e^2 + 1 + e), the sink's term e^2 having no value vector. The sink is the row's max, so
// the row starts at m = 2 log2(e) and P = e^-2, e^-1 enter P.V rounded to fp16 (2^-11 relative),
// O once more at the store. A second request, all padding, is fully masked: O = 0, LSE = s exactly
// (m = s log2(e), d = 1: log2(1) adds nothing).
TEST(Sinks, CpuTiledRowWithASinkAndTwoKeysByHand) {
  CaseSpec c;
  c.name = "sink-by-hand";
  c.requests = {{1, 2}, {1, 2}};
  c.requests[1].pad_start = 0;
  c.num_qo_heads = c.num_kv_heads = 1;
  c.head_dim_qk = c.head_dim_vo = 16;
  c.dtype = DType::kFp16;
  c.attention.sm_scale = 1.0;
  c.attention.sinks = SinksSpec{{2.0}};
  c.split.planner = Planner::kOff;
  validate_case(c);
  const Plan p = make_plan(c);
  ASSERT_FALSE(p.split.split_kv);
  Workload w = make_workload(c, p.pages);
  const int D = c.head_dim_qk, ps = p.pages.page_size;
  for (int t = 0; t < 2; ++t)
    for (int d = 0; d < D; ++d) w.q[t * D + d] = d == 0 ? 1.f : 0.f;
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 2; ++k)
      for (int d = 0; d < D; ++d) {
        const size_t at = kv_offset(c.kv_cache.layout, p.pages.page_of(r, k), k % ps, 0, d, ps, 1, D);
        w.k_pool[at] = k == 1 && d == 0 ? 1.f : 0.f;
        w.v_pool[at] = k == 0 ? 1.f : -2.f;
      }
  const Result tl = run("cpu.tiled", c, p, w);
  ASSERT_TRUE(tl.ok()) << tl.message;
  const double e = std::exp(1.0), den = e * e + 1 + e;
  const double o = (1.0 - 2.0 * e) / den, lse = std::log(den);
  for (int d = 0; d < D; ++d) EXPECT_NEAR(tl.o[d], o, 3 * std::ldexp(std::fabs(o), -11)) << "O[" << d << "]";
  EXPECT_NEAR(tl.lse[0], lse, 1e-6 * lse);
  for (int d = 0; d < D; ++d) EXPECT_EQ(tl.o[D + d], 0.f) << "fully masked O[" << d << "]";
  EXPECT_FLOAT_EQ(tl.lse[1], 2.f);
  // the step-through shows the same order: every key-split way's one tile starts from m = s log2(e),
  // way 0 (both keys) with d = 1, so its d ends at 1 + e^-2 + e^-1; the other ways see no key
  const SoftmaxTrace tr = explain_row(c, p, w, 0, 0, 0);
  ASSERT_EQ(tr.steps.size(), static_cast<size_t>(p.split.kv_warp_split));
  for (const TileStep& st : tr.steps) {
    EXPECT_EQ(st.m_old, tr.sink2) << "way " << st.way;
    EXPECT_EQ(st.m_new, tr.sink2) << "way " << st.way;
    EXPECT_EQ(st.rescale, 1.f) << "way " << st.way;
    EXPECT_NEAR(st.den, st.way == 0 ? 1 + std::exp(-1.0) + std::exp(-2.0) : 0.0, 1e-6) << "way " << st.way;
  }
  EXPECT_TRUE(tr.merges.empty());
}

// A row with no visible key: O = 0 and LSE = the sink's logit, in every CPU backend.
TEST(Sinks, FullyMaskedRowHasZeroOutputAndTheSinkAsLse) {
  CaseSpec c = small_case();
  c.requests = {{4, 10}};
  c.requests[0].pad_start = 7;  // queries at positions 7..9 are padding
  c.attention.sinks = SinksSpec{{0.5, -1.25, 2.0, 7.0}};
  for (const Planner pl : {Planner::kOff, Planner::kFixed}) {
    c.split.planner = pl;
    c.split.fixed_split_size = pl == Planner::kFixed ? std::optional<int>(1) : std::nullopt;
    validate_case(c);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    for (const char* id : {"cpu.reference", "cpu.lowp", "cpu.tiled"}) {
      const Result r = run(id, c, p, w);
      ASSERT_TRUE(r.ok()) << r.message;
      for (int q = 1; q < 4; ++q)
        for (int h = 0; h < 4; ++h) {
          EXPECT_FLOAT_EQ(r.lse[q * 4 + h], static_cast<float>(c.attention.sinks->logits[h])) << id << " q " << q << " h " << h;
          for (int d = 0; d < 16; ++d) EXPECT_EQ(r.o[(q * 4 + h) * 16 + d], 0.f) << id;
        }
      EXPECT_TRUE(std::isfinite(r.lse[0])) << id;
    }
  }
}

TEST(Trees, MaskBitsAllowedPairsAndBlockMapSeeTheTree) {
  for (uint64_t s = 1; s <= 20; ++s) {
    const CaseSpec c = random_shape_case(s, false, true, s % 2 == 0);
    SCOPED_TRACE(case_to_text(c));
    const Plan p = make_plan(c);
    ASSERT_TRUE(p.mask_store);
    int64_t pairs = 0;
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
      for (int q = 0; q < c.requests[r].q_len; ++q)
        for (int k = 0; k < c.requests[r].kv_len; ++k) {
          const bool want = visible_here(c, r, q, k);
          pairs += want;
          ASSERT_EQ(allowed(p.masks[r], q_abs_of(p.masks[r], q), k), want) << "r " << r << " q " << q << " k " << k;
        }
    EXPECT_EQ(allowed_pairs(c, p), pairs);
    CaseSpec chain = c;  // the same case without its trees allows at least as many pairs
    for (auto& r : chain.requests) r.tree_parents.clear();
    const Plan pc = make_plan(chain);
    EXPECT_LE(pairs, allowed_pairs(chain, pc));
    EXPECT_GE(p.blocks.empty + p.blocks.partial, pc.blocks.empty + pc.blocks.partial);
  }
}

// A tree whose every token's parent is the one before is the causal chain: the same output bits.
TEST(Trees, ChainTreeEqualsTheCausalMaskBitForBit) {
  CaseSpec c = small_case();
  c.requests = {{6, 40}, {5, 5}};
  validate_case(c);
  CaseSpec t = c;
  for (auto& r : t.requests)
    for (int i = 0; i < r.q_len; ++i) r.tree_parents.push_back(i - 1);
  const Plan p = make_plan(c), pt = make_plan(t);
  const Workload w = make_workload(c, p.pages), wt = make_workload(t, pt.pages);
  for (const char* id : {"cpu.reference", "cpu.lowp", "cpu.tiled"}) {
    const Result a = run(id, c, p, w), b = run(id, t, pt, wt);
    ASSERT_TRUE(a.ok() && b.ok()) << b.message;
    EXPECT_EQ(a.o, b.o) << id;
    EXPECT_EQ(a.lse, b.lse) << id;
  }
  // and a branching tree differs from it
  t.requests[0].tree_parents = {-1, 0, 0, 1, 2, -1};
  const Plan p2 = make_plan(t);
  const Result b2 = run("cpu.reference", t, p2, make_workload(t, p2.pages)), a2 = run("cpu.reference", c, p, w);
  EXPECT_NE(a2.o, b2.o);
}

TEST(Trees, BackendsMatchAnIndependentFp64Computation) {
  for (uint64_t s = 201; s <= 216; ++s) check_backends(random_shape_case(s, false, true, s % 2 == 0));
}

TEST(SinksTrees, BothTogetherMatchAnIndependentFp64Computation) {
  for (uint64_t s = 301; s <= 316; ++s) check_backends(random_shape_case(s, true, true, s % 2 == 0));
}

TEST(Trees, ValidationNamesThePathAndTheRule) {
  CaseSpec c = small_case();
  c.requests[1].tree_parents = {-1, 0};
  EXPECT_NE(error_of(c).find("/requests/1/tree_parents: has 2 entries, must have one per new token (q_len 3)"), std::string::npos)
      << error_of(c);
  c.requests[1].tree_parents = {-1, 0, -2};
  EXPECT_NE(error_of(c).find("/requests/1/tree_parents/2: -2 is out of range"), std::string::npos) << error_of(c);
  c.requests[1].tree_parents = {-1, 3, 0};
  EXPECT_NE(error_of(c).find("/requests/1/tree_parents/1: 3 is out of range"), std::string::npos) << error_of(c);
  c.requests[1].tree_parents = {-1, 1, 0};
  EXPECT_NE(error_of(c).find("/requests/1/tree_parents/1: 1 is the token itself"), std::string::npos) << error_of(c);
  c.requests[1].tree_parents = {-1, 2, 1};  // a cycle 1 -> 2 -> 1 starts with a forward reference
  EXPECT_NE(error_of(c).find("/requests/1/tree_parents/1: 2 is a forward reference"), std::string::npos) << error_of(c);
  c.requests[1].tree_parents = {-1, 0, 1};
  EXPECT_EQ(error_of(c), "");
  c.attention.causal = false;
  c.requests[1] = {3, 2};
  c.requests[1].tree_parents = {-1, 0, 0};
  EXPECT_NE(error_of(c).find("/requests/1/q_len: 3 > kv_len 2"), std::string::npos) << error_of(c);
  // JSON: a parent that is not an integer, an empty array
  const std::string head = R"({"schema": "attnscope/case@1", "heads": {"qo": 2, "kv": 1}, "head_dim": 16, "dtype": "bf16", )";
  EXPECT_NE(parse_error(head + R"("requests": [{"q_len": 2, "kv_len": 4, "tree_parents": [-1, "a"]}]})")
                .find("/requests/0/tree_parents/1: must be an integer"),
            std::string::npos);
  EXPECT_NE(parse_error(head + R"("requests": [{"q_len": 2, "kv_len": 4, "tree_parents": []}]})")
                .find("/requests/0/tree_parents: is empty"),
            std::string::npos);
  EXPECT_NE(parse_error(head + R"("requests": [{"q_len": 2, "kv_len": 4, "tree_parents": [-1, 1]}]})")
                .find("/requests/0/tree_parents/1: 1 is the token itself"),
            std::string::npos);
}

TEST(Sinks, ValidationNamesThePathAndTheRule) {
  CaseSpec c = small_case();
  c.attention.sinks = SinksSpec{{1.0, 2.0, 3.0}};
  EXPECT_NE(error_of(c).find("/attention/sinks: has 3 values, must have one per query head (heads/qo 4)"), std::string::npos)
      << error_of(c);
  c.attention.sinks = SinksSpec{{1.0, NAN, 3.0, 4.0}};
  EXPECT_NE(error_of(c).find("/attention/sinks/1: nan is not allowed"), std::string::npos) << error_of(c);
  c.attention.sinks = SinksSpec{{1.0, 2.0, 3.0, -2e4}};
  EXPECT_NE(error_of(c).find("/attention/sinks/3: -20000 is not allowed, a sink logit must be finite and in"), std::string::npos)
      << error_of(c);
  const std::string head = R"({"schema": "attnscope/case@1", "heads": {"qo": 2, "kv": 1}, "head_dim": 16, "dtype": "bf16", )"
                           R"("requests": [{"q_len": 1, "kv_len": 4}], "attention": {"sinks": )";
  EXPECT_NE(parse_error(head + R"("yes"}})").find("/attention/sinks: must be true"), std::string::npos);
  EXPECT_NE(parse_error(head + R"([1, "x"]}})").find("/attention/sinks/1: must be a number"), std::string::npos);
  EXPECT_NE(parse_error(head + R"([1, 2, 3]}})").find("/attention/sinks: has 3 values"), std::string::npos);
  EXPECT_EQ(parse_error(head + R"(true}})"), "");
}

TEST(SinksTrees, JsonRoundTripIsExact) {
  CaseSpec c = small_case();
  c.attention.sinks = SinksSpec{{0.1, -3.75, 1e-7, 2.5}};
  c.requests[0].tree_parents = {-1, 0, 0, 1};
  validate_case(c);
  const std::string text = case_to_text(c);
  const CaseSpec back = parse_case_text(text).spec;
  EXPECT_EQ(back, c);
  EXPECT_EQ(case_to_text(back), text);
  c.attention.sinks = SinksSpec{};  // true
  const std::string t2 = case_to_text(c);
  EXPECT_NE(t2.find("\"sinks\": true"), std::string::npos);
  EXPECT_EQ(parse_case_text(t2).spec, c);
  c.attention.sinks.reset();  // absent: the canonical text has no key
  for (auto& r : c.requests) r.tree_parents.clear();
  EXPECT_EQ(case_to_text(c).find("sinks"), std::string::npos);
  EXPECT_EQ(case_to_text(c).find("tree_parents"), std::string::npos);
}

// A backend whose descriptor does not take sinks / trees is refused, naming the backends that do.
TEST(SinksTrees, RegistryRefusesBackendsThatDoNotTakeThem) {
  CaseSpec c = small_case();
  c.attention.sinks = SinksSpec{};
  validate_case(c);
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  BackendInfo info = *backend_info("cpu.tiled");
  info.sinks = false;
  auto b = make_backend("cpu.tiled");
  Result r = run_backend(*b, c, p, w, RunOptions{}, &info);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message.find("cpu.tiled does not take attention sinks (/attention/sinks); cpu.reference, cpu.lowp, cpu.tiled, "
                           "cuda.reference, cuda.naive, cuda.flash, cuda.flash_padded, flashinfer.prefill and cudnn.sdpa do"),
            std::string::npos)
      << r.message;
  // FlashInfer's decode and Hopper prefill keep refusing them (their descriptors, as the registry reads
  // them in every build), naming flashinfer.prefill among those that take them
  for (const char* id : {"flashinfer.decode", "flashinfer.prefill_sm90"}) {
    info = *backend_info(id);
    r = run_backend(*b, c, p, w, RunOptions{}, &info);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.message.find(std::string(id) + " does not take attention sinks (/attention/sinks); cpu.reference, "),
              std::string::npos)
        << r.message;
    EXPECT_NE(r.message.find(", cuda.flash_padded, flashinfer.prefill and cudnn.sdpa do"), std::string::npos) << r.message;
  }
  c.attention.sinks.reset();
  c.requests[1].tree_parents = {-1, 0, 0};
  const Plan p2 = make_plan(c);
  info = *backend_info("cpu.lowp");
  info.trees = false;
  auto b2 = make_backend("cpu.lowp");
  r = run_backend(*b2, c, p2, make_workload(c, p2.pages), RunOptions{}, &info);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message.find("cpu.lowp does not take speculative-decoding trees (/requests/1/tree_parents); cpu.reference, "
                           "cpu.lowp, cpu.tiled, cuda.reference, cuda.naive, cuda.flash, cuda.flash_padded and "
                           "flashinfer.prefill do"),
            std::string::npos)
      << r.message;
  // the real descriptors: the CPU and cuda families take both (each tested on its own: here, and the GPU
  // tests SinksTreesGpu.*), cudnn.sdpa sinks only (its sink_token: CudnnMla.*), flashinfer.prefill both (its
  // custom mask; its sink variant: FlashInferSinks.*), nothing else either
  for (const auto& f : backend_families())
    for (const auto& i : f.backends) {
      EXPECT_EQ(i.sinks, f.name == "cpu" || f.name == "cuda" || i.id == "cudnn.sdpa" || i.id == "flashinfer.prefill") << i.id;
      EXPECT_EQ(i.trees, f.name == "cpu" || f.name == "cuda" || i.id == "flashinfer.prefill") << i.id;
    }
}

// The zoo's binary draft tree written as a mask_mod (examples/zoo/tree-speculative.json) and the same
// tree as tree_parents (heap order: parent (n - 1) / 2) allow the same pairs and give the same bits.
TEST(Trees, HeapTreeEqualsTheZooMaskMod) {
  const CaseSpec zoo = read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/zoo/tree-speculative.json").spec;
  CaseSpec t = zoo;
  t.attention.mask_mod.reset();
  t.attention.causal = true;
  for (auto& r : t.requests)
    for (int n = 0; n < r.q_len; ++n) r.tree_parents.push_back(n == 0 ? -1 : (n - 1) / 2);
  validate_case(t);
  const Plan pz = make_plan(zoo), pt = make_plan(t);
  for (int r = 0; r < static_cast<int>(t.requests.size()); ++r)
    for (int q = 0; q < t.requests[r].q_len; ++q)
      for (int k = 0; k < t.requests[r].kv_len; ++k)
        ASSERT_EQ(allowed(pt.masks[r], q_abs_of(pt.masks[r], q), k), allowed(pz.masks[r], q_abs_of(pz.masks[r], q), k))
            << r << " " << q << " " << k;
  EXPECT_EQ(allowed_pairs(t, pt), allowed_pairs(zoo, pz));
  const Workload wz = make_workload(zoo, pz.pages), wt = make_workload(t, pt.pages);
  const Result a = run("cpu.reference", zoo, pz, wz), b = run("cpu.reference", t, pt, wt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.lse, b.lse);
}

// The step-through with sinks and trees ends on cpu.tiled's bits (split or not) and shows the sink as
// the state the row starts from (the first tile's m_old, in the first chunk or the unsplit row's
// output), with its share of the exact probability mass.
TEST(SinksTrees, StepThroughEndsOnCpuTiledsBits) {
  int split = 0;
  for (uint64_t s = 401; s <= 412; ++s) {
    const CaseSpec c = random_shape_case(s, true, s % 3 == 0, s % 2 == 0);
    SCOPED_TRACE(c.name);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    split += p.split.split_kv;
    const Result tl = run("cpu.tiled", c, p, w);
    ASSERT_TRUE(tl.ok());
    const int r = static_cast<int>(c.requests.size()) - 1, q = c.requests[r].q_len - 1, h = c.num_qo_heads - 1;
    const SoftmaxTrace t = explain_row(c, p, w, r, q, h);
    const int64_t row = t.token * c.num_qo_heads + h;
    EXPECT_EQ(t.lse, tl.lse[row]);
    for (int d = 0; d < c.head_dim_vo; ++d) EXPECT_EQ(t.o[d], tl.o[row * c.head_dim_vo + d]);
    if (!t.steps.empty()) {  // a row of no KV tile (a padded one) ends on the start: O = 0, LSE = the sink
      EXPECT_EQ(t.steps.front().chunk, 0);
      EXPECT_EQ(t.steps.front().m_old, t.sink2);
    }
    EXPECT_EQ(t.sink2, sink_logits(c)[h] * static_cast<float>(kLog2e));
    EXPECT_EQ(t.merges.size() + 1, t.partials.size()) << "no merge step of the sink's own";
    EXPECT_EQ(t.sink, sink_logits(c)[h]);
    double pr = t.sink_prob;
    for (double x : t.probs) pr += x;
    if (t.visible > 0) {
      EXPECT_NEAR(pr, 1.0, 1e-9);
    }
  }
  EXPECT_GT(split, 2);
}

// FP8 caches (docs/conventions.md section 10): the sink is a logit, untouched by the K / V scales;
// cpu.tiled within the 2x rule of the dequantised ideal, split or not, and the sink really applies.
TEST(Sinks, Fp8CachesPassTheTwiceLowpRule) {
  for (uint64_t s = 501; s <= 508; ++s) {
    CaseSpec c = random_shape_case(s, true, s % 2 == 0, s % 4 < 2);
    c.dtype = DType::kBf16;
    c.kv_cache.fp8 = s % 3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
    c.kv_cache.scales.granularity = s % 2 ? ScaleGranularity::kHead : ScaleGranularity::kTensor;
    validate_case(c);
    SCOPED_TRACE(case_to_text(c));
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result ref = run("cpu.reference", c, p, w), tl = run("cpu.tiled", c, p, w), lp = run("cpu.lowp", c, p, w);
    ASSERT_TRUE(ref.ok() && tl.ok() && lp.ok()) << tl.message << lp.message;
    const DiffReport d =
        compare_results(c, tl, ref, {"cpu.tiled", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lp);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
    EXPECT_LT(d.lse.max_abs, 2e-2);
    CaseSpec none = c;
    none.attention.sinks.reset();
    const Result ref0 = run("cpu.reference", none, p, w);
    EXPECT_NE(ref0.lse, ref.lse);
  }
}

// The sink is added as it is: not soft-capped, not given to a score_mod (docs/conventions.md section
// 12). One key per row: a capped sink (cap 0.5) would leave LSE below 1.2, a score_mod "score - 100"
// applied to it would leave LSE near -97; the sink's 3.0 keeps LSE at about 3 in every backend.
TEST(Sinks, AreNotSoftCappedNorPassedToTheScoreMod) {
  CaseSpec base = small_case();
  base.requests = {{1, 1}, {1, 1}};
  base.attention.sinks = SinksSpec{{3.0, 3.0, 3.0, 3.0}};
  CaseSpec capped = base, modded = base;
  capped.attention.soft_cap = 0.5;
  modded.attention.score_mod = std::string("score - 100");
  for (int variant = 0; variant < 2; ++variant) {
    const CaseSpec& c = variant == 0 ? capped : modded;
    validate_case(c);
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    for (const char* id : {"cpu.reference", "cpu.lowp", "cpu.tiled"}) {
      const Result r = run(id, c, p, w);
      ASSERT_TRUE(r.ok()) << r.message;
      for (float l : r.lse) {
        EXPECT_GT(l, 2.9f) << id << " variant " << variant;
        EXPECT_LT(l, variant == 0 ? 3.5f : 3.01f) << id << " variant " << variant;
      }
    }
  }
}
