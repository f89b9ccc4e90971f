// Planners: the worked examples of conventions.md sections 4 and 6, and properties over a few
// hundred seeded random cases.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "attnscope/item_pairs.h"
#include "attnscope/plan.h"
#include "attnscope/rng.h"
#include "case_gen.h"
#include "case_json.h"

using namespace attnscope;
using attnscope::testing::random_case;

namespace {

CaseSpec base_case() {
  CaseSpec c;
  c.name = "t";
  c.num_qo_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.backends = {"cpu.reference"};
  return c;
}

}  // namespace

TEST(Planner, WorkedExampleRaggedPrefill) {
  CaseSpec c = base_case();
  c.kv_cache.storage = KvStorage::kRagged;
  c.kv_cache.page_size = 1;
  c.kv_cache.null_page = false;
  c.requests = {{512, 4096}, {16, 8192}};
  const Plan p = make_plan(c);
  EXPECT_EQ(p.split.avg_packed_rows, 1056);
  EXPECT_EQ(p.split.cta_tile_q, 128);
  EXPECT_EQ(p.split.max_items, 33);
  EXPECT_EQ(p.split.chunk_pages, 4096);
  EXPECT_TRUE(p.split.split_kv);
  EXPECT_EQ(p.split.unit_tiles, (std::vector<int>{16, 1}));
  EXPECT_EQ(p.split.unit_chunks, (std::vector<int>{1, 2}));
  EXPECT_EQ(p.split.num_items, 18);
}

TEST(Planner, WorkedExampleDecode) {
  CaseSpec c = base_case();
  c.kv_cache.page_size = 16;
  c.requests = {{1, 1000}, {1, 3000}, {1, 500}, {1, 7000}};
  const Plan p = make_plan(c);
  EXPECT_EQ(p.split.kv_pages, (std::vector<int>{63, 188, 32, 438}));
  EXPECT_EQ(p.split.cta_tile_q, 16);
  EXPECT_EQ(p.split.chunk_pages, 24);
  EXPECT_EQ(p.split.unit_chunks, (std::vector<int>{3, 8, 2, 19}));
  EXPECT_EQ(p.split.num_items, 32);
  // merge_indptr: one query per request, fan-in = its chunks
  EXPECT_EQ(p.split.merge_indptr, (std::vector<int>{0, 3, 11, 13, 32}));
  EXPECT_EQ(p.split.o_indptr, (std::vector<int>{0, 3, 11, 13, 32}));
}

TEST(Planner, TileDependsOnTheWholeBatch) {
  // FlashInfer #2424: the same request gets a different tile depending on its neighbours.
  CaseSpec c = base_case();
  c.kv_cache.page_size = 16;
  c.requests = {{40, 2000}};
  EXPECT_EQ(make_plan(c).split.cta_tile_q, 128);  // 160 packed rows
  c.requests = {{40, 2000}, {1, 100}, {1, 100}, {1, 100}, {1, 100}, {1, 100}, {1, 100}, {1, 100}, {1, 100}, {1, 100}};
  EXPECT_EQ(make_plan(c).split.cta_tile_q, 64);  // avg packed (160 + 9 * 4) / 10 = 19: in (16, 64]
}

TEST(Planner, CudaGraphPadsTheGrid) {
  CaseSpec c = base_case();
  c.kv_cache.page_size = 16;
  c.requests = {{1, 100}, {1, 200}};
  c.split.cuda_graph = true;
  const Plan p = make_plan(c);
  EXPECT_TRUE(p.split.split_kv);
  EXPECT_EQ(p.split.padded_items, std::max(p.split.max_items, 2));
  EXPECT_GE(p.split.padded_items, p.split.num_items);
}

TEST(Planner, FlashAttnHeuristic) {
  // enough blocks to fill the SMs: one split
  EXPECT_EQ(flash_attn_num_splits(300, 264, 64, 128), 1);
  // one block of work: split as far as the efficiency rule allows
  const int s = flash_attn_num_splits(8, 264, 64, 128);
  EXPECT_GT(s, 1);
  EXPECT_LE(s, 64);
  // never more splits than n-blocks
  EXPECT_LE(flash_attn_num_splits(1, 264, 3, 128), 3);
}

