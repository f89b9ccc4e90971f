// The GUI's FP8 views (issue 27, item 6): the per-slot scale and saturation data of the Pages tab
// against an independent count over the workload, the Diff tab's error split against compare.h, the
// editor's FP8 fields round-tripping a case, the mask readout over the FP8 cache, --view, and
// screenshots of the new views under Xvfb.
#include <gtest/gtest.h>
#include <stb/stb_image.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "attnscope/fp8.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "attnscope/workload.h"
#include "case_json.h"
#include "gui_shot.h"
#include "gui_state.h"
#include "panels/diff_panel.h"
#include "panels/editor_panel.h"
#include "panels/fp8_data.h"
#include "panels/fp8_views.h"
#include "panels/mask_panel.h"
#include "shell.h"

using namespace attnscope;
using namespace attnscope::gui;
namespace fs = std::filesystem;

namespace {

std::string example(const std::string& name) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/" + name; }

// A small FP8 case: outlier K channels, a fragmented pool, GQA.
CaseSpec small_fp8(Fp8Format f, ScaleGranularity g, std::vector<double> k_scales) {
  CaseSpec c;
  c.name = "fp8-small";
  c.requests = {{3, 40}, {1, 17}, {5, 33}};
  c.num_qo_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 32;
  c.kv_cache.page_size = 8;
  c.kv_cache.allocation = PageAlloc::kFragmented;
  c.kv_cache.allocation_seed = 3;
  c.kv_cache.fp8 = f;
  c.kv_cache.scales.granularity = g;
  c.kv_cache.scales.k = std::move(k_scales);
  c.data.outlier_channels = {5, 20};
  c.data.outlier_scale = 16;
  c.backends = {"cpu.reference", "cpu.lowp"};
  c.comparisons = {{"cpu.lowp", "cpu.reference", CompareRule::kMaxAbs, 1e-2, 0.5, ""}};
  validate_case(c);
  return c;
}

// Saturated, counted without the view's code: x / scale (the quantiser's fp32 division) is nearer to
// the value past the largest finite one (e4m3: 480, ties to 448; e5m2: 65536, ties to it) than to it.
bool past_max(Fp8Format f, float x, float s) {
  const double a = std::fabs(static_cast<double>(x / s)), mx = fp8_max(f), next = f == Fp8Format::kE4M3 ? 480.0 : 65536.0;
  return f == Fp8Format::kE4M3 ? a - mx > next - a : a - mx >= next - a;
}

struct Counted {
  int64_t saturated = 0, above_max = 0;
  std::vector<int64_t> per_cell;  // [slots * kv_heads]
  std::vector<double> chan_max;
  std::vector<float> amax;
};

// K's numbers straight from the workload.
Counted count_k(const CaseSpec& c, const PageTable& pt, const Workload& w) {
  Counted n;
  const int ps = pt.page_size, Hk = c.num_kv_heads, D = c.head_dim_qk;
  n.per_cell.assign(static_cast<size_t>(pt.num_pages) * ps * Hk, 0);
  n.amax.assign(n.per_cell.size(), 0.f);
  n.chan_max.assign(D, 0.0);
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
    for (int k = 0; k < c.requests[r].kv_len; ++k)
      for (int h = 0; h < Hk; ++h) {
        const int page = pt.page_of(r, k), slot = k % ps;
        const float s = w.k_scale[scale_index(c.kv_cache.scales.granularity, page, slot, h, ps, Hk)];
        const size_t cell = (static_cast<size_t>(page) * ps + slot) * Hk + h;
        for (int d = 0; d < D; ++d) {
          const int64_t at = kv_offset(c.kv_cache.layout, page, slot, h, d, ps, Hk, D);
          const float x = w.k_orig[at];
          const bool sat = past_max(*c.kv_cache.fp8, x, s);
          if (sat) {
            EXPECT_EQ(std::fabs(w.k_pool[at]), fp8_max(*c.kv_cache.fp8)) << "a saturated element is stored as the max";
          }
          n.saturated += sat;
          n.above_max += std::fabs(x / s) > fp8_max(*c.kv_cache.fp8);
          n.per_cell[cell] += sat;
          n.amax[cell] = std::max(n.amax[cell], std::fabs(x));
          n.chan_max[d] = std::max(n.chan_max[d], std::fabs(static_cast<double>(x) - static_cast<double>(w.k_pool[at]) * s));
        }
      }
  return n;
}

}  // namespace

