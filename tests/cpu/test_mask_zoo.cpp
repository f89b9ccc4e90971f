// The mask zoo (examples/zoo/*.json, issue 12): every example runs on the CPU backends within the
// 2x rule; each one with a built-in twin agrees with it bit for bit; the plan's mask bits equal the
// built-in mask AND the expression on every pair; the backends that cannot run an expression say so.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "attnscope/block_map.h"
#include "attnscope/compare.h"
#include "attnscope/mask_bits.h"
#include "attnscope/registry.h"
#include "case_json.h"

namespace fs = std::filesystem;
using namespace attnscope;

namespace {

std::string src(const std::string& rel) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/" + rel; }

CaseSpec zoo(const std::string& name) { return read_case_file(src("examples/zoo/" + name + ".json")).spec; }

std::vector<std::string> zoo_names() {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(src("examples/zoo")))
    if (e.path().extension() == ".json") v.push_back(e.path().stem().string());
  std::sort(v.begin(), v.end());
  return v;
}

Result run_id(const std::string& id, const CaseSpec& c, const Plan& p, const Workload& w) {
  auto b = make_backend(id);
  RunOptions opt;
  return run_backend(*b, c, p, w, opt);
}

// Bit-for-bit equality of O and LSE (NaN patterns included).
void expect_same_bits(const Result& a, const Result& b, const std::string& what) {
  ASSERT_TRUE(a.ok()) << a.message;
  ASSERT_TRUE(b.ok()) << b.message;
  ASSERT_EQ(a.o.size(), b.o.size());
  int64_t diff = 0;
  for (size_t i = 0; i < a.o.size(); ++i) diff += f32_bits(a.o[i]) != f32_bits(b.o[i]);
  for (size_t i = 0; i < a.lse.size(); ++i) diff += f32_bits(a.lse[i]) != f32_bits(b.lse[i]);
  EXPECT_EQ(diff, 0) << what << ": elements whose bits differ";
}

}  // namespace

TEST(MaskZoo, EveryExampleRunsOnTheCpuBackendsWithinTheTwiceRule) {
  const auto names = zoo_names();
  ASSERT_GE(names.size(), 10u) << "causal, windows, prefix-LM, documents, NATTEN, tree, block-sparse, ALiBi, soft-cap";
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    const CaseSpec c = zoo(n);
    ASSERT_TRUE(c.attention.mask_mod || c.attention.score_mod) << "a zoo example uses an expression";
    const Plan p = make_plan(c);
    const Workload w = make_workload(c, p.pages);
    const Result ref = run_id("cpu.reference", c, p, w), lowp = run_id("cpu.lowp", c, p, w), tiled = run_id("cpu.tiled", c, p, w);
    ASSERT_TRUE(ref.ok() && lowp.ok() && tiled.ok()) << ref.message << lowp.message << tiled.message;
    ComparisonSpec k;
    k.backend = "cpu.tiled";
    k.baseline = "cpu.reference";
    k.rule = CompareRule::kTwiceLowp;
    k.atol = 1e-5;  // the rounding floor of the 2x rule, as the examples state it
    const DiffReport d = compare_results(c, tiled, ref, k, &lowp);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
    EXPECT_EQ(d.o.nan_a, 0);
    // the mask leaves something to attend to, and (for masks) really masks
    const int64_t pairs = allowed_pairs(c, p);
    EXPECT_GT(pairs, 0);
    if (c.attention.mask_mod) {
      int64_t all = 0;
      for (const auto& r : c.requests) all += static_cast<int64_t>(r.q_len) * r.kv_len;
      EXPECT_LT(pairs, all);
    }
  }
}