TEST(Planner, FlashAttnBudgetsForTheAllocatedCache) {
  // flash_attn_with_kvcache hands max_num_blocks_per_seq * page_size (the block table's width) to
  // num_splits_heuristic, not the live length (flash_api.cpp mha_fwd_kvcache / set_params_splitkv):
  // the same batch in a wider cache gets other splits. Seeded random decode and short-prefill batches.
  SplitMix64 g(31337);
  int changed = 0;
  for (int trial = 0; trial < 200; ++trial) {
    CaseSpec c = base_case();
    c.num_kv_heads = 1 << g.range(0, 3);
    c.num_qo_heads = c.num_kv_heads * g.range(1, 8);
    c.head_dim_qk = c.head_dim_vo = g.coin() ? 64 : g.coin() ? 128 : 256;
    c.kv_cache.page_size = g.coin() ? 16 : 256;
    if (g.range(0, 3) == 0) {
      c.kv_cache.storage = KvStorage::kRagged;
      c.kv_cache.page_size = 1;
      c.kv_cache.null_page = false;
    }
    const int ps = c.effective_page_size();
    c.requests.clear();
    const bool decode = g.coin();
    for (int i = g.range(1, 4); i > 0; --i) {
      const int kv = g.range(1, 4000);
      c.requests.push_back({decode ? 1 : g.range(1, std::min(kv, 100)), kv});
    }
    c.split.planner = Planner::kFlashAttn;
    c.split.num_sms = g.range(1, 40) * 4;
    int live_pages = 0;
    for (const auto& r : c.requests) live_pages = std::max(live_pages, (r.kv_len + ps - 1) / ps);
    const Plan tight = make_plan(c);
    EXPECT_EQ(tight.split.seqlen_k, static_cast<int64_t>(live_pages) * ps);  // absent: the tightest table
    c.kv_cache.max_num_blocks_per_seq = live_pages * g.range(1, 16);
    SCOPED_TRACE("width " + std::to_string(*c.kv_cache.max_num_blocks_per_seq) + " pages of " + std::to_string(ps));
    const Plan p = make_plan(c);
    const SplitPlan& sp = p.split;
    const int64_t seqlen_k = static_cast<int64_t>(*c.kv_cache.max_num_blocks_per_seq) * ps;
    ASSERT_EQ(sp.seqlen_k, seqlen_k);
    // the heuristic's inputs as mha_fwd_kvcache forms them
    const int G = c.group_size();
    int max_q = 0;
    for (const auto& r : c.requests) max_q = std::max(max_q, r.q_len);
    const bool swapped = max_q == 1 && G > 1;
    const int64_t m_blocks = ((swapped ? G : max_q) + 63) / 64;
    const int64_t blocks = static_cast<int64_t>(c.requests.size()) * (swapped ? c.num_kv_heads : c.num_qo_heads) * m_blocks;
    const int block_n = c.head_dim_qk <= 64 ? 256 : c.head_dim_qk <= 128 ? 128 : 64;
    const int n_blocks = static_cast<int>((seqlen_k + block_n - 1) / block_n);
    ASSERT_EQ(sp.num_splits, flash_attn_num_splits(blocks, 2 * c.split.num_sms, n_blocks, 128));
    EXPECT_EQ(sp.split_kv, sp.num_splits > 1);
    EXPECT_EQ(sp.chunk_tokens, static_cast<int64_t>((n_blocks + sp.num_splits - 1) / sp.num_splits) * block_n);
    for (int n : sp.unit_chunks) ASSERT_EQ(n, sp.num_splits);  // every batch entry gets every split
    // the splits still cover each allowed (query, key) pair exactly once
    for (size_t r = 0; r < c.requests.size(); ++r) {
      const auto& rq = c.requests[r];
      std::vector<int> cover(static_cast<size_t>(rq.q_len) * G * rq.kv_len, 0);
      for (const auto& it : sp.items) {
        if (p.units[it.unit].request != static_cast<int>(r)) continue;
        for (int row = it.row_begin; row < it.row_end; ++row)
          for (int k = it.kv_begin; k < it.kv_end; ++k) cover[static_cast<size_t>(row) * rq.kv_len + k]++;
      }
      for (int row = 0; row < rq.q_len * G; ++row)
        for (int k = 0; k < rq.kv_len; ++k) {
          const bool a = allowed(p.masks[r], q_abs_of(p.masks[r], row / G), k);
          if (a) {
            ASSERT_EQ(cover[static_cast<size_t>(row) * rq.kv_len + k], 1) << "request " << r << " row " << row << " k " << k;
          }
        }
    }
    changed += sp.num_splits != tight.split.num_splits;
  }
  EXPECT_GT(changed, 10) << "a wider cache changes the split count of some batches";
  // the smallest story: one decode row, 300 live keys of head_dim 128 in a 64-page cache of 16
  CaseSpec c = base_case();
  c.num_qo_heads = c.num_kv_heads = 1;
  c.requests = {{1, 300}};
  c.split.planner = Planner::kFlashAttn;
  const int live = make_plan(c).split.num_splits;  // 3 blocks of 128: 3 splits
  c.kv_cache.max_num_blocks_per_seq = 64;          // 1024 keys allocated: 8 blocks
  const int wide = make_plan(c).split.num_splits;
  EXPECT_EQ(live, flash_attn_num_splits(1, 264, 3, 128));
  EXPECT_EQ(wide, flash_attn_num_splits(1, 264, 8, 128));
  EXPECT_NE(live, wide);
}

