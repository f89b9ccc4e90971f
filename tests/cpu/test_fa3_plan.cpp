// attnscope's model of FlashAttention-3's split decision for python.fa3's varlen call (fa3_plan.h), on
// cases worked by hand from Dao-AILab/flash-attention at 0251105a: hopper/flash_api.cpp (mha_fwd drops
// causal for one query row; get_num_splits counts the batch as 1 for varlen; get_pack_gqa),
// hopper/heuristics.h (num_splits_heuristic), hopper/tile_size.h (tile_size_fwd_sm90) and
// hopper/flash_prepare_scheduler.cu (prepare_varlen_num_blocks: per-request splits). FA3's own choice is
// read back on the GPU (PythonGpu.Fa3*); these pin the model without one.
#include <gtest/gtest.h>

#include "attnscope/fa3_plan.h"
#include "attnscope/library_plan.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "case_builders.h"
#include "fa3_case_gen.h"

using namespace attnscope;

namespace {

// bf16 requests (q_len, kv_len) on pages of 16, heads h / hk, head dim d.
CaseSpec build_case(const attnscope::testing::QKv& q_kv, int h, int hk, int d) {
  CaseSpec c;
  c.dtype = DType::kBf16;
  c.num_qo_heads = h;
  c.num_kv_heads = hk;
  c.head_dim_qk = c.head_dim_vo = d;
  c.kv_cache.page_size = 16;
  attnscope::testing::add_requests(c, q_kv);
  return c;
}

Fa3PlanInputs inputs(std::vector<int> q, std::vector<int> kv, int h, int hk, int d, bool causal, int elem = 2) {
  Fa3PlanInputs in;
  in.q_lens = std::move(q);
  in.kv_lens = std::move(kv);
  in.num_heads = h;
  in.num_heads_k = hk;
  in.head_dim = in.head_dim_v = d;
  in.causal = causal;
  in.element_bytes = elem;
  in.num_sms = 132;
  return in;
}

}  // namespace

// GQA decode, 4 requests: one query row drops causal (mha_fwd), so the non-causal hdim-128 tile 128 x 176;
// m_blocks ceil(1 x 4 / 128) = 1 over 8 KV heads = 8 < 0.8 x 132; n_blocks ceil(3000 / 176) = 18; the
// efficiencies 8s / 132 peak at s = 16 (0.970), and 14 is the first >= 0.85 x 0.970 (112 / 132 = 0.848; 13
// gives 0.788). Splits force pack_gqa. The scheduler: n_blocks 6, 12, 3, 18 (39 blocks), x 8 heads x 1.1 /
// 132 = 2.6 -> 3 per SM, so ceil(n / 3) = 2, 4, 1, 6.
TEST(Fa3Plan, GqaDecodeSplitsByWaveEfficiencyAndPerRequestBlocks) {
  const Fa3PlanModel m = model_fa3_plan(inputs({1, 1, 1, 1}, {1000, 2000, 500, 3000}, 32, 8, 128, true));
  EXPECT_FALSE(m.is_causal);
  EXPECT_EQ(m.block_m, 128);
  EXPECT_EQ(m.block_n, 176);
  EXPECT_EQ(m.num_m_blocks, 1);
  EXPECT_EQ(m.num_n_blocks, 18);
  EXPECT_EQ(m.total_mblocks, 8);
  EXPECT_EQ(m.num_splits, 14);
  EXPECT_TRUE(m.pack_gqa);
  EXPECT_EQ(m.request_n_blocks, (std::vector<int>{6, 12, 3, 18}));
  EXPECT_EQ(m.total_blocks, 39);
  EXPECT_EQ(m.blocks_per_sm, 3);
  EXPECT_EQ(m.request_splits, (std::vector<int>{2, 4, 1, 6}));
  EXPECT_EQ(m.request_m_blocks, (std::vector<int>{1, 1, 1, 1}));
}

