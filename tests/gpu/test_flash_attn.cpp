// flash_attn.varlen / flash_attn.kvcache (FlashAttention-2's own kernels from the pinned sdist)
// against cuda.reference under FlashAttention's 2x rule (cpu.lowp the same-precision baseline):
// seeded random cases of both APIs, poisoned pages, the split path forced on and off, batch
// invariance with a fixed num_splits, and speculative target verify (q_len 2..8 over a long cache).
// Skips with the reason where the family's kernels are not compiled or there is no device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "attnscope/rng.h"
#include "gpu_test_util.h"
#include "require.h"

using namespace attnscope;
using attnscope::testing::gpu_cases;
using attnscope::testing::run_id;

namespace {

constexpr const char* kVarlen = "flash_attn.varlen";
constexpr const char* kKvcache = "flash_attn.kvcache";

// The 2x rule against cuda.reference (1e-5 floor, as for cuda.flash), the LSE within 1e-3, no NaN.
// Returns the backend's result; an unexpected refusal fails.
Result check_twice_lowp(const std::string& id, const CaseSpec& c) {
  const Plan p = plan_case(c);
  const Workload w = make_workload(c, p.pages);
  const Result a = run_id(id, c, p, w), ref = run_id("cuda.reference", c, p, w), lowp = run_id("cpu.lowp", c, p, w);
  EXPECT_TRUE(a.ok()) << c.name << ": " << a.message;
  EXPECT_TRUE(ref.ok()) << ref.message;
  if (!a.ok() || !ref.ok()) return a;
  int64_t nan = 0;
  for (float x : a.o) nan += std::isnan(x);
  for (float x : a.lse) nan += std::isnan(x);
  EXPECT_EQ(nan, 0) << c.name << ": NaN (a poisoned element read or left unwritten)\n  " << a.message;
  const DiffReport d = compare_results(c, a, ref, {id, "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  EXPECT_TRUE(d.verdict.pass) << c.name << ": " << d.verdict.detail << "\n  " << a.message;
  EXPECT_EQ(d.lse.nonfinite_mismatch, 0) << c.name;
  EXPECT_LT(d.lse.max_abs, 1e-3) << c.name << ": LSE\n  " << a.message;
  return a;
}

struct Instance {
  DType dtype;
  int head_dim;
};

// The (dtype, head dim) instantiations this build compiled (ATTNSCOPE_FLASH_ATTN_HEAD_DIMS / _DTYPES),
// read off the backend's own refusal ("not instantiated") for each one FA2 ships.
const std::vector<Instance>& built_instances() {
  static const std::vector<Instance> built = [] {
    std::vector<Instance> v;
    auto b = make_backend(kVarlen);
    for (DType t : {DType::kBf16, DType::kFp16})
      for (int d : {32, 64, 96, 128, 192, 256}) {
        CaseSpec c;
        c.dtype = t;
        c.head_dim_qk = c.head_dim_vo = d;
        c.requests = {{1, 10}};
        c.kv_cache.storage = KvStorage::kRagged;
        c.kv_cache.page_size = 1;
        c.kv_cache.null_page = false;
        if (b->check(c).find("not instantiated") == std::string::npos) v.push_back({t, d});
      }
    return v;
  }();
  return built;
}

// A case for the API `id`, seeded: one of the built (dtype, head dim) instantiations, GQA shapes,
// causal / window / none, soft-cap, ALiBi (causal); ragged for varlen, some requests padded
// (pad_start: fully masked rows); kvcache: one q_len, paged (page 256 or 512) or a contiguous cache.
CaseSpec random_case(const std::string& id, uint64_t seed) {
  SplitMix64 r(seed);
  CaseSpec c;
  c.name = id + " seed " + std::to_string(seed);
  const auto& built = built_instances();
  const Instance in = built.empty() ? Instance{DType::kBf16, 128} : built[r.range(0, static_cast<int>(built.size()) - 1)];
  c.dtype = in.dtype;
  c.head_dim_qk = c.head_dim_vo = in.head_dim;
  c.name += std::string(", ") + dtype_name(c.dtype) + " d" + std::to_string(in.head_dim);
  const int heads[][2] = {{8, 8}, {8, 2}, {16, 2}, {4, 1}};
  const auto& h = heads[r.range(0, 3)];
  c.num_qo_heads = h[0];
  c.num_kv_heads = h[1];
  c.attention.causal = r.range(0, 3) != 0;
  if (r.range(0, 3) == 0) c.attention.window = r.range(1, 300);
  if (r.range(0, 4) == 0) c.attention.soft_cap = 20.0 + r.range(0, 30);
  if (r.range(0, 4) == 0 && c.attention.causal) c.attention.alibi = true;
  const bool kv = id == kKvcache;
  const int B = r.range(1, 5), L = r.coin() ? 1 : r.range(2, 80);
  for (int i = 0; i < B; ++i) {
    RequestSpec q;
    q.q_len = kv ? L : r.range(1, 160);
    q.kv_len = q.q_len + r.range(0, r.coin() ? 300 : 3000);
    if (!kv && r.range(0, 3) == 0) q.pad_start = r.range(0, q.kv_len);
    c.requests.push_back(q);
  }
  c.kv_cache.storage = kv && r.coin() ? KvStorage::kPaged : KvStorage::kRagged;
  c.kv_cache.page_size = c.kv_cache.storage == KvStorage::kPaged ? 256 * r.range(1, 2) : 1;
  c.kv_cache.null_page = c.kv_cache.storage == KvStorage::kPaged;
  if (c.kv_cache.storage == KvStorage::kPaged) {
    c.kv_cache.allocation = r.coin() ? PageAlloc::kShuffled : PageAlloc::kFragmented;
    c.kv_cache.allocation_seed = seed;
    if (r.coin()) c.kv_cache.layout = KvLayout::kHND;
  }
  c.kv_cache.poison_unused = r.coin();
  c.data.seed = seed;
  c.backends = {id, "cuda.reference"};
  validate_case(c);
  return c;
}

// The request of `c` alone, with its data seed made explicit so its inputs stay the same bits.
CaseSpec alone(const CaseSpec& c, int r) {
  CaseSpec a = c;
  a.requests = {c.requests[r]};
  a.requests[0].seed = c.request_seed(r);
  return a;
}

}  // namespace

TEST(FlashAttn, FamilyIsRegistered) {
  const BackendFamily* f = family_of(kVarlen);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->name, "flash_attn");
  ASSERT_EQ(f->backends.size(), 2u);
  EXPECT_EQ(f->backends[1].id, kKvcache);
  CaseSpec c;
  c.requests = {{1, 10}};
  c.head_dim_qk = c.head_dim_vo = 128;
  c.kv_cache.storage = KvStorage::kRagged;
  c.kv_cache.page_size = 1;
  c.kv_cache.null_page = false;
  auto b = make_backend(kVarlen);
  if (!f->compiled) {
    EXPECT_EQ(b->check(c).rfind("not compiled", 0), 0u) << b->check(c);
  }
}

TEST(FlashAttn, RandomCasesPassTheTwiceLowpRule) {
  REQUIRE_COMPILED_GPU(kVarlen);
  const auto& built = built_instances();
  ASSERT_FALSE(built.empty()) << "the family is compiled but no instantiation is";
  std::set<std::pair<int, int>> seen;
  int ran = 0, split = 0;
  const int n = gpu_cases(std::max<int>(24, 4 * built.size()), 4);
  for (const char* id : {kVarlen, kKvcache})
    for (int i = 0; i < n; ++i) {
      const CaseSpec c = random_case(id, 100 + i);
      // every case is drawn from what this build compiled: nothing is refused
      ASSERT_EQ(refusal(id, c), "") << c.name;
      const Result a = check_twice_lowp(id, c);
      ++ran;
      seen.insert({static_cast<int>(c.dtype), c.head_dim_qk});
      split += a.message.find("splitkv") != std::string::npos;
    }
  EXPECT_EQ(ran, 2 * n);
  if (!std::getenv("ATTNSCOPE_GPU_QUICK")) EXPECT_EQ(seen.size(), built.size()) << "not every built instantiation was drawn";
  EXPECT_GT(split, 0) << "no case reached the split-KV kernel";
}

// Padding queries (pad_start) see no key: attnscope's rows are O = 0, LSE = -inf (conventions.md
// section 1). flash_attn.varlen gives them to FA2 as segments with no key (seqused_k 0), where FA2
// writes O = 0 and LSE +inf; the backend reports -inf. Causal, non-causal and a window, a request
// padded from its first query, one padded from key 0, and each head dim this build compiled.
TEST(FlashAttn, FullyMaskedRowsGiveZeroAndMinusInf) {
  REQUIRE_COMPILED_GPU(kVarlen);
  for (const Instance& in : built_instances())
    for (int mask = 0; mask < 3; ++mask) {
      CaseSpec c;
      c.name = std::string("masked rows ") + dtype_name(in.dtype) + " d" + std::to_string(in.head_dim) + " mask " +
               std::to_string(mask);
      c.dtype = in.dtype;
      c.head_dim_qk = c.head_dim_vo = in.head_dim;
      c.num_qo_heads = 8;
      c.num_kv_heads = 2;
      c.attention.causal = mask != 1;
      if (mask == 2) c.attention.window = 40;
      c.requests = {{100, 300}, {64, 64}, {50, 500}, {30, 200}, {7, 7}};
      c.requests[0].pad_start = 250;  // the last 50 queries and keys are padding
      c.requests[1].pad_start = 33;   // prefill: queries 33.. padded
      c.requests[2].pad_start = 420;  // every query padded (they sit at 450..499)
      c.requests[3].pad_start = 0;    // nothing visible at all
      c.kv_cache.storage = KvStorage::kRagged;
      c.kv_cache.page_size = 1;
      c.kv_cache.null_page = false;
      c.kv_cache.poison_unused = true;
      c.data.seed = 5 + mask;
      c.backends = {kVarlen, "cuda.reference"};
      validate_case(c);
      const Result a = check_twice_lowp(kVarlen, c);
      if (!a.ok()) continue;
      EXPECT_NE(a.message.find("seqused_k"), std::string::npos) << a.message;
      const Plan p = plan_case(c);
      const Result cpu = run_id("cpu.reference", c, p, make_workload(c, p.pages));
      ASSERT_TRUE(cpu.ok()) << cpu.message;
      int64_t masked = 0, wrong = 0;
      for (size_t i = 0; i < a.lse.size(); ++i) {
        const bool empty = std::isinf(cpu.lse[i]) && cpu.lse[i] < 0;
        masked += empty;
        if (!empty) continue;
        wrong += !(std::isinf(a.lse[i]) && a.lse[i] < 0);
        for (int d = 0; d < c.head_dim_vo; ++d) wrong += a.o[i * c.head_dim_vo + d] != 0.0f;
      }
      EXPECT_EQ(masked, (50 + 31 + 50 + 30) * c.num_qo_heads) << c.name;
      EXPECT_EQ(wrong, 0) << c.name << ": a fully masked row is not O = 0, LSE = -inf";
    }
}

// Unused pages and slots hold NaN: a kernel that reads them shows NaN.
TEST(FlashAttn, PoisonedPagesAreNeverRead) {
  REQUIRE_COMPILED_GPU(kVarlen);
  for (int storage = 0; storage < 2; ++storage) {
    CaseSpec c = random_case(kKvcache, 7);
    c.dtype = DType::kBf16;
    c.attention = {};
    c.requests = {{3, 1000}, {3, 77}, {3, 600}};
    c.kv_cache.storage = storage ? KvStorage::kPaged : KvStorage::kRagged;
    c.kv_cache.page_size = storage ? 256 : 1;
    c.kv_cache.null_page = storage;
    c.kv_cache.layout = KvLayout::kNHD;
    c.kv_cache.allocation = storage ? PageAlloc::kFragmented : PageAlloc::kContiguous;
    c.kv_cache.max_num_blocks_per_seq = storage ? 9 : 2000;  // a wider table / cache: more unused slots
    c.kv_cache.poison_unused = true;
    validate_case(c);
    check_twice_lowp(kKvcache, c);
  }
}

// num_splits 1 (/split/planner off), FA2's heuristic, and a fixed count: each passes, and the
// fixed and heuristic ones run the split kernel and its combine.
TEST(FlashAttn, SplitPathForcedOnAndOff) {
  REQUIRE_COMPILED_GPU(kVarlen);
  CaseSpec c = random_case(kKvcache, 11);
  c.dtype = DType::kBf16;
  c.num_qo_heads = 16;
  c.num_kv_heads = 2;
  c.attention = {};
  c.requests = {{1, 5000}, {1, 3000}};
  c.kv_cache.storage = KvStorage::kRagged;
  c.kv_cache.page_size = 1;
  c.kv_cache.null_page = false;
  c.kv_cache.layout = KvLayout::kNHD;
  c.kv_cache.allocation = PageAlloc::kContiguous;
  c.kv_cache.max_num_blocks_per_seq.reset();
  c.split.planner = Planner::kOff;
  validate_case(c);
  Result off = check_twice_lowp(kKvcache, c);
  EXPECT_NE(off.message.find("num_splits=1"), std::string::npos) << off.message;
  EXPECT_EQ(off.message.find("splitkv"), std::string::npos) << off.message;
  c.split.planner = Planner::kFlashAttn;
  Result heur = check_twice_lowp(kKvcache, c);
  EXPECT_NE(heur.message.find("splitkv"), std::string::npos) << heur.message;
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 640;  // tokens (ragged): ceil(5000 / 640) = 8 splits
  validate_case(c);
  Result fixed = check_twice_lowp(kKvcache, c);
  EXPECT_NE(fixed.message.find("num_splits=8"), std::string::npos) << fixed.message;
  EXPECT_NE(fixed.message.find("splitkv"), std::string::npos) << fixed.message;
}

// With a fixed num_splits (and a fixed cache width) a request's output is the same bits alone and
// batched: FA2's split depends on the batch only through its heuristic.
TEST(FlashAttn, BatchInvariantWithAFixedNumSplits) {
  REQUIRE_COMPILED_GPU(kVarlen);
  CaseSpec c = random_case(kKvcache, 13);
  c.dtype = DType::kBf16;
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.attention = {};
  c.attention.causal = true;
  c.requests.assign(6, {4, 0});
  for (int i = 0; i < 6; ++i) c.requests[i].kv_len = 1500 + 377 * i;
  c.kv_cache.storage = KvStorage::kPaged;
  c.kv_cache.page_size = 256;
  c.kv_cache.null_page = true;
  c.kv_cache.max_num_blocks_per_seq = 16;
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 2;  // pages: 8 splits of 512 keys for every batch
  validate_case(c);
  const Plan p = plan_case(c);
  const Workload w = make_workload(c, p.pages);
  const Result all = run_id(kKvcache, c, p, w);
  ASSERT_TRUE(all.ok()) << all.message;
  const int row = c.num_qo_heads * c.head_dim_vo;
  for (int r : {0, 3, 5}) {
    const CaseSpec a = alone(c, r);
    const Plan pa = plan_case(a);
    const Result one = run_id(kKvcache, a, pa, make_workload(a, pa.pages));
    ASSERT_TRUE(one.ok()) << one.message;
    const size_t first = static_cast<size_t>(4 * r) * row;
    EXPECT_EQ(std::memcmp(one.o.data(), all.o.data() + first, one.o.size() * sizeof(float)), 0)
        << "request " << r << " differs alone and batched\n  " << one.message << "\n  " << all.message;
  }
  // the heuristic's split count does follow the batch: 1 request vs 6 pick different counts
  c.split.planner = Planner::kFlashAttn;
  c.split.fixed_split_size.reset();
  EXPECT_NE(plan_case(alone(c, 0)).library.flash_attn.num_splits, plan_case(c).library.flash_attn.num_splits);
}

// Speculative target verify as flash_attn_with_kvcache runs it: 2..8 draft tokens per request,
// causal, over a long paged cache.
TEST(FlashAttn, SpeculativeVerifyOverALongCache) {
  REQUIRE_COMPILED_GPU(kVarlen);
  for (int draft = 2; draft <= 8; draft += std::getenv("ATTNSCOPE_GPU_QUICK") ? 6 : 2) {
    CaseSpec c = random_case(kKvcache, 17 + draft);
    c.name = "verify " + std::to_string(draft);
    c.dtype = DType::kBf16;
    c.num_qo_heads = 32;
    c.num_kv_heads = 8;
    c.attention = {};
    c.attention.causal = true;
    c.requests = {{draft, 12000}, {draft, 7001}, {draft, 16384}};
    c.kv_cache.storage = KvStorage::kPaged;
    c.kv_cache.page_size = 256;
    c.kv_cache.null_page = true;
    c.kv_cache.max_num_blocks_per_seq.reset();
    validate_case(c);
    check_twice_lowp(kKvcache, c);
  }
}

// /engine sglang-fa: flash_attn.kvcache fed SGLang's cache_seqlens_int32 and page_table (decode and
// chain verify) gives the reference's result; Llama-4 chunked local, whose local_block_table SGLang
// cuts from the token-slot table, is refused naming that tensor, with no launch (no crash).
TEST(FlashAttn, FedFromSglangsTensors) {
  REQUIRE_COMPILED_GPU(kVarlen);
  for (int q : {1, 4}) {
    CaseSpec c = random_case(kKvcache, 31 + q);
    c.name = "sglang-fa q_len " + std::to_string(q);
    c.dtype = DType::kBf16;
    c.head_dim_qk = c.head_dim_vo = 128;
    c.num_qo_heads = 16;
    c.num_kv_heads = 2;
    c.attention = {};
    c.attention.causal = true;
    c.requests = {{q, 3000}, {q, 700}, {q, 5000}};
    c.kv_cache.storage = KvStorage::kPaged;
    c.kv_cache.page_size = 256;
    c.kv_cache.null_page = true;
    c.kv_cache.max_num_blocks_per_seq.reset();
    c.engine = "sglang-fa";
    validate_case(c);
    if (!refusal(kKvcache, c).empty()) GTEST_SKIP() << refusal(kKvcache, c);
    const Result a = check_twice_lowp(kKvcache, c);
    EXPECT_NE(a.message.find("fed from SGLang's cache_seqlens_int32"), std::string::npos) << a.message;
  }
  CaseSpec c = random_case(kKvcache, 40);
  c.dtype = DType::kBf16;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.attention = {};
  c.attention.causal = true;
  c.attention.local_chunk = 256;
  c.requests = {{1, 1000}, {1, 600}, {1, 900}};
  c.kv_cache.storage = KvStorage::kPaged;
  c.kv_cache.page_size = 256;
  c.kv_cache.null_page = true;
  c.kv_cache.max_num_blocks_per_seq.reset();
  c.engine = "sglang-fa";
  validate_case(c);
  const Plan p = plan_case(c);
  const Result r = run_id(kKvcache, c, p, make_workload(c, p.pages));
  EXPECT_EQ(r.status, Status::kUnsupported) << r.message;
  EXPECT_NE(r.message.find("local_attn_metadata.local_block_table["), std::string::npos) << r.message;
}