TEST(Planner, BlockTableWidthIsValidatedAndRoundTrips) {
  SplitMix64 g(99);
  for (int trial = 0; trial < 50; ++trial) {
    CaseSpec c = base_case();
    c.kv_cache.page_size = 1 << g.range(0, 8);
    c.requests = {{1, g.range(1, 5000)}, {1, g.range(1, 5000)}};
    const int ps = c.kv_cache.page_size;
    const int need = std::max((c.requests[0].kv_len + ps - 1) / ps, (c.requests[1].kv_len + ps - 1) / ps);
    c.kv_cache.max_num_blocks_per_seq = need + g.range(0, 100);
    EXPECT_NO_THROW(validate_case(c));
    const CaseFile f = parse_case_text(case_to_text(c));
    EXPECT_EQ(f.spec.kv_cache.max_num_blocks_per_seq, c.kv_cache.max_num_blocks_per_seq);
    // a table too narrow for the longest request: the error names the path and the request
    c.kv_cache.max_num_blocks_per_seq = need - 1;
    const int longest = (c.requests[0].kv_len + ps - 1) / ps == need ? 0 : 1;
    if (need - 1 >= 1) {
      try {
        validate_case(c);
        ADD_FAILURE() << "accepted a block table of " << need - 1 << " pages for " << need;
      } catch (const CaseError& e) {
        EXPECT_EQ(e.path(), "/kv_cache/max_num_blocks_per_seq");
        EXPECT_NE(e.rule().find("request " + std::to_string(longest)), std::string::npos) << e.rule();
      }
    }
  }
  CaseSpec c = base_case();
  c.requests = {{1, 10}};
  c.kv_cache.max_num_blocks_per_seq = 0;
  EXPECT_THROW(validate_case(c), CaseError);
  EXPECT_THROW(parse_case_text(R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 10}],
    "heads": {"qo": 1, "kv": 1}, "head_dim": 64, "dtype": "bf16", "kv_cache": {"max_num_blocks_per_seq": 1.5}})"),
               CaseError);
}

TEST(Planner, VirtualBatchesDocumentedExample) {
  CaseSpec c;
  c.num_qo_heads = c.num_kv_heads = 1;
  c.head_dim_qk = c.head_dim_vo = 8;
  c.kv_cache.page_size = 2;
  c.kv_cache.null_page = false;
  c.attention.local_chunk = 4;
  c.requests = {{4, 6}, {10, 17}, {5, 9}};
  c.backends = {"cpu.reference"};
  const Plan p = make_plan(c);
  std::vector<int> q, kv, start;
  for (const auto& b : p.local.batches) {
    q.push_back(b.q_len);
    kv.push_back(b.kv_len);
    start.push_back(b.kv_begin);
  }
  EXPECT_EQ(q, (std::vector<int>{2, 2, 1, 4, 4, 1, 4, 1}));
  EXPECT_EQ(p.local.cu_q, (std::vector<int>{0, 2, 4, 5, 9, 13, 14, 18, 19}));
  EXPECT_EQ(kv, (std::vector<int>{4, 2, 4, 4, 4, 1, 4, 1}));
  EXPECT_EQ(start, (std::vector<int>{0, 4, 4, 8, 12, 16, 4, 8}));
  // block tables: 2 pages per chunk, sliced from the request's table (contiguous pages here)
  EXPECT_EQ(p.local.batches[0].block_table, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.local.batches[1].block_table, (std::vector<int>{2, 2}));          // request 0 has 3 pages: clipped
  EXPECT_EQ(p.local.batches[5].block_table, (std::vector<int>{3 + 8, 3 + 8}));  // request 1, chunk 16: page 8, clipped
}