// Causal prefill, 2 x 2048, 16 heads (no GQA): tile 128 x 128 (causal); 16 m-blocks x 16 heads = 256 >=
// 105.6 and one KV head is 2048 x 256 x 2 B = 1 MiB, under the 50 MB L2 budget: no split, no pack_gqa.
TEST(Fa3Plan, CausalPrefillFillsTheSmsWithoutSplitting) {
  const Fa3PlanModel m = model_fa3_plan(inputs({2048, 2048}, {2048, 2048}, 16, 16, 128, true));
  EXPECT_TRUE(m.is_causal);
  EXPECT_EQ(m.block_n, 128);
  EXPECT_EQ(m.total_mblocks, 256);
  EXPECT_EQ(m.num_splits, 1);
  EXPECT_NE(m.split_rule.find("fill"), std::string::npos) << m.split_rule;
  EXPECT_FALSE(m.pack_gqa);
  EXPECT_EQ(m.request_splits, (std::vector<int>{1, 1}));
  EXPECT_EQ(m.request_m_blocks, (std::vector<int>{16, 16}));
}

// FP8 e4m3 MQA decode of 10000 keys: tile 128 x 224; n_blocks 45, total_mblocks 1; s / 132 peaks at 45
// (0.341), and 39 is the first >= 0.85 x that (0.2955 vs 0.2898; 38 gives 0.2879). One request, 45 blocks
// x 1 head x 1.1 / 132 -> 1 per SM: its own split count is min(45, 39) = 39.
TEST(Fa3Plan, Fp8MqaDecodeTakesTheE4m3Tile) {
  const Fa3PlanModel m = model_fa3_plan(inputs({1}, {10000}, 8, 1, 128, false, 1));
  EXPECT_EQ(m.block_n, 224);
  EXPECT_EQ(m.num_n_blocks, 45);
  EXPECT_EQ(m.num_splits, 39);
  EXPECT_EQ(m.blocks_per_sm, 1);
  EXPECT_EQ(m.request_splits, (std::vector<int>{39}));
}

// One KV head over 50 MB with m-blocks >= 2 x SMs, non-causal: a split per 50 MB (110000 x 256 x 2 B =
// 56.3 MB -> 2), though the SMs are full. The scheduler then gives the request ceil(625 / 1386) = 1.
TEST(Fa3Plan, AKvHeadOverTheL2BudgetSplitsAFullGrid) {
  const Fa3PlanModel m = model_fa3_plan(inputs({34000}, {110000}, 1, 1, 128, false));
  EXPECT_EQ(m.num_m_blocks, 266);
  EXPECT_EQ(m.num_splits, 2);
  EXPECT_NE(m.split_rule.find("50 MB"), std::string::npos) << m.split_rule;
  EXPECT_TRUE(m.pack_gqa);  // splits force it
  EXPECT_EQ(m.request_n_blocks, (std::vector<int>{625}));
  EXPECT_EQ(m.blocks_per_sm, 1386);
  EXPECT_EQ(m.request_splits, (std::vector<int>{1}));
}

// hdim 64 decode of 500 keys: tile 192 x 192, 3 n-blocks: heuristics.h never splits 4 or fewer.
TEST(Fa3Plan, FourNBlocksOrFewerNeverSplit) {
  const Fa3PlanModel m = model_fa3_plan(inputs({1}, {500}, 8, 8, 64, false));
  EXPECT_EQ(m.block_m, 192);
  EXPECT_EQ(m.block_n, 192);
  EXPECT_EQ(m.num_n_blocks, 3);
  EXPECT_EQ(m.num_splits, 1);
  EXPECT_FALSE(m.pack_gqa);
}

