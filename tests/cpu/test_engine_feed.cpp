// /engine: the real-library backends fed from the engine's metadata tensors (engine_metadata.h)
// instead of attnscope's own. What flash_attn.kvcache receives under /engine sglang-fa: SGLang's
// cache_seqlens_int32 and page_table (or local_attn_metadata's virtual batches), and the refusal,
// naming the tensor and the rule, where what SGLang builds is not what flash_attn_with_kvcache takes.
#include <gtest/gtest.h>

#include <random>

#include "attnscope/case_spec.h"
#include "attnscope/engine_metadata.h"
#include "attnscope/plan.h"
#include "case_json.h"
#include "fa_conventions.h"
#include "fi_engine_feed.h"

using namespace attnscope;
namespace fa = attnscope::peers::flash_attn;

namespace {

CaseSpec sglang_case(std::vector<RequestSpec> reqs) {
  CaseSpec c;
  c.num_qo_heads = 16;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.attention.causal = true;
  c.kv_cache.page_size = 256;
  c.kv_cache.allocation = PageAlloc::kShuffled;
  c.kv_cache.allocation_seed = 3;
  c.requests = std::move(reqs);
  c.engine = "sglang-fa";
  validate_case(c);
  return c;
}

std::vector<int> ints(const EngineTensor* t) { return {t->values.begin(), t->values.end()}; }

}  // namespace

// Decode and chain verify: the launch's cache_seqlens and block table are SGLang's tensors, which for
// these batches hold what attnscope's own launch holds.
TEST(EngineFeed, SglangDecodeAndVerifyFeedTheirTensors) {
  for (int q : {1, 4}) {
    const CaseSpec c = sglang_case({{q, 3000}, {q, 700}, {q, 5000}});
    const Plan p = make_plan(c);
    const EngineView v = engine_metadata(Engine::kSglangFa, c, p);
    ASSERT_FALSE(v.refusal) << *v.refusal;
    EXPECT_EQ(v.mode, q == 1 ? "decode" : "target_verify");
    const fa::Launch l = fa::translate(fa::Api::kKvcache, c, p, 132);
    EXPECT_EQ(l.engine_refusal, "");
    EXPECT_NE(l.fed.find("cache_seqlens_int32"), std::string::npos) << l.fed;
    EXPECT_EQ(l.cu_seqlens_k, ints(v.find("cache_seqlens_int32")));
    EXPECT_EQ(l.block_table, ints(v.find("page_table")));
    EXPECT_EQ(l.max_num_blocks_per_seq, v.find("page_table")->shape[1]);
    EXPECT_EQ(l.b, 3);
    CaseSpec own = c;
    own.engine.clear();
    const fa::Launch o = fa::translate(fa::Api::kKvcache, own, p, 132);
    EXPECT_EQ(o.fed, "");
    EXPECT_EQ(o.cu_seqlens_k, l.cu_seqlens_k);
    EXPECT_EQ(o.block_table, l.block_table);
    EXPECT_EQ(o.num_splits, l.num_splits);
  }
}

// Llama-4 chunked local: FA2 itself refuses local_chunk; under /engine sglang-fa the kvcache API takes
// it as SGLang's virtual batches. SGLang cuts local_block_table from the token-slot table, so with
// 256-token pages its cells are slots, past the pool's pages: refused naming the tensor, no launch.
TEST(EngineFeed, SglangLocalBlockTableOfTokenSlotsIsRefusedNamingIt) {
  CaseSpec c = sglang_case({{1, 1000}, {1, 600}, {1, 900}});
  c.attention.local_chunk = 256;
  validate_case(c);
  const fa::Built built{{128}, {DType::kBf16}};
  EXPECT_EQ(fa::refusal_reason(fa::Api::kKvcache, c, built), "");
  EXPECT_NE(fa::refusal_reason(fa::Api::kVarlen, c, built).find("/attention/local_chunk"), std::string::npos);
  CaseSpec own = c;
  own.engine.clear();
  EXPECT_NE(fa::refusal_reason(fa::Api::kKvcache, own, built).find("/attention/local_chunk"), std::string::npos);
  const Plan p = make_plan(c);
  const EngineView v = engine_metadata(Engine::kSglangFa, c, p);
  ASSERT_NE(v.find("local_attn_metadata.local_block_table"), nullptr);
  EXPECT_TRUE(v.find("local_attn_metadata.local_block_table")->slots);
  const fa::Launch l = fa::translate(fa::Api::kKvcache, c, p, 132);
  EXPECT_NE(l.engine_refusal.find("local_attn_metadata.local_block_table["), std::string::npos) << l.engine_refusal;
  EXPECT_NE(l.engine_refusal.find("token slots"), std::string::npos) << l.engine_refusal;
}

