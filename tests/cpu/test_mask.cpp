// The mask predicate against the rules of conventions.md section 1 written out literally, and the
// tile classification against a brute-force scan.
#include <gtest/gtest.h>

#include <vector>

#include "attnscope/block_map.h"
#include "attnscope/mask.h"
#include "attnscope/rng.h"

using namespace attnscope;

namespace {

int doc_linear(const std::vector<int>& starts, int pos) {
  int d = 0;
  for (size_t i = 0; i < starts.size(); ++i)
    if (starts[i] <= pos) d = static_cast<int>(i);
  return d;
}

// conventions.md section 1, one rule per line
bool literal(const RowMask& m, const std::vector<int>& docs, int qa, int k) {
  if (k < 0 || k >= m.kv_len) return false;
  if (m.pad_start >= 0 && (qa >= m.pad_start || k >= m.pad_start)) return false;
  bool vis = true;
  if (m.causal) vis = k <= qa || (m.prefix_len > 0 && k < m.prefix_len);
  if (m.window > 0) vis = vis && (qa - m.window < k);
  if (m.chunk > 0) vis = vis && (k / m.chunk == qa / m.chunk);
  if (!docs.empty()) vis = vis && doc_linear(docs, k) == doc_linear(docs, qa);
  return vis;
}

}  // namespace

TEST(Mask, AllowedMatchesTheLiteralRules) {
  SplitMix64 g(3);
  for (int iter = 0; iter < 400; ++iter) {
    RowMask m;
    m.kv_len = g.range(1, 90);
    m.q_len = g.range(1, m.kv_len);
    m.causal = g.range(0, 3) != 0;
    std::vector<int> docs;
    const int kind = g.range(0, 5);
    if (kind == 1) m.window = g.range(1, 40);
    if (kind == 2 && m.causal) m.chunk = g.range(1, 30);
    if (kind == 3 && m.causal) m.prefix_len = g.range(0, m.kv_len);
    if (kind == 4) {
      docs = {0};
      while (g.coin() && docs.back() + 1 < m.kv_len) docs.push_back(g.range(docs.back() + 1, m.kv_len - 1));
      m.doc_starts = docs.data();
      m.num_docs = static_cast<int>(docs.size());
    }
    if (kind == 5) m.pad_start = g.range(0, m.kv_len);
    if (g.range(0, 4) == 0 && kind != 3) m.window = g.range(1, 40);  // combinations
    for (int q = 0; q < m.q_len; ++q) {
      const int qa = q_abs_of(m, q);
      for (int k = 0; k < m.kv_len; ++k)
        ASSERT_EQ(allowed(m, qa, k), literal(m, docs, qa, k)) << "iter " << iter << " qa " << qa << " k " << k;
    }
  }
}

TEST(Mask, CausalIsBottomRightAligned) {
  RowMask m;
  m.q_len = 2;
  m.kv_len = 5;
  EXPECT_EQ(q_abs_of(m, 0), 3);
  EXPECT_TRUE(allowed(m, 3, 3));
  EXPECT_FALSE(allowed(m, 3, 4));
  EXPECT_TRUE(allowed(m, 4, 4));
}

TEST(Mask, WindowCountsTheQueryItself) {
  RowMask m;
  m.q_len = 10;
  m.kv_len = 10;
  m.window = 3;  // keys qa-2, qa-1, qa
  int n = 0;
  for (int k = 0; k < 10; ++k) n += allowed(m, 7, k);
  EXPECT_EQ(n, 3);
  EXPECT_TRUE(allowed(m, 7, 5));
  EXPECT_FALSE(allowed(m, 7, 4));
}