// The Pages view's per-slot data: scales as the workload's, saturated elements per (slot, head) and in
// total as an independent count, the largest |value| per slot, the error per channel.
TEST(Fp8Gui, PoolDataMatchesAnIndependentCount) {
  struct Probe {
    Fp8Format f;
    ScaleGranularity g;
    std::vector<double> k;
    bool saturates;
  };
  // e5m2 with a K scale too small for the outliers (x16 on channels 5 and 20): |x| > 57344 * 2.5e-4 = 14.3
  // saturates; e4m3 per head likewise; per-token amax: never (a largest element a hair above 448 rounds to 448)
  for (const Probe& p : {Probe{Fp8Format::kE5M2, ScaleGranularity::kTensor, {2.5e-4}, true},
                         Probe{Fp8Format::kE4M3, ScaleGranularity::kHead, {0.04, 0.05}, true},
                         Probe{Fp8Format::kE4M3, ScaleGranularity::kToken, {}, false}}) {
    const CaseSpec c = small_fp8(p.f, p.g, p.k);
    SCOPED_TRACE(std::string(fp8_name(p.f)) + " " + granularity_name(p.g));
    const PageTable pt = make_plan(c).pages;
    const Fp8Data d = build_fp8_data(c, pt);
    ASSERT_TRUE(d.available) << d.why;
    const Workload w = make_workload(c, pt);
    const Counted n = count_k(c, pt, w);
    EXPECT_EQ(d.k.scale, w.k_scale);
    EXPECT_EQ(d.v.scale, w.v_scale);
    EXPECT_EQ(d.k.saturated, n.saturated);
    EXPECT_EQ(n.saturated > 0, p.saturates) << n.saturated;
    if (!p.saturates) {
      EXPECT_GT(n.above_max, 0) << "amax scales rounded to float put some x / scale a hair above the max";
    }
    ASSERT_EQ(d.k.sat.size(), n.per_cell.size());
    int64_t cells = 0;
    for (size_t i = 0; i < n.per_cell.size(); ++i) {
      ASSERT_EQ(d.k.sat[i], n.per_cell[i]) << "cell " << i;
      ASSERT_EQ(d.k.amax[i], n.amax[i]) << "cell " << i;
      cells += n.per_cell[i] > 0;
    }
    EXPECT_EQ(d.k.saturated_slots, cells);
    int64_t by_head = 0, by_channel = 0;
    for (int64_t x : d.k.head_sat) by_head += x;
    for (int64_t x : d.k.chan_sat) by_channel += x;
    EXPECT_EQ(by_head, n.saturated);
    EXPECT_EQ(by_channel, n.saturated);
    EXPECT_EQ(d.k.chan_max, n.chan_max);
    // only the outlier channels saturate, and they carry the largest error
    for (int ch = 0; ch < c.head_dim_qk; ++ch)
      if (ch != 5 && ch != 20) {
        EXPECT_EQ(d.k.chan_sat[ch], 0) << ch;
      }
    const auto worst = std::max_element(d.k.chan_max.begin(), d.k.chan_max.end()) - d.k.chan_max.begin();
    EXPECT_TRUE(worst == 5 || worst == 20) << worst;
    EXPECT_EQ(d.k.elements, c.total_kv() * c.num_kv_heads * c.head_dim_qk);
    // the pool map reads the same numbers; a slot no request uses is NaN
    for (int64_t slot = 0; slot < d.slots(); ++slot) {
      const float v = fp8_cell_value(d, false, Fp8Colour::kSaturated, slot, 1);
      if (d.used[slot])
        ASSERT_EQ(v, static_cast<float>(n.per_cell[slot * 2 + 1]));
      else
        ASSERT_TRUE(std::isnan(v));
    }
  }
  // not FP8: nothing to show, and why
  CaseSpec plain = small_fp8(Fp8Format::kE4M3, ScaleGranularity::kTensor, {});
  plain.kv_cache.fp8.reset();
  plain.kv_cache.scales = {};
  const Fp8Data none = build_fp8_data(plain, make_plan(plain).pages);
  EXPECT_FALSE(none.available);
  EXPECT_NE(none.why.find("not FP8"), std::string::npos) << none.why;
  // over the limit: said, not built
  const CaseSpec c = small_fp8(Fp8Format::kE4M3, ScaleGranularity::kTensor, {});
  const Fp8Data big = build_fp8_data(c, make_plan(c).pages, 1024);
  EXPECT_FALSE(big.available);
  EXPECT_NE(big.why.find("MiB"), std::string::npos) << big.why;
}