// A prefill whose queries cross a chunk boundary becomes virtual batches of other lengths than q_len:
// flash_attn_with_kvcache has no cu_seqlens_q, so local_query_start_loc is named.
TEST(EngineFeed, SglangVirtualBatchesOfOtherLengthsAreRefused) {
  CaseSpec c = sglang_case({{300, 1000}, {300, 600}});
  c.attention.local_chunk = 256;
  validate_case(c);
  const fa::Launch l = fa::translate(fa::Api::kKvcache, c, make_plan(c), 132);
  EXPECT_NE(l.engine_refusal.find("local_attn_metadata.local_query_start_loc"), std::string::npos) << l.engine_refusal;
  EXPECT_NE(l.engine_refusal.find("no cu_seqlens_q"), std::string::npos) << l.engine_refusal;
}

// Ragged storage is SGLang's page_size 1 pool: its page_table of token slots cannot be FA2's.
TEST(EngineFeed, SglangRaggedPoolIsRefusedNamingPageTable) {
  CaseSpec c = sglang_case({{1, 300}, {1, 700}});
  c.kv_cache.storage = KvStorage::kRagged;
  c.kv_cache.page_size = 1;
  c.kv_cache.null_page = false;
  c.kv_cache.allocation = PageAlloc::kContiguous;
  validate_case(c);
  const fa::Launch l = fa::translate(fa::Api::kKvcache, c, make_plan(c), 132);
  EXPECT_EQ(l.engine_refusal.rfind("/engine sglang-fa: page_table", 0), 0u) << l.engine_refusal;
}

// /engine in the case file: an engine id, written back only when set.
TEST(EngineFeed, CaseFieldIsValidatedAndRoundTrips) {
  CaseSpec c = sglang_case({{1, 300}});
  const CaseSpec back = parse_case(case_to_json(c)).spec;
  EXPECT_EQ(back.engine, "sglang-fa");
  c.engine.clear();
  EXPECT_FALSE(case_to_json(c).contains("engine"));
  c.engine = "vllm";
  try {
    validate_case(c);
    FAIL() << "accepted /engine vllm";
  } catch (const CaseError& e) {
    EXPECT_EQ(e.path(), "/engine");
    EXPECT_NE(std::string(e.what()).find("sglang-fa, vllm-flashinfer"), std::string::npos) << e.what();
  }
}

// /engine vllm-flashinfer: flashinfer.decode / flashinfer.prefill fed from vLLM's tensors
// (fi_engine_feed.h). Expected values worked by hand from vLLM's FlashInferMetadataBuilder.build and
// FlashInferImpl.forward (@00a817a) for contiguous pools: page 0 is the null page, then each
// request's pages in request order.
namespace fi = attnscope::peers::flashinfer;