TEST(PlannerProperties, RandomCases) {
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const CaseSpec c = random_case(seed);
    const Plan p = make_plan(c);
    const int G = c.group_size();
    SCOPED_TRACE(c.name);

    // page table: every page of every request is a distinct physical page; owners agree
    std::set<int> used;
    for (size_t r = 0; r < c.requests.size(); ++r) {
      ASSERT_EQ(p.pages.pages_of(static_cast<int>(r)), (c.requests[r].kv_len + p.pages.page_size - 1) / p.pages.page_size);
      for (int i = p.pages.indptr[r]; i < p.pages.indptr[r + 1]; ++i) {
        const int pg = p.pages.indices[i];
        ASSERT_TRUE(used.insert(pg).second);
        ASSERT_EQ(p.pages.owner[pg], static_cast<int>(r));
      }
      ASSERT_GE(p.pages.last_page_len[r], 1);
      ASSERT_LE(p.pages.last_page_len[r], p.pages.page_size);
    }
    if (c.kv_cache.null_page && c.kv_cache.storage == KvStorage::kPaged) {
      ASSERT_EQ(used.count(0), 0u);
    }

    // units cover every query exactly once, in token order
    std::vector<int> seen_q;
    for (size_t r = 0; r < c.requests.size(); ++r) seen_q.push_back(0);
    for (const auto& u : p.units) {
      ASSERT_EQ(u.q_begin, seen_q[u.request]);
      seen_q[u.request] += u.q_len;
    }
    for (size_t r = 0; r < c.requests.size(); ++r) ASSERT_EQ(seen_q[r], c.requests[r].q_len);

    // each (unit, q-tile): its chunks tile the keys with no gap or overlap (no window), or in
    // order without overlap (window)
    std::map<std::pair<int, int>, std::vector<const WorkItem*>> by_tile;
    for (const auto& it : p.split.items) by_tile[{it.unit, it.q_tile}].push_back(&it);
    for (const auto& [key, items] : by_tile) {
      const auto& u = p.units[key.first];
      ASSERT_EQ(static_cast<int>(items.size()), p.split.unit_chunks[key.first]);
      if (!p.split.window_chunks) {
        ASSERT_EQ(items.front()->kv_begin, u.kv_begin);
      }
      for (size_t i = 0; i < items.size(); ++i) {
        ASSERT_EQ(items[i]->kv_chunk, static_cast<int>(i));
        ASSERT_LE(items[i]->kv_begin, items[i]->kv_end);
        if (i > 0) {
          ASSERT_EQ(items[i]->kv_begin, items[i - 1]->kv_end);
        }
      }
      if (!p.split.window_chunks) {
        ASSERT_EQ(items.back()->kv_end, u.kv_begin + u.kv_len);
      }
    }

    // every allowed (query, key) pair of every head group is covered by exactly one work item
    for (size_t r = 0; r < c.requests.size(); ++r) {
      const auto& rq = c.requests[r];
      std::vector<int> cover(static_cast<size_t>(rq.q_len) * G * rq.kv_len, 0);
      for (const auto& it : p.split.items) {
        const auto& u = p.units[it.unit];
        if (u.request != static_cast<int>(r)) continue;
        for (int row = it.row_begin; row < it.row_end; ++row)
          for (int k = it.kv_begin; k < it.kv_end; ++k) {
            const int q = u.q_begin + row / G;
            if (allowed(p.masks[r], q_abs_of(p.masks[r], q), k)) ++cover[(static_cast<size_t>(q) * G + row % G) * rq.kv_len + k];
          }
      }
      for (int q = 0; q < rq.q_len; ++q)
        for (int g = 0; g < G; ++g)
          for (int k = 0; k < rq.kv_len; ++k) {
            const bool a = allowed(p.masks[r], q_abs_of(p.masks[r], q), k);
            ASSERT_EQ(cover[(static_cast<size_t>(q) * G + g) * rq.kv_len + k], a ? 1 : 0)
                << "request " << r << " q " << q << " k " << k;
          }
    }

    // local attention: each virtual batch, as its own causal request over its chunk, gives
    // exactly the chunked-local mask of the original request
    if (c.attention.local_chunk) {
      const int ch = *c.attention.local_chunk;
      for (const auto& b : p.local.batches) {
        const RowMask& m = p.masks[b.request];
        for (int i = 0; i < b.q_len; ++i) {
          const int qa = q_abs_of(m, b.q_begin + i);
          const int qa_v = b.kv_len - b.q_len + i;  // position inside the virtual batch
          ASSERT_EQ(qa, b.kv_begin + qa_v);
          for (int k = 0; k < m.kv_len; ++k) {
            const bool in_vb = k >= b.kv_begin && k < b.kv_begin + b.kv_len && (k - b.kv_begin) <= qa_v;
            const bool local = k / ch == qa / ch && k <= qa;
            ASSERT_EQ(in_vb, local);
            ASSERT_EQ(allowed(m, qa, k), local);
          }
        }
      }
    }

    // merge bookkeeping
    ASSERT_EQ(p.split.merge_indptr.size(), static_cast<size_t>(c.total_q() + 1));
    ASSERT_EQ(p.split.o_indptr.back(), p.split.merge_indptr.back());
    ASSERT_GE(p.split.padded_items, p.split.num_items);

    // block map: counts add up, and a block is empty iff no pair in it is allowed
    int64_t blocks = 0;
    for (const auto& ub : p.blocks.units) blocks += static_cast<int64_t>(ub.q_tiles) * ub.kv_tiles;
    ASSERT_EQ(blocks, p.blocks.full + p.blocks.partial + p.blocks.empty);
  }
}