// The Diff tab's error split is compare.h's numbers on the session: the quantisation error the
// session computed, the kernel error against the dequantised ideal, the total against the original.
TEST(Fp8Gui, ErrorSplitIsCompareOnTheSession) {
  CaseFile f;
  f.spec = small_fp8(Fp8Format::kE5M2, ScaleGranularity::kTensor, {2.5e-4});
  const auto s = run_session(f);
  ASSERT_TRUE(s->quantisation && s->original_ideal && s->dequantised_ideal) << s->fp8_note;
  const ErrorSplit e = build_error_split(*s, "cpu.lowp");
  ASSERT_TRUE(e.available) << e.why;
  const Result& lowp = *s->result("cpu.lowp");
  const DiffReport k = diff_only(s->spec(), lowp, *s->dequantised_ideal), t = diff_only(s->spec(), lowp, *s->original_ideal);
  const DiffReport q = diff_only(s->spec(), *s->dequantised_ideal, *s->original_ideal);
  EXPECT_EQ(e.kernel.max_abs, k.o.max_abs);
  EXPECT_EQ(e.kernel.rel_l2, k.o.rel_l2);
  EXPECT_EQ(e.total.max_abs, t.o.max_abs);
  EXPECT_EQ(e.total.rel_l2, t.o.rel_l2);
  EXPECT_EQ(e.quantisation.max_abs, q.o.max_abs);
  EXPECT_EQ(e.quantisation.rel_l2, q.o.rel_l2);
  // the comparison against cpu.reference is the kernel error; its vs_original the total
  ASSERT_EQ(s->diffs.size(), 1u);
  EXPECT_EQ(e.kernel.max_abs, s->diffs[0].o.max_abs);
  ASSERT_TRUE(s->diffs[0].vs_original);
  EXPECT_EQ(e.total.max_abs, s->diffs[0].vs_original->max_abs);
  // saturation puts FP8's error far above the kernel's: the split tells them apart
  EXPECT_GT(e.quantisation.max_abs, 10 * e.kernel.max_abs);
  EXPECT_FALSE(build_error_split(*s, "cpu.tiled").available);
}