namespace {

CaseSpec vllm_case(std::vector<RequestSpec> reqs, int page_size = 16) {
  CaseSpec c;
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 128;
  c.attention.causal = true;
  c.kv_cache.page_size = page_size;
  c.requests = std::move(reqs);
  c.engine = "vllm-flashinfer";
  validate_case(c);
  return c;
}

EngineTensor* find_mut(EngineView& v, const std::string& name) {
  for (auto& t : v.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace

// Decode only: the decode wrapper gets every request, paged_kv_indptr / _indices / _last_page_len.
TEST(EngineFeed, VllmDecodeBatchFeedsTheDecodeWrapper) {
  const CaseSpec c = vllm_case({{1, 40}, {1, 17}, {1, 64}});
  const Plan p = make_plan(c);
  const fi::VllmFeed f = fi::vllm_feed(c, p);
  ASSERT_EQ(f.refusal, "");
  EXPECT_EQ(f.num_decodes, 3);
  EXPECT_EQ(f.num_prefills, 0);
  EXPECT_EQ(f.decode.units.qo_indptr, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(f.decode.units.kv_indptr, (std::vector<int>{0, 3, 5, 9}));
  EXPECT_EQ(f.decode.units.kv_indices, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(f.decode.units.kv_last_page_len, (std::vector<int>{8, 1, 16}));
  EXPECT_TRUE(f.prefill.entry.empty());
  fi::FiUnits u = fi::fi_units(c, p);
  std::string fed;
  EXPECT_EQ(fi::feed_units(c, p, fi::FiWrapper::kDecode, &u, &fed), "");
  EXPECT_EQ(fed.rfind("fed from vLLM's paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len (decode wrapper, 3 requests", 0),
            0u)
      << fed;
  EXPECT_NE(fed.find("equal to attnscope's own units"), std::string::npos) << fed;
  EXPECT_EQ(u.kv_indices, f.decode.units.kv_indices);
  // flashinfer.prefill is given a batch vLLM runs on the decode wrapper: refused naming the split
  u = fi::fi_units(c, p);
  const std::string why = fi::feed_units(c, p, fi::FiWrapper::kPrefill, &u, &fed);
  EXPECT_NE(why.find("vLLM gives requests [0, 1, 2] to its decode wrapper: split_decodes_and_prefills"), std::string::npos)
      << why;
  EXPECT_EQ(fed, "");
}

// Mixed: the runner reorders decodes, extends, prefills; the decode wrapper gets the leading decodes'
// slices, the prefill wrapper qo_indptr rebased and paged_kv_indptr[num_decodes:] not rebased.
TEST(EngineFeed, VllmMixedBatchSplitsBetweenTheWrappers) {
  const CaseSpec c = vllm_case({{1, 40}, {20, 20}, {1, 17}, {5, 30}});
  const Plan p = make_plan(c);
  const fi::VllmFeed f = fi::vllm_feed(c, p);
  ASSERT_EQ(f.refusal, "");
  EXPECT_EQ(f.request_order, (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(f.num_decodes, 2);
  EXPECT_EQ(f.decode.units.qo_indptr, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(f.decode.units.kv_indptr, (std::vector<int>{0, 3, 5}));
  EXPECT_EQ(f.decode.units.kv_last_page_len, (std::vector<int>{8, 1}));
  EXPECT_EQ(f.prefill.units.qo_indptr, (std::vector<int>{0, 5, 25}));
  EXPECT_EQ(f.prefill.units.kv_indptr, (std::vector<int>{5, 7, 9}));
  EXPECT_EQ(f.prefill.units.kv_indices, (std::vector<int>{1, 2, 3, 6, 7, 8, 9, 4, 5}));
  EXPECT_EQ(f.prefill.units.kv_last_page_len, (std::vector<int>{14, 4}));
  EXPECT_EQ(f.prefill.units.kv_begin, (std::vector<int>{0, 0}));
  EXPECT_EQ(f.prefill.units.q_abs_first, (std::vector<int64_t>{25, 0}));
  fi::FiUnits u;
  std::string fed;
  EXPECT_NE(fi::feed_units(c, p, fi::FiWrapper::kDecode, &u, &fed).find("requests [3, 1] to its prefill wrapper"),
            std::string::npos);
  EXPECT_NE(fi::feed_units(c, p, fi::FiWrapper::kPrefill, &u, &fed).find("requests [0, 2] to its decode wrapper"),
            std::string::npos);
}

// Extends and prefills only: the prefill wrapper takes all; vLLM's order [1, 0] runs in the case's row
// order, with the same pages per request.
TEST(EngineFeed, VllmReorderedPrefillBatchRunsInTheCasesRowOrder) {
  const CaseSpec c = vllm_case({{20, 20}, {5, 30}});
  const Plan p = make_plan(c);
  const fi::VllmFeed f = fi::vllm_feed(c, p);
  ASSERT_EQ(f.refusal, "");
  EXPECT_EQ(f.request_order, (std::vector<int>{1, 0}));
  EXPECT_EQ(f.prefill.units.qo_indptr, (std::vector<int>{0, 5, 25}));
  EXPECT_EQ(f.prefill.units.kv_indices, (std::vector<int>{3, 4, 1, 2}));
  fi::FiUnits u = fi::fi_units(c, p);
  const fi::FiUnits own = u;
  std::string fed;
  ASSERT_EQ(fi::feed_units(c, p, fi::FiWrapper::kPrefill, &u, &fed), "");
  EXPECT_NE(fed.find("qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len (prefill wrapper, 2 requests"),
            std::string::npos)
      << fed;
  EXPECT_NE(fed.find("vLLM's batch order [1, 0] runs in the case's row order"), std::string::npos) << fed;
  EXPECT_EQ(u.qo_indptr, (std::vector<int>{0, 20, 25}));
  EXPECT_EQ(u.kv_indices, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(u.kv_indices, own.kv_indices);
  EXPECT_EQ(u.q_abs_first, (std::vector<int64_t>{0, 25}));
}

// Chunked local attention: the wrappers get make_local_attention_virtual_batches' virtual batches.
TEST(EngineFeed, VllmLocalVirtualBatchesFeedTheWrappers) {
  CaseSpec c = vllm_case({{1, 70}, {1, 40}});
  c.attention.local_chunk = 32;
  validate_case(c);
  Plan p = make_plan(c);
  fi::VllmFeed f = fi::vllm_feed(c, p);
  ASSERT_EQ(f.refusal, "");
  EXPECT_EQ(f.num_decodes, 2);  // one virtual batch per decode: keys from its chunk's start
  EXPECT_EQ(f.decode.units.kv_indptr, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(f.decode.units.kv_indices, (std::vector<int>{5, 8}));
  EXPECT_EQ(f.decode.units.kv_last_page_len, (std::vector<int>{6, 8}));
  EXPECT_EQ(f.decode.units.kv_begin, (std::vector<int>{64, 32}));
  EXPECT_EQ(f.decode.units.q_abs_first, (std::vector<int64_t>{69, 39}));
  fi::FiUnits u = fi::fi_units(c, p);
  std::string fed;
  ASSERT_EQ(fi::feed_units(c, p, fi::FiWrapper::kDecode, &u, &fed), "");
  EXPECT_NE(fed.find("2 virtual batches of chunked local attention"), std::string::npos) << fed;

  c = vllm_case({{40, 40}});  // a prefill across a chunk boundary: two virtual batches, 32 + 8 queries
  c.attention.local_chunk = 32;
  validate_case(c);
  p = make_plan(c);
  f = fi::vllm_feed(c, p);
  ASSERT_EQ(f.refusal, "");
  EXPECT_EQ(f.num_decodes, 0);
  EXPECT_EQ(f.prefill.units.qo_indptr, (std::vector<int>{0, 32, 40}));
  EXPECT_EQ(f.prefill.units.kv_indptr, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(f.prefill.units.kv_indices, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(f.prefill.units.kv_last_page_len, (std::vector<int>{16, 8}));
  EXPECT_EQ(f.prefill.units.kv_begin, (std::vector<int>{0, 32}));
  u = fi::fi_units(c, p);
  ASSERT_EQ(fi::feed_units(c, p, fi::FiWrapper::kPrefill, &u, &fed), "");
  EXPECT_EQ(u.kv_indices, (std::vector<int>{1, 2, 3}));
}

// What the kernel cannot take is refused naming the tensor and the rule; a legal other page is fed.
TEST(EngineFeed, VllmTensorsTheKernelCannotTakeAreRefused) {
  const CaseSpec c = vllm_case({{1, 40}, {1, 17}});
  const Plan p = make_plan(c);
  const EngineView base = engine_metadata(Engine::kVllmFlashInfer, c, p);
  auto refusal = [&](const std::string& name, int i, int64_t value, const char* dtype = nullptr) {
    EngineView v = base;
    EngineTensor* t = find_mut(v, name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return std::string();
    if (dtype) t->dtype = dtype;
    if (i >= 0) t->values[i] = value;
    return fi::vllm_feed_from_view(c, p.pages, v).refusal;
  };
  EXPECT_NE(refusal("paged_kv_indices", 1, 999).find("paged_kv_indices[1] = 999 (entry 0) is not a page of the pool ("),
            std::string::npos);
  EXPECT_NE(refusal("seq_lens", 1, 30).find("seq_lens[1] = 30 with 1 queries at position 16 of /requests/1/kv_len 17"),
            std::string::npos);
  EXPECT_NE(refusal("decode_wrapper.plan.last_page_len", 0, 17).find("decode_wrapper.plan.last_page_len[0] = 17"),
            std::string::npos);
  EXPECT_NE(refusal("paged_kv_indptr", -1, 0, "int64").find("paged_kv_indptr is int64: FlashInfer's plan and kernels read int32"),
            std::string::npos);
  EXPECT_NE(refusal("query_start_loc", 1, 2).find("query_start_loc[0..1] gives entry 0 2 queries, but /requests/0/q_len 1"),
            std::string::npos);
  EXPECT_EQ(refusal("paged_kv_indices", 4, 1), "");  // another request's page: legal, fed, the diff shows it
  EngineView v = base;
  v.refusal = "/attention/causal: the rule";
  EXPECT_EQ(fi::vllm_feed_from_view(c, p.pages, v).refusal, "/engine vllm-flashinfer: /attention/causal: the rule");
}

// Without /engine vllm-flashinfer the units are attnscope's own and nothing is said.
TEST(EngineFeed, WithoutTheEngineTheUnitsAreUntouched) {
  CaseSpec c = vllm_case({{1, 40}});
  for (const char* e : {"", "sglang-fa"}) {
    c.engine = e;
    const Plan p = make_plan(c);
    fi::FiUnits u = fi::fi_units(c, p);
    const fi::FiUnits own = u;
    std::string fed = "x";
    EXPECT_EQ(fi::feed_units(c, p, fi::FiWrapper::kDecode, &u, &fed), "");
    EXPECT_EQ(fed, "");
    EXPECT_EQ(u.kv_indices, own.kv_indices);
  }
}

// Seeded random batches over shuffled pools: a batch of decodes feeds the decode wrapper, one of
// extends and prefills the prefill wrapper, each with every query and attnscope's own pages (the
// engine's tensors are derived from the same page table); a local batch feeds vLLM's virtual batches.
TEST(EngineFeed, VllmRandomBatchesFeedTheirWrapper) {
  std::mt19937_64 g(77);
  auto pick = [&g](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  int fed_local = 0;
  for (int i = 0; i < 60; ++i) {
    const bool decode = i % 2 == 0, local = i % 3 == 0;
    std::vector<RequestSpec> reqs;
    for (int r = pick(1, 9); r > 0; --r) {
      const int kv = pick(1, 2500);
      reqs.push_back({decode ? 1 : (pick(0, 2) == 0 ? kv : std::min(kv, pick(2, 300))), kv});
    }
    CaseSpec c = vllm_case(reqs, 1 << pick(2, 6));
    c.kv_cache.allocation = PageAlloc::kShuffled;
    c.kv_cache.allocation_seed = static_cast<uint64_t>(i);
    if (local) c.attention.local_chunk = c.kv_cache.page_size * 4 * pick(1, 8);
    validate_case(c);
    const Plan p = make_plan(c);
    const bool to_decode = c.requests[0].q_len == 1 && c.requests.back().q_len == 1;
    fi::FiUnits u = fi::fi_units(c, p);
    const fi::FiUnits own = u;
    std::string fed;
    const std::string why = fi::feed_units(c, p, to_decode ? fi::FiWrapper::kDecode : fi::FiWrapper::kPrefill, &u, &fed);
    if (local && why.find("split_decodes_and_prefills") != std::string::npos) continue;  // a one-query first virtual batch
    ASSERT_EQ(why, "") << i;
    EXPECT_EQ(u.total_q, c.total_q()) << i;
    if (!local) {
      EXPECT_EQ(u.kv_indices, own.kv_indices) << i;
      EXPECT_EQ(u.kv_last_page_len, own.kv_last_page_len) << i;
      EXPECT_NE(fed.find("equal to attnscope's own units"), std::string::npos) << fed;
    } else {
      ++fed_local;
    }
  }
  EXPECT_GT(fed_local, 5);
}

// /engine is the one engine field: /cuda_graph/engine, when left out, derives from it (sglang-fa ->
// sglang, vllm-flashinfer -> vllm, no engine -> sglang); both given and disagreeing is refused.
TEST(EngineFeed, CudaGraphEngineDerivesFromEngine) {
  const std::string base = R"({"schema": "attnscope/case@1", "requests": [{"q_len": 1, "kv_len": 9}],
    "heads": {"qo": 4, "kv": 1}, "head_dim": {"qk": 128, "vo": 128}, "dtype": "bf16",
    "split": {"cuda_graph": true}, "backends": ["cpu.reference"], )";
  auto graph_engine = [&](const std::string& tail) { return parse_case_text(base + tail).spec.cuda_graph->engine; };
  EXPECT_EQ(graph_engine(R"("engine": "vllm-flashinfer", "cuda_graph": {"bucket": 4}})"), GraphEngine::kVllm);
  EXPECT_EQ(graph_engine(R"("engine": "sglang-fa", "cuda_graph": {"bucket": 4}})"), GraphEngine::kSglang);
  EXPECT_EQ(graph_engine(R"("cuda_graph": {"bucket": 4}})"), GraphEngine::kSglang);
  EXPECT_EQ(graph_engine(R"("cuda_graph": {"bucket": 4, "engine": "vllm"}})"), GraphEngine::kVllm);
  EXPECT_EQ(graph_engine(R"("engine": "vllm-flashinfer", "cuda_graph": {"bucket": 4, "engine": "vllm"}})"), GraphEngine::kVllm);
  EXPECT_EQ(graph_engine_for("vllm-flashinfer"), GraphEngine::kVllm);
  EXPECT_EQ(graph_engine_for("sglang-fa"), GraphEngine::kSglang);
  EXPECT_EQ(graph_engine_for(""), GraphEngine::kSglang);
  // the derived padding round-trips (written out explicitly, agreeing with /engine)
  const CaseFile f = parse_case_text(base + R"("engine": "vllm-flashinfer", "cuda_graph": {"bucket": 4}})");
  EXPECT_EQ(parse_case_text(case_to_text(f.spec)).spec, f.spec);
  for (const char* tail : {R"("engine": "sglang-fa", "cuda_graph": {"bucket": 4, "engine": "vllm"}})",
                           R"("engine": "vllm-flashinfer", "cuda_graph": {"bucket": 4, "engine": "sglang"}})"}) {
    try {
      parse_case_text(base + tail);
      ADD_FAILURE() << "accepted " << tail;
    } catch (const CaseError& e) {
      EXPECT_EQ(e.path(), "/cuda_graph/engine") << tail;
      EXPECT_NE(std::string(e.what()).find("disagrees with /engine"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("/engine is the one source of the padding"), std::string::npos) << e.what();
    }
  }
  // a case built in code is held to the same rule
  CaseSpec c = parse_case_text(base + R"("engine": "vllm-flashinfer", "cuda_graph": {"bucket": 4}})").spec;
  c.cuda_graph->engine = GraphEngine::kSglang;
  EXPECT_THROW(validate_case(c), CaseError);
}
