// The GUI's permission for python: backends (app/gui/python_consent.h): the run is held until the user
// answers, asked once per file; allowed files reach the registry, refused ones are not asked again.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "attnscope/registry.h"
#include "case_json.h"
#include "panels/mask_panel.h"
#include "python_consent.h"

using namespace attnscope;
using attnscope::gui::build_expr_summary;
using attnscope::gui::build_flex_block_items;
using attnscope::gui::Cell;
using attnscope::gui::ExprSummary;
using attnscope::gui::FlexBlockItems;

TEST(PythonConsent, HoldsTheRunUntilAnsweredOncePerFile) {
  allow_all_user_code(false);
  const std::vector<std::string> ids = {"cpu.reference", "python:/tmp/consent_a.py:f", "python:/tmp/consent_a.py:g",
                                        "python:/tmp/consent_b.py:f"};
  gui::PythonConsent c;
  EXPECT_FALSE(c.holds_run({"cpu.reference"}));
  EXPECT_TRUE(c.holds_run(ids));
  EXPECT_EQ(c.asking(), (std::vector<std::string>{"/tmp/consent_a.py", "/tmp/consent_b.py"}));
  EXPECT_FALSE(user_code_allowed("python:/tmp/consent_a.py:f"));
  c.answer(true);
  EXPECT_TRUE(user_code_allowed("python:/tmp/consent_a.py:g"));
  EXPECT_TRUE(user_code_allowed("python:/tmp/consent_b.py:f"));
  EXPECT_FALSE(c.holds_run(ids));
  EXPECT_TRUE(c.holds_run({"python:/tmp/consent_c.py:f"}));
  c.answer(false);  // refused: not asked again, and the backend stays refused
  EXPECT_FALSE(c.holds_run({"python:/tmp/consent_c.py:f"}));
  EXPECT_FALSE(user_code_allowed("python:/tmp/consent_c.py:f"));
}

TEST(PythonConsent, HeadlessScreenshotsNeverAsk) {
  allow_all_user_code(false);
  gui::PythonConsent c;
  EXPECT_FALSE(c.holds_run({"python:/tmp/consent_d.py:f"}, true));
  EXPECT_TRUE(c.asking().empty());
  EXPECT_FALSE(user_code_allowed("python:/tmp/consent_d.py:f"));
}

// The Mask tab's FlexAttention BlockMask (python.flex_attention's Result::block_mask) beside
// attnscope's block map: the grid, its counts, and where attnscope's mask classifies the same blocks
// otherwise.
namespace {

std::shared_ptr<Session> causal_256(const std::vector<std::string>& backends) {
  nlohmann::json j = {{"schema", "attnscope/case@1"},
                      {"name", "flex-blocks"},
                      {"requests", {{{"q_len", 256}, {"kv_len", 256}}}},
                      {"heads", {{"qo", 2}, {"kv", 1}}},
                      {"head_dim", {{"qk", 16}, {"vo", 16}}},
                      {"dtype", "fp32"},
                      {"kv_cache", {{"page_size", 16}}},
                      {"attention", {{"causal", true}}},
                      {"backends", backends}};
  return run_session(parse_case(j));
}

// What FlexAttention's create_block_mask gives for a causal 256 x 256 mask with 128 x 128 blocks:
// query block 0 sees key block 0 partially; query block 1 sees key block 0 fully, key block 1 partially.
std::string causal_block_mask(bool tampered) {
  nlohmann::json full = tampered ? nlohmann::json::array({nlohmann::json::array(), nlohmann::json::array()})
                                 : nlohmann::json::array({nlohmann::json::array(), {0}});
  nlohmann::json partial = tampered ? nlohmann::json::array({{0}, {0, 1}}) : nlohmann::json::array({{0}, {1}});
  return nlohmann::json{{"block_size", {128, 128}}, {"seq_lengths", {256, 256}}, {"q_blocks", 2},   {"kv_blocks", 2},
                        {"kv_indices", partial},    {"full_kv_indices", full},   {"clipped", false}}
      .dump();
}

}  // namespace