// spec -> editor state -> spec gives the spec back; text that is not a number names the path and the
// rule; numbers the case's rules refuse reach validate_case, which names them.
TEST(Fp8Gui, EditorRoundTripsFp8Settings) {
  std::vector<CaseSpec> specs;
  specs.push_back(small_fp8(Fp8Format::kE4M3, ScaleGranularity::kTensor, {}));
  specs.push_back(small_fp8(Fp8Format::kE5M2, ScaleGranularity::kTensor, {2.5e-4}));
  specs.push_back(small_fp8(Fp8Format::kE4M3, ScaleGranularity::kHead, {0.1, 1.0 / 3}));
  specs.push_back(small_fp8(Fp8Format::kE4M3, ScaleGranularity::kToken, {}));
  specs.back().kv_cache.scales.v = {};
  CaseSpec fa = small_fp8(Fp8Format::kE4M3, ScaleGranularity::kHead, {});
  fa.kv_cache.scales.v = {0.125, 3e-7};
  fa.fp8_attention = Fp8AttentionSpec{0.0123456789};
  specs.push_back(fa);
  fa.fp8_attention = Fp8AttentionSpec{};
  specs.push_back(fa);
  CaseSpec plain = specs[0];
  plain.kv_cache.fp8.reset();
  specs.push_back(plain);
  for (const CaseSpec& c : specs) {
    const Fp8EditorState st = fp8_editor_state(c);
    CaseSpec back = c;
    back.kv_cache.fp8.reset();
    back.kv_cache.scales = KvScalesSpec{};
    back.fp8_attention.reset();
    EXPECT_EQ(apply_fp8_editor_state(st, back), "");
    EXPECT_EQ(back, c) << st.k_scales << " / " << st.v_scales << " / " << st.q_scale;
  }
  // text that is not "amax" or numbers: the spec is kept, the error names the path
  CaseSpec c = specs[2];
  Fp8EditorState st = fp8_editor_state(c);
  st.k_scales = "0.1 abc";
  const std::string e = apply_fp8_editor_state(st, c);
  EXPECT_EQ(e.rfind("/kv_cache/scales/k: \"abc\" is not a number", 0), 0u) << e;
  EXPECT_EQ(c, specs[2]);
  st = fp8_editor_state(c);
  st.fp8_attention = true;
  st.q_scale = "0.1 0.2";
  EXPECT_EQ(apply_fp8_editor_state(st, c).rfind("/fp8_attention/q_scale:", 0), 0u);
  // numbers validate_case refuses: applied, then refused with the path (the editor shows that error)
  for (const auto& [text, path] : {std::pair<std::string, std::string>{"-1 0.5", "/kv_cache/scales/k/0"},
                                   {"0.5", "/kv_cache/scales/k"},
                                   {"nan 1", "/kv_cache/scales/k/0"}}) {
    st = fp8_editor_state(specs[2]);
    st.k_scales = text;
    CaseSpec x = specs[2];
    ASSERT_EQ(apply_fp8_editor_state(st, x), "");
    try {
      validate_case(x);
      ADD_FAILURE() << text << " was accepted";
    } catch (const CaseError& err) {
      EXPECT_EQ(err.path(), path) << text << ": " << err.what();
    }
  }
  // back to the case dtype: the scales and FP8 attention go too (else the case is invalid)
  st = fp8_editor_state(fa);
  st.kv_dtype = 0;
  CaseSpec y = fa;
  EXPECT_EQ(apply_fp8_editor_state(st, y), "");
  EXPECT_NO_THROW(validate_case(y));
  EXPECT_FALSE(y.fp8_kv());
  EXPECT_FALSE(y.fp8_attention);
}

// The mask readout of an FP8 case reads the stored values times their scales, as the references do:
// a row's probabilities (exp(score - the dequantised reference's LSE)) sum to 1. Without the FP8
// data it says it shows the logit before quantisation and gives no probability.
TEST(Fp8Gui, MaskReadoutReadsTheFp8Cache) {
  CaseFile f;
  f.spec = small_fp8(Fp8Format::kE5M2, ScaleGranularity::kTensor, {2.5e-4});
  f.spec.fp8_attention = Fp8AttentionSpec{};
  const auto s = run_session(f);
  const Fp8Data d = build_fp8_data(s->spec(), s->plan.pages);
  ASSERT_TRUE(d.available);
  const int r = 0, q = 2, head = 3, kv = s->spec().requests[r].kv_len;
  double sum = 0, pre_sum = 0;
  for (int k = 0; k < kv; ++k) {
    const Readout x = mask_readout(*s, r, head, q, k, &d);
    EXPECT_TRUE(x.fp8);
    EXPECT_FALSE(x.pre_quantisation);
    if (x.allowed) {
      ASSERT_TRUE(x.has_prob);
      sum += x.prob;
    }
    const Readout pre = mask_readout(*s, r, head, q, k, nullptr);
    EXPECT_TRUE(pre.pre_quantisation);
    EXPECT_FALSE(pre.has_prob);
    if (pre.allowed) pre_sum += std::exp(pre.score - s->dequantised_ideal->lse[2 * s->spec().num_qo_heads + head]);
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_GT(std::fabs(pre_sum - 1.0), 1e-3) << "the pre-quantisation logits do not fit the dequantised LSE";
}

TEST(Fp8Gui, ViewNames) {
  UiState ui;
  EXPECT_TRUE(apply_view("scales", ui));
  EXPECT_EQ(ui.pages_view, 1);
  EXPECT_TRUE(apply_view("channels", ui));
  EXPECT_EQ(ui.pages_view, 2);
  EXPECT_TRUE(apply_view("original", ui));
  EXPECT_EQ(ui.diff_reference, 2);
  EXPECT_FALSE(apply_view("scale", ui));
  const auto o = attnscope::testing::sh("env -u DISPLAY -u WAYLAND_DISPLAY " + std::string(ATTNSCOPE_GUI) + " --view nope");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.out.find("--view nope is not a view (pool, scales, channels"), std::string::npos) << o.out;
}

