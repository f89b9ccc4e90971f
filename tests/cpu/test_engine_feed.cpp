// /engine: the real-library backends fed from the engine's metadata tensors (engine_metadata.h)
// instead of attnscope's own. What flash_attn.kvcache receives under /engine sglang-fa: SGLang's
// cache_seqlens_int32 and page_table (or local_attn_metadata's virtual batches), and the refusal,
// naming the tensor and the rule, where what SGLang builds is not what flash_attn_with_kvcache takes.
#include <gtest/gtest.h>

#include "attnscope/case_spec.h"
#include "attnscope/engine_metadata.h"
#include "attnscope/plan.h"
#include "case_json.h"
#include "fa_conventions.h"

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