TEST(GuiItems, MaskTabDrawsFlexAttentionsBlockMaskWhenAResultCarriesOne) {
  auto s = causal_256({"cpu.reference"});
  const ExprSummary ours = build_expr_summary(*s, 0);
  EXPECT_FALSE(build_flex_block_items(*s, 0, ours).present) << "no result carries a BlockMask";
  Session with = *s;
  Result r;
  r.backend = "python.flex_attention";
  r.block_mask = causal_block_mask(false);
  with.results.push_back(r);
  const FlexBlockItems f = build_flex_block_items(with, 0, ours);
  ASSERT_TRUE(f.present) << f.error;
  EXPECT_EQ(f.q_blocks, 2);
  EXPECT_EQ(f.kv_blocks, 2);
  EXPECT_EQ(f.cells, (std::vector<Cell>{Cell::kSome, Cell::kNone, Cell::kAll, Cell::kSome}));
  EXPECT_EQ(f.full, 1);
  EXPECT_EQ(f.partial, 2);
  EXPECT_EQ(f.empty, 1);
  EXPECT_EQ(f.differ, 0);
  EXPECT_EQ(f.req_q1, 256);
  ASSERT_EQ(f.lines.size(), 3u);
  EXPECT_NE(f.lines[0].find("1 full, 2 partial, 1 empty blocks of 128 x 128, sparsity 25.0%"), std::string::npos) << f.lines[0];
  EXPECT_NE(f.lines[1].find("the block sizes differ"), std::string::npos) << f.lines[1];
  EXPECT_NE(f.lines[2].find("the same full / partial / empty class for all 4 blocks"), std::string::npos) << f.lines[2];

  Session off = *s;  // a BlockMask that calls a full block partial
  r.block_mask = causal_block_mask(true);
  off.results.push_back(r);
  const FlexBlockItems g = build_flex_block_items(off, 0, ours);
  ASSERT_TRUE(g.present);
  EXPECT_EQ(g.differ, 1);
  EXPECT_EQ(g.first_differ_q, 1);
  EXPECT_EQ(g.first_differ_kv, 0);
  EXPECT_NE(g.lines.back().find("FlexAttention says partial, attnscope's mask full"), std::string::npos) << g.lines.back();

  Session bad = *s;  // lengths of another batch: said, not drawn
  r.block_mask = nlohmann::json{{"block_size", {128, 128}},
                                {"seq_lengths", {100, 100}},
                                {"kv_blocks", 1},
                                {"kv_indices", {{0}}},
                                {"full_kv_indices", nlohmann::json::array()}}
                     .dump();
  bad.results.push_back(r);
  const FlexBlockItems h = build_flex_block_items(bad, 0, ours);
  EXPECT_FALSE(h.present);
  EXPECT_NE(h.error.find("not this case's packed batch"), std::string::npos) << h.error;
}

// With PyTorch in the worker's Python (ATTNSCOPE_PYTHON; CPU is enough): python.flex_attention's own
// BlockMask of a mask_mod case agrees with attnscope's mask on every block.
TEST(GuiItems, FlexAttentionsOwnBlockMaskAgreesWithAttnscopesMask) {
  const char* py = std::getenv("ATTNSCOPE_PYTHON");
  const std::string interp = py && *py ? py : "python3";
  if (std::system((interp + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << interp << " has no PyTorch (set ATTNSCOPE_PYTHON)";
  nlohmann::json j = {{"schema", "attnscope/case@1"},
                      {"name", "flex-dilated"},
                      {"requests", {{{"q_len", 200}, {"kv_len", 300}}, {{"q_len", 90}, {"kv_len", 90}}}},
                      {"heads", {{"qo", 2}, {"kv", 1}}},
                      {"head_dim", {{"qk", 16}, {"vo", 16}}},
                      {"dtype", "fp32"},
                      {"kv_cache", {{"page_size", 16}}},
                      {"attention", {{"causal", true}, {"mask_mod", "q_idx - kv_idx < 150 && (q_idx - kv_idx) % 3 != 1"}}},
                      {"backends", {"cpu.reference", "python.flex_attention"}}};
  auto s = run_session(parse_case(j));
  const Result* r = s->result("python.flex_attention");
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->ok()) << r->message;
  const FlexBlockItems f = build_flex_block_items(*s, 1, build_expr_summary(*s, 1));
  ASSERT_TRUE(f.present) << f.error;
  EXPECT_EQ(f.q_blocks, 3);   // 290 packed queries
  EXPECT_EQ(f.kv_blocks, 4);  // 390 packed keys
  EXPECT_GT(f.partial, 0);
  EXPECT_EQ(f.differ, 0) << f.lines.back();
  EXPECT_EQ(f.req_q0, 200);
  EXPECT_EQ(f.req_k0, 300);
}