// The planner pins num_splits as FA2's adapter does: off -> 1, fixed -> ceil(max kv / chunk keys).
TEST(Fa3Plan, ThePlannerPinsNumSplits) {
  CaseSpec c = build_case({{1, 3000}, {1, 1000}}, 8, 2, 128);
  c.backends = {"python.fa3"};
  EXPECT_EQ(fa3_plan_inputs(c, 132).num_splits_arg, 0);
  c.split.planner = Planner::kOff;
  EXPECT_EQ(fa3_plan_inputs(c, 132).num_splits_arg, 1);
  EXPECT_EQ(model_fa3_plan(fa3_plan_inputs(c, 132)).num_splits, 1);
  c.split.planner = Planner::kFixed;
  c.split.fixed_split_size = 32;  // pages of 16: 512 keys
  const Fa3PlanInputs in = fa3_plan_inputs(c, 132);
  EXPECT_EQ(in.num_splits_arg, 6) << in.num_splits_from;  // ceil(3000 / 512)
  const Fa3PlanModel m = model_fa3_plan(in);
  EXPECT_EQ(m.num_splits, 6);
  EXPECT_EQ(m.split_rule, "as passed");
}

// FA3's own read-back beside the model: equal fields agree; a differing one is named and marked.
TEST(Fa3Plan, OwnPlanComparedFieldByField) {
  const Fa3PlanModel m = model_fa3_plan(inputs({1, 1, 1, 1}, {1000, 2000, 500, 3000}, 32, 8, 128, true));
  Fa3OwnPlan own;
  own.available = true;
  own.device = "NVIDIA H200, 132 SMs";
  own.num_sms = 132;
  own.num_splits = 14;
  own.request_splits = {2, 4, 1, 6};
  own.request_m_blocks = {1, 1, 1, 1};
  EXPECT_TRUE(compare_fa3_plan(m, own).empty());
  EXPECT_EQ(fa3_plan_text(m, &own).find("<- differs"), std::string::npos) << fa3_plan_text(m, &own);
  own.request_splits = {2, 4, 1, 5};
  const auto d = compare_fa3_plan(m, own);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].field, "request_splits");
  const std::string text = fa3_plan_text(m, &own);
  EXPECT_NE(text.find("request_splits"), std::string::npos);
  EXPECT_NE(text.find("<- differs"), std::string::npos) << text;
  own.available = false;
  EXPECT_TRUE(compare_fa3_plan(m, own).empty());
}

// `plan` of a case that runs python.fa3 carries the model (the python family's library_plan hook).
TEST(Fa3Plan, ThePlanCarriesTheModelForACaseThatRunsIt) {
  CaseSpec c = build_case({{1, 3000}, {1, 1000}}, 8, 2, 128);
  c.backends = {"cpu.reference"};
  EXPECT_FALSE(plan_case(c).library.fa3.asked);
  c.backends = {"cpu.reference", "python.fa3"};
  const Plan p = plan_case(c);
  ASSERT_TRUE(p.library.fa3.asked);
  EXPECT_EQ(p.library.fa3.model.in.q_lens, (std::vector<int>{1, 1}));
  EXPECT_EQ(p.library.fa3.model.num_splits, model_fa3_plan(fa3_plan_inputs(c, c.split.num_sms)).num_splits);
}

// The GPU test's random cases (fa3_case_gen.h) are valid cases python.fa3 takes, and the model plans them.
TEST(Fa3Plan, TheGpuTestsRandomCasesAreTakenAndPlanned) {
  for (int seed = 1; seed <= 24; ++seed) {
    const CaseSpec c = attnscope::testing::fa3_random_case(seed);
    SCOPED_TRACE(c.name);
    ASSERT_NO_THROW(validate_case(c));
    EXPECT_EQ(refusal("python.fa3", c), "");
    const Fa3PlanModel m = model_fa3_plan(fa3_plan_inputs(c, 132));
    EXPECT_GE(m.num_splits, 1);
    EXPECT_EQ(m.request_splits.size(), c.requests.size());
    for (int s : m.request_splits) EXPECT_TRUE(s >= 1 && s <= m.num_splits);
  }
}
