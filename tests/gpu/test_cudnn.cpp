// cudnn.sdpa (the real cuDNN through its frontend graph API) against the fp64 GPU reference with
// FlashAttention's 2x rule (cpu.lowp as the same-precision baseline): every example cuDNN
// supports and seeded random cases; targeted cases for the conventions translated in
// backends/cudnn/cudnn_conventions.cpp (bottom-right causal, window W, ALiBi, padding rows);
// the refusals and their reasons; poisoned pages; the graph cache and the timing.
// Skips with the reason when the cudnn family is not compiled; the device tests also skip without
// a device. The refusal tests need no device: check() decides them from the case alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "attnscope/compare.h"
#include "attnscope/device.h"
#include "attnscope/registry.h"
#include "case_gen.h"
#include "case_json.h"
#include "cudnn_case.h"
#include "require.h"

using namespace attnscope;
using attnscope::testing::cudnn_ok;
using attnscope::testing::random_case;
using attnscope::testing::set_head_dim;
namespace fs = std::filesystem;

namespace {

constexpr const char* kId = "cudnn.sdpa";

// Under compute-sanitizer (ATTNSCOPE_GPU_QUICK=1) the randomised loops run a sixth of their cases.
int cases(int full) { return std::getenv("ATTNSCOPE_GPU_QUICK") ? std::max(2, full / 6) : full; }

Result run(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w, int bench_reps = 0) {
  auto b = make_backend(id);
  RunOptions o;
  o.bench_reps = bench_reps;
  return run_backend(*b, c, p, w, o);
}

void expect_finite(const Result& r) {
  int64_t nan = 0;
  for (float x : r.o) nan += std::isnan(x);
  for (float x : r.lse) nan += std::isnan(x);
  EXPECT_EQ(nan, 0) << r.backend << " wrote NaN (or left poisoned elements)";
}

// A cuDNN that reads slots no request uses (9.19: docs/backends.md, "cuDNN and unused page slots")
// writes NaN on a poisoned pool. What the tests hold it to there: the result says so, the NaN rows
// belong to requests whose last page has unused slots (the only poisoned slots a tile past the
// sequence's end reaches: the page table repeats the last page), and every other value has the clean
// pool's bits. Returns whether `a` (run on `poisoned`) read unused slots.
bool expect_unused_slot_reads_confined(const CaseSpec& poisoned, const Result& a) {
  if (a.message.find("read K/V slots no request uses") == std::string::npos) return false;
  CaseSpec clean = poisoned;
  clean.kv_cache.poison_unused = false;
  const Plan pc = make_plan(clean);
  const Result b = run(kId, clean, pc, Workload{});
  EXPECT_TRUE(b.ok()) << b.message;
  const int Hq = clean.num_qo_heads, dv = clean.head_dim_vo;
  int64_t t = 0, nan_rows = 0;
  for (const RequestSpec& r : clean.requests) {
    const bool tail_unused = r.kv_len % clean.kv_cache.page_size != 0;
    for (int64_t q = 0; q < r.q_len; ++q, ++t)
      for (int h = 0; h < Hq; ++h) {
        const int64_t row = t * Hq + h;
        bool nan = std::isnan(a.lse[row]);
        for (int d = 0; d < dv; ++d) nan |= std::isnan(a.o[row * dv + d]);
        nan_rows += nan;
        if (nan) {
          EXPECT_TRUE(tail_unused) << "row " << row << ": NaN in a request whose pages are all full (kv_len " << r.kv_len << ")";
          continue;
        }
        EXPECT_EQ(f32_bits(a.lse[row]), f32_bits(b.lse[row])) << "row " << row;
        for (int d = 0; d < dv; ++d) EXPECT_EQ(f32_bits(a.o[row * dv + d]), f32_bits(b.o[row * dv + d])) << "row " << row;
      }
  }
  EXPECT_GT(nan_rows, 0) << a.message;
  std::printf("  %s: %lld NaN rows confined as stated: %s\n", poisoned.name.c_str(), static_cast<long long>(nan_rows),
              a.message.substr(a.message.find("NaN in ")).c_str());
  return true;
}

// The FlashAttention rule against cuda.reference, cpu.lowp as the same-precision baseline; the
// LSE (natural log on both sides) within 1e-3, fully masked rows (-inf) at the same places. On a
// cuDNN that reads unused slots, a poisoned pool is held to expect_unused_slot_reads_confined and
// the accuracy is checked on the same case's clean pool.
void check_twice_lowp(const CaseSpec& poisoned, Result* out = nullptr) {
  CaseSpec c = poisoned;
  if (c.kv_cache.poison_unused) {
    const Result first = run(kId, c, make_plan(c), Workload{});
    ASSERT_TRUE(first.ok()) << c.name << ": " << first.message;
    if (expect_unused_slot_reads_confined(c, first)) c.kv_cache.poison_unused = false;
  }
  const Plan p = make_plan(c);
  const Workload w = make_workload(c, p.pages);
  const Result a = run(kId, c, p, w), ref = run("cuda.reference", c, p, w), lowp = run("cpu.lowp", c, p, w);
  ASSERT_TRUE(a.ok()) << c.name << ": " << a.message;
  ASSERT_TRUE(ref.ok()) << ref.message;
  expect_finite(a);
  // 1e-5 floor: FlashAttention's rounding allowance (as for cuda.flash in test_gpu.cpp).
  const DiffReport d = compare_results(c, a, ref, {kId, "cuda.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &lowp);
  EXPECT_TRUE(d.verdict.pass) << c.name << ": " << d.verdict.detail << "\n  " << a.message;
  EXPECT_EQ(d.lse.nonfinite_mismatch, 0) << c.name << ": fully masked rows differ";
  EXPECT_LT(d.lse.max_abs, 1e-3) << c.name << ": LSE (natural log) differs\n  " << a.message;
  if (out) *out = a;
}

// A small paged case for the targeted tests.
CaseSpec base_case(const std::string& name) {
  CaseSpec c;
  c.name = name;
  c.requests = {RequestSpec{37, 150}, RequestSpec{1, 77}, RequestSpec{64, 64}, RequestSpec{5, 300}};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.dtype = DType::kBf16;
  c.kv_cache.page_size = 16;
  c.kv_cache.allocation = PageAlloc::kShuffled;
  c.kv_cache.allocation_seed = 3;
  c.backends = {kId};
  validate_case(c);
  return c;
}

}  // namespace

TEST(CudnnSdpa, FamilyIsRegistered) {
  const BackendFamily* f = family_of(kId);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->name, "cudnn");
  ASSERT_EQ(f->backends.size(), 2u);
  EXPECT_EQ(f->backends[0].id, kId);
  EXPECT_EQ(f->backends[1].id, "cudnn.sdpa_fp8");
  auto b = make_backend(kId);
  ASSERT_NE(b, nullptr);
  if (f->compiled) {
    EXPECT_NE(f->note.find("cuDNN 9."), std::string::npos) << f->note;
    EXPECT_NE(f->note.find("frontend"), std::string::npos) << f->note;
  } else {
    EXPECT_EQ(b->check(base_case("x")).rfind("not compiled", 0), 0u);
  }
}

TEST(CudnnSdpa, RefusesWhatCudnnCannotExpressWithTheReason) {
  REQUIRE_COMPILED(kId);
  auto b = make_backend(kId);
  const CaseSpec ok = base_case("ok");
  const std::string base_why = b->check(ok);
  EXPECT_TRUE(base_why.empty() || status_of_reason(base_why) == Status::kNoDevice ||
              base_why.find("compute capability") != std::string::npos)
      << base_why;

  struct Refusal {
    const char* what;
    std::function<void(CaseSpec&)> edit;
    const char* reason;  // a phrase the reason must hold
  };
  const std::vector<Refusal> refusals = {
      {"fp32", [](CaseSpec& c) { c.dtype = DType::kFp32; }, "fp32"},
      {"soft-cap", [](CaseSpec& c) { c.attention.soft_cap = 30.0; }, "soft-cap"},
      {"head_dim 36", [](CaseSpec& c) { c.head_dim_qk = c.head_dim_vo = 36; }, "head_dim qk 36"},
      {"head_dim vo 20", [](CaseSpec& c) { c.head_dim_vo = 20; }, "head_dim vo 20"},
      {"documents",
       [](CaseSpec& c) {
         c.requests[0].doc_starts = {0, 70};
       },
       "documents"},
      {"prefix-LM",
       [](CaseSpec& c) {
         c.attention.prefix_lm = true;
         for (auto& r : c.requests) r.prefix_len = r.kv_len;  // request 2 (q == kv) opens keys above the diagonal
       },
       "prefix-LM"},
      {"ALiBi non-causal",
       [](CaseSpec& c) {
         c.attention.alibi = true;
         c.attention.causal = false;
       },
       "ALiBi without a causal mask"},
      {"ALiBi q_len < kv_len", [](CaseSpec& c) { c.attention.alibi = true; }, "q_len == kv_len"},
  };
  for (const auto& r : refusals) {
    SCOPED_TRACE(r.what);
    CaseSpec c = ok;
    r.edit(c);
    validate_case(c);
    const std::string why = b->check(c);
    EXPECT_NE(why.find(r.reason), std::string::npos) << why;
    EXPECT_EQ(status_of_reason(why), Status::kUnsupported) << why;
    // a refused case never reaches cuDNN, and the result carries the reason
    const Plan p = make_plan(c);
    const Result res = run(kId, c, p, Workload{});
    EXPECT_EQ(res.status, Status::kUnsupported);
    EXPECT_EQ(res.message, why);
  }

  // what cuDNN can express is not refused: a prefix every query already sees is plain causal
  CaseSpec prefix = ok;
  prefix.attention.prefix_lm = true;
  for (auto& r : prefix.requests) r.prefix_len = r.kv_len - r.q_len + 1;
  validate_case(prefix);
  EXPECT_EQ(b->check(prefix), base_why);
  CaseSpec alibi = ok;  // ALiBi with q_len == kv_len everywhere
  alibi.attention.alibi = true;
  for (auto& r : alibi.requests) r.q_len = r.kv_len;
  validate_case(alibi);
  EXPECT_EQ(b->check(alibi), base_why);
}

TEST(CudnnSdpa, EveryExampleItSupportsPassesTheTwiceLowpRule) {
  REQUIRE_COMPILED_GPU(kId);
  auto b = make_backend(kId);
  int supported = 0;
  for (const auto& e : fs::directory_iterator(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    const CaseSpec c = read_case_file(e.path().string()).spec;
    const std::string why = refusal(kId, c);  // the registry asks as run_backend does (FP8 included)
    if (!why.empty()) {
      // only what cuDNN cannot express (soft-cap, documents, prefix-LM, ...), never the device
      EXPECT_EQ(status_of_reason(why), Status::kUnsupported) << why;
      continue;
    }
    Result r;
    check_twice_lowp(c, &r);
    if (c.attention.local_chunk) {
      EXPECT_NE(r.message.find("virtual batches"), std::string::npos) << r.message;
    }
    ++supported;
  }
  // 8 of the 11 examples: all but gemma2-window-softcap (soft-cap), fully-masked-rows (documents)
  // and prefix-lm (a prefix above the diagonal)
  EXPECT_GE(supported, 8);
}

TEST(CudnnSdpa, RandomCasesPassTheTwiceLowpRule) {
  REQUIRE_COMPILED_GPU(kId);
  auto b = make_backend(kId);
  int ran = 0;
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(cases(48)); ++seed) {
    const CaseSpec c = cudnn_ok(random_case(seed), seed);
    SCOPED_TRACE(c.name + " head_dim " + std::to_string(c.head_dim_qk));
    ASSERT_EQ(b->check(c), "");
    check_twice_lowp(c);
    ++ran;
  }
  EXPECT_GE(ran, cases(40));
}

TEST(CudnnSdpa, BottomRightCausalAndWindowSpellings) {
  REQUIRE_COMPILED_GPU(kId);
  // q_len < kv_len everywhere but request 2: a top-left diagonal or a window off by one would
  // move whole columns of probability mass, far beyond the 2x rule.
  for (bool causal : {true, false})
    for (int window : {0, 1, 2, 7, 64, 1000})
      for (KvLayout layout : {KvLayout::kNHD, KvLayout::kHND}) {
        CaseSpec c =
            base_case("causal-" + std::to_string(causal) + "-window-" + std::to_string(window) + "-" + layout_name(layout));
        c.attention.causal = causal;
        if (window) c.attention.window = window;
        c.kv_cache.layout = layout;
        validate_case(c);
        SCOPED_TRACE(c.name);
        check_twice_lowp(c);
      }
}

TEST(CudnnSdpa, AlibiWhereCudnnSupportsIt) {
  REQUIRE_COMPILED_GPU(kId);
  for (int heads : {8, 6}) {  // 6: the interpolated slopes of a non-power-of-two head count
    for (int window : {0, 33}) {
      CaseSpec c = base_case("alibi-" + std::to_string(heads) + "-window-" + std::to_string(window));
      c.num_qo_heads = heads;
      c.attention.alibi = true;
      if (window) c.attention.window = window;
      for (auto& r : c.requests) r.q_len = r.kv_len;
      validate_case(c);
      SCOPED_TRACE(c.name);
      check_twice_lowp(c);
    }
  }
}

TEST(CudnnSdpa, PaddingQueriesGiveZeroAndMinusInf) {
  REQUIRE_COMPILED_GPU(kId);
  CaseSpec c = base_case("padding");
  // some padding queries; requests whose queries are all padding (left out of cuDNN's batch), one
  // of them with no key left at all (pad_start 0)
  c.requests = {RequestSpec{40, 100}, RequestSpec{10, 10}, RequestSpec{5, 50}, RequestSpec{1, 20}, RequestSpec{3, 33}};
  c.requests[0].pad_start = 90;
  c.requests[1].pad_start = 4;
  c.requests[2].pad_start = 30;
  c.requests[3].pad_start = 0;
  for (bool ragged : {false, true}) {
    if (ragged) {
      c.kv_cache = KvCacheSpec{};
      c.kv_cache.storage = KvStorage::kRagged;
      c.kv_cache.page_size = 1;
      c.kv_cache.null_page = false;
    }
    validate_case(c);
    SCOPED_TRACE(ragged ? "ragged" : "paged");
    Result a;
    check_twice_lowp(c, &a);
    ASSERT_TRUE(a.ok());
    const Plan p = make_plan(c);
    const Result cpu = run("cpu.reference", c, p, make_workload(c, p.pages));
    int64_t masked = 0;
    for (size_t i = 0; i < a.lse.size(); ++i) {
      ASSERT_EQ(std::isinf(a.lse[i]), std::isinf(cpu.lse[i])) << "row " << i;
      if (!std::isinf(a.lse[i])) continue;
      ++masked;
      EXPECT_LT(a.lse[i], 0.0f);
      for (int d = 0; d < c.head_dim_vo; ++d) ASSERT_EQ(a.o[i * c.head_dim_vo + d], 0.0f) << "row " << i;
    }
    EXPECT_EQ(masked, (10 + 6 + 5 + 1 + 0) * c.num_qo_heads);
  }
  // every query padding: nothing for cuDNN to run, every row fully masked
  for (auto& r : c.requests) r.pad_start = 0;
  validate_case(c);
  const Plan p = make_plan(c);
  const Result a = run(kId, c, p, Workload{});
  ASSERT_TRUE(a.ok()) << a.message;
  for (float x : a.lse) ASSERT_TRUE(std::isinf(x) && x < 0);
  for (float x : a.o) ASSERT_EQ(x, 0.0f);
}

TEST(CudnnSdpa, PoisonedPagesDoNotChangeTheOutput) {
  REQUIRE_COMPILED_GPU(kId);
  std::vector<CaseSpec> cs = {read_case_file(std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/poisoned-pages.json").spec};
  for (uint64_t seed = 200; seed < 200 + static_cast<uint64_t>(cases(12)); ++seed) {
    CaseSpec c = cudnn_ok(random_case(seed), seed);
    if (c.kv_cache.storage == KvStorage::kRagged) continue;  // nothing unused to poison
    c.kv_cache.allocation = PageAlloc::kFragmented;
    validate_case(c);
    cs.push_back(c);
  }
  for (const CaseSpec& base : cs) {
    SCOPED_TRACE(base.name);
    CaseSpec clean = base, poisoned = base;
    clean.kv_cache.poison_unused = false;
    poisoned.kv_cache.poison_unused = true;
    const Plan pc = make_plan(clean), pp = make_plan(poisoned);
    const Result a = run(kId, clean, pc, Workload{}), b = run(kId, poisoned, pp, Workload{});
    ASSERT_TRUE(a.ok() && b.ok()) << a.message << "\n" << b.message;
    if (expect_unused_slot_reads_confined(poisoned, b)) continue;  // this cuDNN reads them: held to that test's rules
    expect_finite(b);
    // the same graph (poisoning does not change the shape class) on the same live values
    EXPECT_TRUE(compare_results(base, b, a, {"poisoned", "clean", CompareRule::kBitwise, 0, 0, ""}, nullptr).verdict.pass);
  }
}

TEST(CudnnSdpa, StoragesAgree) {
  REQUIRE_COMPILED_GPU(kId);
  const CaseSpec base = base_case("storages");
  CaseSpec nhd = base, hnd = base, ragged = base;
  nhd.kv_cache.allocation = PageAlloc::kFragmented;
  hnd.kv_cache.layout = KvLayout::kHND;
  hnd.kv_cache.page_size = 64;
  ragged.kv_cache = KvCacheSpec{};
  ragged.kv_cache.storage = KvStorage::kRagged;
  ragged.kv_cache.page_size = 1;
  ragged.kv_cache.null_page = false;
  std::vector<Result> rs;
  for (const CaseSpec* c : {&nhd, &hnd, &ragged}) {
    const Plan p = make_plan(*c);
    rs.push_back(run(kId, *c, p, Workload{}));
    ASSERT_TRUE(rs.back().ok()) << rs.back().message;
  }
  // the same inputs through three storages: only cuDNN's engine choice can differ
  for (int i : {1, 2}) {
    const DiffReport d = compare_results(base, rs[i], rs[0], {"x", "nhd", CompareRule::kAllclose, 1e-2, 1e-3, ""}, nullptr);
    EXPECT_TRUE(d.verdict.pass) << i << ": " << d.verdict.detail;
  }
}

// A GQA decode batch runs packed (the query heads of a KV head as rows of one sequence, K/V read
// once per KV head); causal and not, paged and ragged, with padding, MHA left unpacked, a window
// left unpacked (its band would differ per row). Every one passes the 2x rule with its LSE, and the
// packed and plain forms of one batch agree.
TEST(CudnnSdpa, GqaDecodeRunsPackedAndAgrees) {
  REQUIRE_COMPILED_GPU(kId);
  CaseSpec base = base_case("gqa-decode-packed");
  base.requests = {RequestSpec{1, 150}, RequestSpec{1, 77}, RequestSpec{1, 1}, RequestSpec{1, 3000}};
  base.requests[1].pad_start = 40;  // its one query is padding: left out of the batch (O = 0, LSE = -inf)
  base.num_qo_heads = 16;
  base.num_kv_heads = 4;
  validate_case(base);
  struct Variant {
    const char* name;
    std::function<void(CaseSpec&)> edit;
    bool packed;
  };
  const Variant variants[] = {
      {"causal paged", [](CaseSpec&) {}, true},
      {"non-causal", [](CaseSpec& c) { c.attention.causal = false; }, true},
      {"ragged",
       [](CaseSpec& c) {
         c.kv_cache = KvCacheSpec{};
         c.kv_cache.storage = KvStorage::kRagged;
         c.kv_cache.page_size = 1;
         c.kv_cache.null_page = false;
       },
       true},
      {"fp16 group 8",
       [](CaseSpec& c) {
         c.dtype = DType::kFp16;
         c.num_kv_heads = 2;
       },
       true},
      {"MHA", [](CaseSpec& c) { c.num_kv_heads = c.num_qo_heads; }, false},
      {"window", [](CaseSpec& c) { c.attention.window = 100; }, false},
  };
  for (const Variant& v : variants) {
    CaseSpec c = base;
    v.edit(c);
    c.name = std::string("gqa-decode-packed ") + v.name;
    validate_case(c);
    Result r;
    check_twice_lowp(c, &r);
    EXPECT_EQ(r.message.find("GQA decode packed") != std::string::npos, v.packed) << c.name << ": " << r.message;
  }
}

// A uniform batch on contiguous (ragged) K/V runs as plain dense tensors, the form PyTorch's SDPA
// hands cuDNN: causal (top-left = bottom-right), bottom-right with q_len < kv_len, non-causal, a
// window, GQA, head dim 256, a packed GQA decode batch. Each passes the 2x rule with its LSE; a
// batch that is not uniform, or paged, or has padding, keeps the ragged form.
TEST(CudnnSdpa, UniformContiguousBatchesRunDense) {
  REQUIRE_COMPILED_GPU(kId);
  CaseSpec base = base_case("dense");
  base.requests = {RequestSpec{96, 96}, RequestSpec{96, 96}, RequestSpec{96, 96}};
  base.kv_cache = KvCacheSpec{};
  base.kv_cache.storage = KvStorage::kRagged;
  base.kv_cache.page_size = 1;
  base.kv_cache.null_page = false;
  validate_case(base);
  struct Variant {
    const char* name;
    std::function<void(CaseSpec&)> edit;
    bool dense;
  };
  const Variant variants[] = {
      {"causal", [](CaseSpec&) {}, true},
      {"non-causal fp16",
       [](CaseSpec& c) {
         c.attention.causal = false;
         c.dtype = DType::kFp16;
       },
       true},
      {"bottom-right q < kv",
       [](CaseSpec& c) {
         for (auto& r : c.requests) r.q_len = 40;
       },
       true},
      {"window", [](CaseSpec& c) { c.attention.window = 33; }, true},
      {"MHA hd 256",
       [](CaseSpec& c) {
         c.num_kv_heads = c.num_qo_heads;
         set_head_dim(c, 256);
       },
       true},
      {"packed GQA decode",
       [](CaseSpec& c) {
         for (auto& r : c.requests) r.q_len = 1;
       },
       true},
      {"not uniform",
       [](CaseSpec& c) {
         c.requests[1].kv_len = 120;
         c.requests[1].q_len = 120;
       },
       false},
      {"padding", [](CaseSpec& c) { c.requests[2].pad_start = 80; }, false},
      {"paged", [](CaseSpec& c) { c.kv_cache = base_case("x").kv_cache; }, false},
  };
  for (const Variant& v : variants) {
    CaseSpec c = base;
    v.edit(c);
    c.name = std::string("dense ") + v.name;
    validate_case(c);
    Result r;
    check_twice_lowp(c, &r);
    EXPECT_EQ(r.message.find("dense:") != std::string::npos, v.dense) << c.name << ": " << r.message;
  }
}

TEST(CudnnSdpa, GraphIsBuiltOncePerShapeClass) {
  REQUIRE_COMPILED_GPU(kId);
  // a shape class no other test uses, so the first run builds
  CaseSpec c = base_case("graph-cache");
  c.requests = {RequestSpec{20, 100}, RequestSpec{1, 60}, RequestSpec{7, 7}};
  c.num_qo_heads = 10;
  c.num_kv_heads = 5;
  c.head_dim_qk = c.head_dim_vo = 72;
  c.dtype = DType::kFp16;
  c.kv_cache.page_size = 8;
  c.kv_cache.layout = KvLayout::kHND;
  validate_case(c);
  const Plan p = make_plan(c);
  const Result first = run(kId, c, p, Workload{});
  ASSERT_TRUE(first.ok()) << first.message;
  EXPECT_NE(first.message.find("graph built in"), std::string::npos) << first.message;

  // data, a length inside its bucket, poisoning and the page order do not change the graph
  CaseSpec edited = c;
  edited.data.seed = 99;
  edited.requests[0].kv_len = 110;
  edited.kv_cache.poison_unused = true;
  edited.kv_cache.allocation_seed = 17;
  validate_case(edited);
  const Plan pe = make_plan(edited);
  const Result again = run(kId, edited, pe, Workload{});
  ASSERT_TRUE(again.ok()) << again.message;
  EXPECT_NE(again.message.find("graph cached"), std::string::npos) << again.message;

  // a window is part of the graph
  CaseSpec windowed = c;
  windowed.attention.window = 16;
  validate_case(windowed);
  const Plan pw = make_plan(windowed);
  const Result third = run(kId, windowed, pw, Workload{});
  ASSERT_TRUE(third.ok()) << third.message;
  EXPECT_NE(third.message.find("graph built in"), std::string::npos) << third.message;
}

TEST(CudnnSdpa, BenchTimesTheGraphExecution) {
  REQUIRE_COMPILED_GPU(kId);
  const CaseSpec c = base_case("bench");
  const Plan p = make_plan(c);
  const Result r = run(kId, c, p, Workload{}, 7);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.timing.reps, 7);
  EXPECT_GT(r.timing.device_ms_min, 0.0);
  EXPECT_LE(r.timing.device_ms_min, r.timing.device_ms);
  EXPECT_LE(r.timing.device_ms, r.timing.device_ms_max);
  expect_finite(r);
}