// --- screenshots under Xvfb ---

namespace {

struct Image {
  int w = 0, h = 0;
  std::vector<unsigned char> px;
};

bool shoot(const std::string& args, Image* img, std::string* log) {
  attnscope::testing::GuiShot s = attnscope::testing::gui_screenshot(ATTNSCOPE_GUI, args + " --size 1280x800", "fp8");
  *log = s.log;
  img->w = s.w, img->h = s.h, img->px = std::move(s.px);
  return s.rc == 0 && !img->px.empty();
}

// Pixels right of the sidebar that pass `pred`.
template <class P>
int64_t count(const Image& img, P pred) {
  int64_t n = 0;
  for (int y = 0; y < img.h; ++y)
    for (int x = img.w * 35 / 100; x < img.w; ++x) n += pred(img.px.data() + (static_cast<size_t>(y) * img.w + x) * 4);
  return n;
}

bool saturated_red(const unsigned char* p) {
  return p[0] == kSaturatedColour.r && p[1] == kSaturatedColour.g && p[2] == kSaturatedColour.b;
}

}  // namespace

// The Pages tab's FP8 views on the saturating example: the saturated slots marked in the pool map,
// the outlier channels' bars; the Diff tab with the original ideal as the reference.
TEST(Fp8Gui, ScreenshotsOfTheFp8Views) {
  if (!attnscope::testing::have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const std::string e5m2 = example("fp8-e5m2-outliers-saturate.json");
  Image img;
  std::string log;
  ASSERT_TRUE(shoot(e5m2 + " --tab pages --view scales", &img, &log)) << log;
  EXPECT_GT(count(img, saturated_red), 500) << "the saturated slots' marks";
  const int64_t ramp = count(img, [](const unsigned char* p) { return p[1] > 120 && p[0] < 150 && p[2] < 160 && p[2] > 60; });
  EXPECT_GT(ramp, 2000) << "the pool map's colour ramp";
  ASSERT_TRUE(shoot(e5m2 + " --tab pages --view channels", &img, &log)) << log;
  EXPECT_GT(count(img, saturated_red), 1500) << "the outlier channels' bars";
  EXPECT_GT(count(img, [](const unsigned char* p) { return p[0] == 33 && p[1] == 165 && p[2] == 160; }), 1500) << "V's bars";
  ASSERT_TRUE(shoot(e5m2 + " --tab diff --view original", &img, &log)) << log;
  EXPECT_GT(count(img, [](const unsigned char* p) { return p[1] > 120 && p[0] < 150 && p[2] < 160 && p[2] > 60; }), 2000)
      << "the error heatmap";
  // the non-FP8 example's Pages tab is the pool, whatever --view says
  ASSERT_TRUE(shoot(example("poisoned-pages.json") + " --tab pages --view scales", &img, &log)) << log;
  EXPECT_EQ(count(img, saturated_red), 0);
}