TEST(PlannerProperties, PlanIsPure) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const CaseSpec c = random_case(seed);
    const Plan a = make_plan(c), b = make_plan(c);
    ASSERT_EQ(a.pages.indices, b.pages.indices);
    ASSERT_EQ(a.split.reasoning, b.split.reasoning);
    ASSERT_EQ(a.split.items.size(), b.split.items.size());
  }
}

// cuda.flash's paired Hopper launch groups a plan's items two per CTA (pair_items): every item once,
// a pair only of neighbours that share the unit, the chunk and the keys (so the same 64-key tile
// grid), the second's rows right after the first's. Worked example: one request of 512 queries x 4
// packed heads per KV head at 64-row tiles, no split: 32 items pair into 16; over seeded random plans
// (any planner, splits, windows) the invariants hold and every pairable neighbour is paired.
TEST(ItemPairs, PairNeighboursWithTheSameKeysAndEveryItemOnce) {
  CaseSpec c = base_case();
  c.head_dim_qk = c.head_dim_vo = 256;
  c.requests = {{512, 512}};
  c.split.fixed_tile_q = 64;
  c.split.planner = Planner::kOff;
  validate_case(c);
  const Plan worked = make_plan(c);
  ASSERT_EQ(worked.split.items.size(), 32u);
  EXPECT_EQ(pair_items(worked.split.items).size(), 16u);

  int paired = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const Plan p = make_plan(random_case(seed));
    const std::vector<WorkItem>& items = p.split.items;
    const std::vector<ItemPair> pairs = pair_items(items);
    std::vector<int> seen(items.size(), 0);
    for (const ItemPair& pr : pairs) {
      ++seen.at(pr.a);
      if (pr.b < 0) continue;
      ++seen.at(pr.b);
      ++paired;
      const WorkItem &a = items[pr.a], &b = items[pr.b];
      EXPECT_EQ(a.unit, b.unit);
      EXPECT_EQ(a.kv_chunk, b.kv_chunk);
      EXPECT_EQ(a.kv_begin, b.kv_begin);
      EXPECT_EQ(a.kv_end, b.kv_end);
      EXPECT_EQ(b.row_begin, a.row_end);
    }
    for (size_t i = 0; i < items.size(); ++i) EXPECT_EQ(seen[i], 1) << "seed " << seed << " item " << i;
    // greedy in the items' order: an item left alone has no free neighbour with the same keys after it
    std::set<int> alone;
    for (const ItemPair& pr : pairs)
      if (pr.b < 0) alone.insert(pr.a);
    for (int i : alone)
      for (int j : alone)
        if (j > i && items[j].unit == items[i].unit && items[j].kv_chunk == items[i].kv_chunk &&
            items[j].row_begin == items[i].row_end && items[j].kv_begin == items[i].kv_begin &&
            items[j].kv_end == items[i].kv_end)
          ADD_FAILURE() << "seed " << seed << ": items " << i << " and " << j << " could have been paired";
  }
  EXPECT_GT(paired, 100);  // the random plans do exercise it
}