TEST(MaskZoo, TheBitsAreTheBuiltInMaskAndTheExpressionOnEveryPair) {
  for (const auto& n : zoo_names()) {
    const CaseSpec c = zoo(n);
    if (!c.attention.mask_mod) continue;
    SCOPED_TRACE(n);
    const Plan p = make_plan(c);
    const Expr e = Expr::parse(*c.attention.mask_mod, Expr::Kind::kMask);
    int64_t checked = 0, wrong = 0;
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      const RowMask builtin = row_mask(c, r);
      const RowMask& m = p.masks[r];
      for (int q = 0; q < c.requests[r].q_len; ++q) {
        const int qa = q_abs_of(m, q);
        for (int k = 0; k < c.requests[r].kv_len; ++k) {
          const bool want = allowed(builtin, qa, k) && expr_true(e.eval(expr_env(c, r, 0, qa, k)));
          wrong += allowed(m, qa, k) != want;
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, 0);
    EXPECT_EQ(wrong, 0) << "of " << checked << " pairs";
  }
}

bool same_items(const SplitPlan& a, const SplitPlan& b) {
  if (a.items.size() != b.items.size() || a.cta_tile_q != b.cta_tile_q || a.kv_warp_split != b.kv_warp_split) return false;
  for (size_t i = 0; i < a.items.size(); ++i) {
    const WorkItem &x = a.items[i], &y = b.items[i];
    if (x.unit != y.unit || x.row_begin != y.row_begin || x.row_end != y.row_end || x.kv_begin != y.kv_begin ||
        x.kv_end != y.kv_end)
      return false;
  }
  return true;
}

// The zoo examples that mean a built-in mask or logit against that built-in twin. Masks: the same
// allowed pairs and block map, and the same bits from cpu.reference and cpu.lowp; cpu.tiled follows
// the plan, and agrees bit for bit where the plans are equal. They are not for the sliding window:
// the built-in window lets the planner start each tile's chunks at its window (window_chunks), while
// a mask_mod is planned over all keys as FlashInfer plans a custom mask (the kernel skips its empty
// tiles instead), so the tiles' order of accumulation differs; there cpu.tiled is held to the 2x
// rule (the test above). Score mods: cpu.reference evaluates the expression in doubles exactly as its
// built-in code, so its bits agree; cpu.tiled / cpu.lowp round the expression's double result to
// float / the dtype once where the built-in code rounds each step (2x rule above).
TEST(MaskZoo, ExpressibleMasksAgreeBitForBitWithTheirBuiltInTwin) {
  struct Twin {
    const char* name;
    std::function<void(CaseSpec&)> builtin;
    bool score;
    bool same_plan;
  };
  const Twin twins[] = {
      {"causal", [](CaseSpec& c) { c.attention.causal = true; }, false, true},
      {"sliding-window",
       [](CaseSpec& c) {
         c.attention.causal = true;
         c.attention.window = 128;
       },
       false, false},
      {"prefix-lm",
       [](CaseSpec& c) {
         c.attention.causal = true;
         c.attention.prefix_lm = true;
       },
       false, true},
      {"documents", [](CaseSpec& c) { c.attention.causal = true; }, false, true},
      {"alibi", [](CaseSpec& c) { c.attention.alibi = true; }, true, true},
      {"softcap", [](CaseSpec& c) { c.attention.soft_cap = 30.0; }, true, true},
  };
  for (const auto& t : twins) {
    SCOPED_TRACE(t.name);
    const CaseSpec expr = zoo(t.name);
    CaseSpec twin = expr;
    twin.attention.mask_mod.reset();
    twin.attention.score_mod.reset();
    t.builtin(twin);
    const Plan pe = make_plan(expr), pt = make_plan(twin);
    const Workload we = make_workload(expr, pe.pages), wt = make_workload(twin, pt.pages);
    ASSERT_EQ(we.q, wt.q);
    if (!t.score) {
      ASSERT_EQ(pe.blocks.units.size(), pt.blocks.units.size());
      for (size_t u = 0; u < pe.blocks.units.size(); ++u)
        EXPECT_EQ(pe.blocks.units[u].cls, pt.blocks.units[u].cls) << "unit " << u;
      EXPECT_EQ(allowed_pairs(expr, pe), allowed_pairs(twin, pt));
    }
    EXPECT_EQ(same_items(pe.split, pt.split), t.same_plan) << "the work items are (not) the twin's";
    for (const char* id : {"cpu.reference", "cpu.tiled", "cpu.lowp"}) {
      if (t.score && std::string(id) != "cpu.reference") continue;
      if (!t.same_plan && std::string(id) == "cpu.tiled") continue;
      expect_same_bits(run_id(id, expr, pe, we), run_id(id, twin, pt, wt), id);
    }
  }
}

// What run_backend does with a backend's declared support, whatever this build compiled: a backend
// of each kind, as the real ones declare themselves in their family's descriptor (flashinfer.prefill:
// bits and lowered score mods; flashinfer.decode: lowered score mods only).
class Declares final : public Backend {
 public:
  Declares(std::string id, Expressions mask, Expressions score) : id_(std::move(id)) {
    info.id = id_;
    info.mask_mod = mask;
    info.score_mod = score;
  }
  std::string id() const override { return id_; }
  std::string describe() const override { return "test"; }
  std::string check(const CaseSpec&) const override { return ""; }
  BackendInfo info;
  Result run(const CaseSpec& c, const Plan&, const Workload&, const RunOptions&) override {
    Result r;
    r.backend = id_;
    ran_soft_cap = c.attention.soft_cap;
    return r;
  }
  std::optional<double> ran_soft_cap;

 private:
  std::string id_;
};

TEST(MaskZoo, BackendsThatCannotRunAnExpressionSayWhyAndLoweredFormsRunAsParameters) {
  using E = Expressions;
  const CaseSpec dilated = zoo("dilated-window");
  CaseSpec out;
  Declares dec("decode-like", E::kNone, E::kLowered), prefill_like("prefill-like", E::kFull, E::kLowered);
  const std::string why = expressions_for(dec.info, dilated, &out);
  EXPECT_NE(why.find("runs only the built-in masks"), std::string::npos) << why;
  EXPECT_EQ(expressions_for(prefill_like.info, dilated, &out), "");
  Declares* flash = &prefill_like;

  const CaseSpec cap = zoo("softcap");
  ASSERT_EQ(expressions_for(flash->info, cap, &out), "");
  EXPECT_FALSE(out.attention.score_mod.has_value());
  ASSERT_TRUE(out.attention.soft_cap.has_value());
  EXPECT_EQ(*out.attention.soft_cap, 30.0);
  const CaseSpec ali = zoo("alibi");
  ASSERT_EQ(expressions_for(flash->info, ali, &out), "");
  EXPECT_TRUE(out.attention.alibi);
  EXPECT_FALSE(out.attention.soft_cap.has_value());

  CaseSpec odd = cap;
  odd.attention.score_mod = "score * 0.5";
  const std::string no = expressions_for(flash->info, odd, &out);
  EXPECT_NE(no.find("only of the forms"), std::string::npos) << no;
  // a backend that evaluates expressions takes any
  EXPECT_EQ(expressions_for(*backend_info("cpu.reference"), odd, &out), "");
  EXPECT_EQ(out.attention.score_mod, odd.attention.score_mod);
  // and the result says it
  const Plan p = make_plan(odd);
  const Workload w = make_workload(odd, p.pages);
  const Result r = run_backend(dec, odd, p, w, RunOptions{}, &dec.info);
  EXPECT_EQ(r.status, Status::kUnsupported);
  EXPECT_NE(r.message.find("only of the forms"), std::string::npos) << r.message;
  // run_backend hands the lowered case to the backend
  const Plan pc = make_plan(cap);
  const Result rc = run_backend(prefill_like, cap, pc, w, RunOptions{}, &prefill_like.info);
  EXPECT_TRUE(rc.ok()) << rc.message;
  ASSERT_TRUE(prefill_like.ran_soft_cap.has_value());
  EXPECT_EQ(*prefill_like.ran_soft_cap, 30.0);
  // the real backends' descriptors declare what their kernels do, in any build; where a family is
  // not compiled, run_backend reports that instead (the more basic reason)
  for (const char* id : {"cuda.flash", "flashinfer.prefill", "flashinfer.decode", "cudnn.sdpa", "cpu.tiled"}) {
    const std::string w2 = expressions_for(*backend_info(id), dilated, &out);
    if (!family_of(id)->compiled) {
      const auto b = make_backend(id);
      const Result nr = run_backend(*b, dilated, make_plan(dilated), Workload{}, RunOptions{});
      EXPECT_EQ(nr.status, Status::kNotCompiled) << id << ": " << nr.message;
    }
    const bool runs =
        std::string(id) == "cuda.flash" || std::string(id) == "flashinfer.prefill" || std::string(id) == "cpu.tiled";
    EXPECT_EQ(w2.empty(), runs) << id << ": " << w2;
  }
}

TEST(MaskZoo, EmptyTilesAreLeftOutOfTheItemsTileLists) {
  const CaseSpec c = zoo("block-sparse");
  const Plan p = make_plan(c);
  ASSERT_EQ(p.split.item_tile_indptr.size(), p.split.items.size() + 1);
  int64_t listed = 0, range = 0;
  for (size_t i = 0; i < p.split.items.size(); ++i) {
    const WorkItem& it = p.split.items[i];
    range += (std::max(it.kv_end - it.kv_begin, 0) + kKvTile - 1) / kKvTile;
    listed += p.split.item_tile_indptr[i + 1] - p.split.item_tile_indptr[i];
  }
  EXPECT_LT(listed, range) << "block-sparse leaves whole tiles empty";
  EXPECT_GT(listed, 0);
}

// A listed tile is marked full exactly when every row of its item has every key of it (up to the
// item's last key) allowed: the kernels then skip the mask_mod's per-key test, so a wrong mark would
// change the output. Checked key by key against the mask on every zoo case with a mask_mod; the
// sliding window's band has full tiles and its edges partial ones.
TEST(MaskZoo, FullTilesAreExactlyThoseWithEveryKeyAllowed) {
  int64_t full = 0, partial = 0;
  for (const auto& e : fs::directory_iterator(src("examples/zoo"))) {
    if (e.path().extension() != ".json") continue;
    const CaseSpec c = read_case_file(e.path().string()).spec;
    const Plan p = make_plan(c);
    if (p.split.item_tile_indptr.empty()) continue;
    SCOPED_TRACE(e.path().filename().string());
    ASSERT_EQ(p.split.item_tile_full.size(), p.split.item_tiles.size());
    const int G = c.group_size();
    for (size_t i = 0; i < p.split.items.size(); ++i) {
      const WorkItem& it = p.split.items[i];
      const WorkUnit& un = p.units[it.unit];
      const RowMask& m = p.masks[un.request];
      for (int t = p.split.item_tile_indptr[i]; t < p.split.item_tile_indptr[i + 1]; ++t) {
        const int k0 = p.split.item_tiles[t], k1 = std::min(k0 + kKvTile, it.kv_end);
        bool all = true;
        for (int row = it.row_begin; row < it.row_end && all; ++row)
          for (int k = k0; k < k1 && all; ++k) all = allowed_in(m, q_abs_of(m, un.q_begin + row / G), k, k + 1) == 1;
        EXPECT_EQ(p.split.item_tile_full[t] != 0, all) << "item " << i << " tile " << k0;
        (all ? full : partial)++;
      }
    }
  }
  EXPECT_GT(full, 0);
  EXPECT_GT(partial, 0);
}

// Golden files recorded from PyTorch's FlexAttention on the GPU machine (tests/peer/
// flex_block_masks.py: str(create_block_mask(mask_mod, 1, 1, q_len, kv_len, BLOCK_SIZE=N)) for the
// zoo's mask_mods, translated by attnscope's expr_to_torch): attnscope's text must equal them.
TEST(MaskZoo, BlockMaskTextEqualsFlexAttentionsGoldenFiles) {
  const fs::path dir = src("tests/data/flex_block_mask");
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".txt") continue;
    // <case>.r<request>.bs<block>.txt
    const std::string stem = e.path().stem().string();
    const auto bs_at = stem.rfind(".bs"), r_at = stem.rfind(".r", bs_at - 1);
    ASSERT_NE(bs_at, std::string::npos);
    ASSERT_NE(r_at, std::string::npos);
    const std::string name = stem.substr(0, r_at);
    const int r = std::stoi(stem.substr(r_at + 2, bs_at - r_at - 2)), bs = std::stoi(stem.substr(bs_at + 3));
    SCOPED_TRACE(e.path().filename().string());
    const CaseSpec c = zoo(name);
    const Plan p = make_plan(c);
    std::ifstream in(e.path());
    std::stringstream want;
    want << in.rdbuf();
    std::string golden = want.str();
    if (!golden.empty() && golden.back() == '\n') golden.pop_back();  // the recorder's trailing newline
    EXPECT_EQ(flex_block_mask_text(p.masks[r], bs, bs), golden);
    ++n;
  }
  EXPECT_GE(n, 10) << "golden block masks recorded";
}