TEST(Mask, TileClassificationMatchesBruteForce) {
  SplitMix64 g(11);
  for (int iter = 0; iter < 300; ++iter) {
    RowMask m;
    m.kv_len = g.range(1, 200);
    m.q_len = g.range(1, m.kv_len);
    m.causal = g.coin();
    if (g.coin()) m.window = g.range(1, 64);
    if (m.causal && g.range(0, 3) == 0) m.chunk = g.range(1, 64);
    if (g.range(0, 4) == 0) m.pad_start = g.range(0, m.kv_len);
    const int qa0 = q_abs_of(m, g.range(0, m.q_len - 1));
    const int qa1 = std::min(q_abs_of(m, m.q_len - 1) + 1, qa0 + g.range(1, 40));
    const int k0 = g.range(0, m.kv_len - 1);
    const int k1 = std::min(m.kv_len, k0 + g.range(1, 64));
    bool all = true, any = false;
    for (int qa = qa0; qa < qa1; ++qa)
      for (int k = k0; k < k1; ++k) {
        const bool a = allowed(m, qa, k);
        all &= a;
        any |= a;
      }
    const TileClass want = all ? TileClass::kFull : any ? TileClass::kPartial : TileClass::kEmpty;
    ASSERT_EQ(static_cast<int>(classify_tile(m, qa0, qa1, k0, k1)), static_cast<int>(want)) << "iter " << iter;
  }
}

TEST(Mask, AlibiSlopesFollowThePowerOfTwoRule) {
  EXPECT_DOUBLE_EQ(alibi_slope(0, 8), 0.5);
  EXPECT_DOUBLE_EQ(alibi_slope(7, 8), 1.0 / 256);
  // 12 heads: the 8 slopes of n=8, then odd-indexed slopes of n=16
  EXPECT_DOUBLE_EQ(alibi_slope(8, 12), std::pow(2.0, -0.5));
  EXPECT_DOUBLE_EQ(alibi_slope(9, 12), std::pow(2.0, -1.5));
}

// make_block_map classifies interval masks from each row's range computed once per query tile: the
// same verdicts as classify_tile on every tile of random units (causal, windows, chunks, prefixes,
// padding, documents), at group sizes 1 and 4 and tiles of 16 and 128 packed rows.
TEST(Mask, BlockMapOfIntervalMasksIsClassifyTilesOnEveryTile) {
  SplitMix64 rng(77);
  int64_t tiles = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int> docs;
    RowMask m;
    m.kv_len = 1 + static_cast<int>(rng.next() % 700);
    m.q_len = 1 + static_cast<int>(rng.next() % m.kv_len);
    m.causal = static_cast<int>(rng.next() % 4 != 0);
    m.window = rng.next() % 3 == 0 ? 1 + static_cast<int>(rng.next() % 200) : 0;
    m.chunk = rng.next() % 5 == 0 ? 1 + static_cast<int>(rng.next() % 300) : 0;
    m.prefix_len = m.causal && rng.next() % 4 == 0 ? static_cast<int>(rng.next() % m.kv_len) : 0;
    m.pad_start = rng.next() % 5 == 0 ? static_cast<int>(rng.next() % m.kv_len) : -1;
    if (rng.next() % 4 == 0) {
      docs.push_back(0);
      for (int p = 1; p < m.kv_len; ++p)
        if (rng.next() % 97 == 0) docs.push_back(p);
      m.doc_starts = docs.data();
      m.num_docs = static_cast<int>(docs.size());
    }
    const int G = trial % 2 ? 4 : 1, T = trial % 3 ? 128 : 16;
    const int q_begin = static_cast<int>(rng.next() % m.q_len);
    const std::vector<WorkUnit> units = {{0, q_begin, m.q_len - q_begin, 0, m.kv_len}};
    const BlockMap bm = make_block_map(units, {m}, G, T);
    const UnitBlocks& ub = bm.units[0];
    for (int t = 0; t < ub.q_tiles; ++t) {
      const int r0 = t * T, r1 = std::min(r0 + T, (m.q_len - q_begin) * G);
      const int qa0 = q_abs_of(m, q_begin + r0 / G), qa1 = q_abs_of(m, q_begin + (r1 - 1) / G) + 1;
      for (int j = 0; j < ub.kv_tiles; ++j, ++tiles) {
        const int k0 = j * kKvTile, k1 = std::min(k0 + kKvTile, m.kv_len);
        ASSERT_EQ(static_cast<int>(ub.cls[static_cast<size_t>(t) * ub.kv_tiles + j]),
                  static_cast<int>(classify_tile(m, qa0, qa1, k0, k1)))
            << "trial " << trial << " tile " << t << "," << j;
      }
    }
  }
  EXPECT_GT(tiles, 5000);
}
