// GUI: draw-item builders checked without a window, then screenshots of every tab under Xvfb with
// pixel checks that fail on a blank or broken render.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "gui_shot.h"  // before the implementation below: stb_image.h is not guarded against both

#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>

#include "attnscope/engine_metadata.h"
#include "attnscope/library_plan.h"
#include "attnscope/mask.h"
#include "attnscope/mask_expr.h"
#include "attnscope/plan.h"
#include "attnscope/registry.h"
#include "attnscope/sparse.h"
#include "case_gen.h"
#include "case_json.h"
#include "desktop.h"
#include "draw/axes.h"
#include "draw/colormap.h"
#include "explain.h"
#include "fi_library_plan.h"
#include "frame_stats.h"
#include "gui_state.h"
#include "panels/diff_panel.h"
#include "panels/editor_panel.h"
#include "panels/expr_editor.h"
#include "panels/local_panel.h"
#include "panels/mask_panel.h"
#include "panels/pages_panel.h"
#include "panels/plan_cost_panel.h"
#include "panels/softmax_panel.h"
#include "panels/split_panel.h"
#include "panels/sweep_panel.h"
#include "panels/timing_panel.h"
#include "repro.h"

using namespace attnscope;
using namespace attnscope::gui;
namespace fs = std::filesystem;

namespace {

std::string example(const std::string& name) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/" + name; }

std::shared_ptr<Session> session_of(const std::string& name) { return run_session(read_case_file(example(name))); }

}  // namespace

// The screenshot mode printed "frame time avg 4.55 ms, max 1.41 ms": an average over every frame
// beside a maximum that skipped the slow warm-up frames. Mean and max now cover the same frames.
TEST(GuiItems, FrameStatsMeanNeverExceedsMax) {
  FrameStats f;
  for (double ms : {120.0, 40.0, 9.0, 6.0, 5.0}) f.record(ms);  // warm-up: font atlas, textures
  EXPECT_EQ(f.counted(), 0);
  EXPECT_EQ(f.mean(), 0.0);
  for (double ms : {1.0, 1.4, 0.8, 1.2}) f.record(ms);
  EXPECT_EQ(f.frames(), 9);
  EXPECT_EQ(f.counted(), 4);
  EXPECT_DOUBLE_EQ(f.mean(), (1.0 + 1.4 + 0.8 + 1.2) / 4);
  EXPECT_DOUBLE_EQ(f.max(), 1.4);
  EXPECT_LE(f.mean(), f.max());
  // the old figures for the same frames: a moving average over all nine, above the maximum
  double ema = 120.0;
  for (double ms : {40.0, 9.0, 6.0, 5.0, 1.0, 1.4, 0.8, 1.2}) ema = 0.9 * ema + 0.1 * ms;
  EXPECT_GT(ema, f.max());
}

TEST(GuiItems, MaskPoolingIsExact) {
  auto s = session_of("fully-masked-rows.json");
  for (int max_cells : {7, 64, 512}) {
    const MaskItems m = build_mask_items(*s, 0, max_cells);
    ASSERT_LE(m.rows, max_cells);
    ASSERT_LE(m.cols, max_cells);
    const RowMask& rm = s->plan.masks[0];
    int64_t allowed_pairs = 0;
    for (int r = 0; r < m.rows; ++r)
      for (int c = 0; c < m.cols; ++c) {
        bool all = true, any = false;
        for (int q = r * m.q_per_cell; q < std::min(m.q_len, (r + 1) * m.q_per_cell); ++q)
          for (int k = c * m.k_per_cell; k < std::min(m.kv_len, (c + 1) * m.k_per_cell); ++k) {
            const bool a = allowed(rm, q_abs_of(rm, q), k);
            all &= a;
            any |= a;
            allowed_pairs += a && c == 0 ? 0 : 0;
          }
        const Cell want = all ? Cell::kAll : any ? Cell::kSome : Cell::kNone;
        ASSERT_EQ(static_cast<int>(m.cells[static_cast<size_t>(r) * m.cols + c]), static_cast<int>(want)) << r << "," << c;
      }
    for (int q = 0; q < m.q_len; ++q)
      for (int k = 0; k < m.kv_len; ++k) allowed_pairs += allowed(rm, q_abs_of(rm, q), k);
    EXPECT_EQ(m.allowed, allowed_pairs);
  }
}

TEST(GuiItems, MaskReadoutMatchesTheReference) {
  auto s = session_of("prefix-lm.json");
  const Readout r = mask_readout(*s, 0, 1, 50, 10);
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(r.q_abs, 50);
  ASSERT_TRUE(r.has_prob);
  EXPECT_GT(r.prob, 0);
  EXPECT_LT(r.prob, 1);
  // probabilities of a row over its visible keys sum to 1
  double sum = 0;
  for (int k = 0; k < 96; ++k) {
    const Readout x = mask_readout(*s, 0, 1, 50, k);
    if (x.allowed) sum += x.prob;
  }
  EXPECT_NEAR(sum, 1.0, 1e-4);
  EXPECT_FALSE(mask_readout(*s, 0, 1, 50, 80).allowed);
}

TEST(GuiItems, PagesShowOwnersNullAndPoison) {
  auto s = session_of("poisoned-pages.json");
  const PagesItems p = build_pages_items(*s);
  EXPECT_EQ(p.num_pages, s->plan.pages.num_pages);
  EXPECT_TRUE(p.has_null);
  EXPECT_EQ(p.used + p.unused + 1, p.num_pages);
  int poisoned = 0;
  for (const auto& c : p.pool) poisoned += c.poisoned;
  EXPECT_GE(poisoned, p.unused);  // every unused page, plus partly filled last pages
  EXPECT_EQ(p.last_fill[1], 1);   // request 1 has 17 keys in pages of 16
  EXPECT_NEAR(p.pool[s->plan.pages.indices[s->plan.pages.indptr[2] - 1]].fill, 1.0 / 16, 1e-6);
}

TEST(GuiItems, LocalBatchesFollowThePlan) {
  auto s = session_of("llama4-chunked-local.json");
  const LocalItems l = build_local_items(*s);
  EXPECT_EQ(l.chunk, 256);
  ASSERT_EQ(l.batches.size(), s->plan.local.batches.size());
  for (const auto& b : l.batches) EXPECT_EQ(b.kv_begin % 256, 0);
  EXPECT_TRUE(build_local_items(*session_of("prefix-lm.json")).batches.empty());
}

TEST(GuiItems, SplitGridAndPlannerModels) {
  auto s = session_of("gqa-decode-long.json");
  const SplitItems it = build_split_items(*s);
  ASSERT_EQ(it.models.size(), 4u);
  EXPECT_EQ(it.models[0].planner, "flashinfer");
  EXPECT_EQ(it.models[0].items, 32);  // the worked example
  EXPECT_EQ(it.models[0].chunk_pages, 24);
  EXPECT_EQ(it.first_item, (std::vector<int>{0, 3, 11, 13}));
  for (const auto& m : it.models) EXPECT_TRUE(m.error.empty()) << m.planner << ": " << m.error;
}

TEST(GuiItems, FlashInfersOwnPlanBesideTheModel) {
  // seeded random cases: the table has a row per field and marks exactly the fields the comparison
  // lists, the source line says where the device answers came from, and FlashInfer's grids hold
  // each of its work items once. Every other case replans FlashInfer for another SM count, so
  // that differences appear and the marks must follow them.
  int compared = 0, marked = 0;
  for (uint64_t seed = 0; seed < 80; ++seed) {
    Session s;
    s.file.spec = attnscope::testing::random_case(seed);
    s.plan = plan_case(s.spec());
    SCOPED_TRACE(s.spec().name);
    if (seed % 2 == 1 && flashinfer_planner_compiled()) {
      const DeviceProfile other = h100_profile(s.spec().split.num_sms * 3 + 1, "another part");
      s.plan.library.flashinfer = flashinfer_library_plan(s.spec(), s.plan.units, &other);
    }
    const LibraryItems L = build_split_items(s).library;
    const FlashInferPlan& f = s.plan.library.flashinfer;
    EXPECT_EQ(L.ran, f.ran);
    EXPECT_EQ(L.line, flashinfer_agreement_line(s.plan.split, f));
    if (!f.ran) {
      EXPECT_TRUE(L.fields.empty());
      EXPECT_NE(L.line.find("not run"), std::string::npos) << L.line;
      continue;
    }
    EXPECT_NE(L.source.find(f.device.source), std::string::npos);
    const auto diffs = compare_flashinfer_plan(s.plan.split, f);
    std::set<std::string> want, got;
    for (const auto& d : diffs) want.insert(d.field);
    for (const auto& r : L.fields)
      if (r.differs) got.insert(r.field);
    EXPECT_EQ(got, want);
    EXPECT_EQ(L.agrees, diffs.empty());
    if (f.available) {
      EXPECT_EQ(L.fields.size(), 9u);
      std::vector<int> seen(f.new_batch_size, 0);
      for (const auto& g : L.grids)
        for (int id : g.ids)
          if (id >= 0) ++seen[id];
      for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "FlashInfer item " << i;
      if (!want.count("work_items")) {
        EXPECT_EQ(L.differing_cells, 0);
      }
    }
    ++compared;
    marked += !want.empty();
  }
  if (flashinfer_planner_compiled()) {
    EXPECT_GT(compared, 30);
    EXPECT_GT(marked, 5);
  }
}

TEST(GuiItems, DiffHeatmapAndHistogramCountEveryRow) {
  auto s = session_of("poisoned-pages.json");
  const DiffItems d = build_diff_items(*s, 0, 16);
  ASSERT_TRUE(d.available) << d.why;
  EXPECT_LE(d.rows, 16);
  EXPECT_EQ(d.cols, s->spec().num_qo_heads);
  float total = 0;
  for (float h : d.histogram) total += h;
  EXPECT_EQ(static_cast<int64_t>(total), s->diffs[0].rows_compared);
  EXPECT_LT(d.lo, d.hi);
  for (float l : d.log_err) EXPECT_FALSE(std::isnan(l));  // every row of this case is compared
}

TEST(GuiItems, TimingRowsPerBackend) {
  auto s = session_of("prefix-lm.json");
  const TimingItems t = build_timing_items(*s);
  ASSERT_EQ(t.rows.size(), s->results.size());
  EXPECT_GT(t.flops, 0);
  for (const auto& r : t.rows) EXPECT_GT(r.host_ms, 0) << r.backend;
}

TEST(GuiItems, SoftmaxViewStepsThroughThePlan) {
  const CaseSpec c = read_case_file(example("gemma2-window-softcap.json")).spec;
  const SoftmaxTrace t = explain_case(c, 0, 0, 0);
  ASSERT_TRUE(t.split);
  const SoftmaxView last = build_softmax_view(t, -1);
  // every tile, every chunk's partial, every merge, the result: in that order
  ASSERT_EQ(last.events.size(), t.steps.size() + t.partials.size() + t.merges.size() + 1);
  EXPECT_EQ(last.step, static_cast<int>(last.events.size()) - 1);
  EXPECT_EQ(last.events.back().kind, SoftmaxEvent::kFinal);
  EXPECT_NE(last.events.back().state.find("cpu.tiled's bits"), std::string::npos);
  EXPECT_EQ(last.m_series.size(), t.steps.size());
  EXPECT_EQ(last.events[0].kind, SoftmaxEvent::kTile);
  EXPECT_EQ(last.events[t.steps.size() + t.partials.size()].kind, SoftmaxEvent::kMerge);
  // the soft-cap is in the formula; a chunk past the window's end is fully masked and weighs 0
  EXPECT_NE(last.header.find("tanh"), std::string::npos) << last.header;
  bool empty_chunk = false;
  for (const auto& e : last.events)
    empty_chunk |= e.kind == SoftmaxEvent::kPartial && e.state.find("no visible key") != std::string::npos;
  EXPECT_TRUE(empty_chunk);
  // stepping: the plots hold the tiles up to the shown step; out-of-range steps clamp to the end
  const SoftmaxView first = build_softmax_view(t, 0);
  EXPECT_EQ(first.step, 0);
  EXPECT_EQ(first.m_series.size(), 1u);
  EXPECT_EQ(build_softmax_view(t, 100000).step, last.step);
  // per key: masked keys have no logit (NaN) and probability 0; visible probabilities sum to 1
  double sum = 0;
  for (size_t k = 0; k < last.probs.size(); ++k) {
    const int key = last.key0 + static_cast<int>(k);
    const bool seen = key >= last.visible_lo && key < last.visible_hi;
    EXPECT_EQ(std::isnan(last.logits[k]), !seen) << key;
    if (!seen) {
      EXPECT_EQ(last.probs[k], 0.f);
    }
    sum += last.probs[k];
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST(GuiItems, SweepPlotHasASeriesPerBackendAndLabelledAxes) {
  const nlohmann::json base = case_to_json(read_case_file(example("gqa-decode-long.json")).spec);
  SweepOptions opt;
  opt.session.backends = std::vector<std::string>{"cpu.reference", "cpu.tiled"};
  const SweepReport r = run_sweep(base, parse_sweep_set("/requests/*/kv_len=0,8,64,512,2000"), opt);
  ASSERT_EQ(r.points.size(), 5u);
  const SweepPlot p = build_sweep_plot(r, 0);
  EXPECT_EQ(p.invalid, 1);  // kv_len 0 < q_len 1: a row with the reason, no point
  EXPECT_TRUE(p.numeric);
  ASSERT_EQ(p.series.size(), 2u);
  EXPECT_EQ(p.series[0].backend, "cpu.reference");
  EXPECT_TRUE(p.log_x);  // 8 .. 2000 spans more than a decade
  EXPECT_FALSE(p.x_ticks.empty());
  EXPECT_EQ(p.x_ticks.size(), p.x_tick_labels.size());
  EXPECT_FALSE(p.y_ticks.empty());
  EXPECT_EQ(p.y_label, "time (ms)");
  EXPECT_EQ(p.x_label, "/requests/*/kv_len");
  for (const auto& s : p.series) {
    EXPECT_EQ(s.x.size(), s.y.size());
    for (double y : s.y) EXPECT_GT(y, 0);
  }
  // a string-valued sweep is drawn over the values' order
  const SweepReport planners = run_sweep(base, parse_sweep_set("/split/planner=off,flashinfer"), opt);
  const SweepPlot q = build_sweep_plot(planners, 1);
  EXPECT_FALSE(q.numeric);
  EXPECT_EQ(q.x_tick_labels, (std::vector<std::string>{"off", "flashinfer"}));
  EXPECT_EQ(q.y_label, "TFLOP/s");
}

TEST(GuiItems, UndoRedoWalkTheEditsAndAnEditDropsTheRedoBranch) {
  CaseFile a, b, c, d;
  a.spec.name = "a", b.spec.name = "b", c.spec.name = "c", d.spec.name = "d";
  EditHistory h(3);
  h.reset(a);
  EXPECT_FALSE(h.can_undo());
  h.push(b);
  h.push(c);
  EXPECT_EQ(h.undo().spec.name, "b");
  EXPECT_EQ(h.undo().spec.name, "a");
  EXPECT_FALSE(h.can_undo());
  EXPECT_EQ(h.redo().spec.name, "b");
  h.push(d);  // an edit after undo: c is gone
  EXPECT_FALSE(h.can_redo());
  EXPECT_EQ(h.undo().spec.name, "b");
  EXPECT_EQ(h.redo().spec.name, "d");
  h.push(c);  // capacity 3: the oldest goes
  EXPECT_EQ(h.size(), 3u);
  EXPECT_EQ(h.undo().spec.name, "d");
  EXPECT_EQ(h.undo().spec.name, "b");
  EXPECT_FALSE(h.can_undo());
}

TEST(GuiItems, SettingsRoundTripAndBadValuesKeepTheDefaults) {
  const std::string p = (fs::temp_directory_path() / ("attnscope_settings_" + std::to_string(::getpid()) + ".json")).string();
  Settings s;
  s.width = 1234, s.height = 777, s.sidebar = 333, s.palette = 1, s.last_case = "/tmp/x.json";
  save_settings(p, s);
  const Settings r = load_settings(p);
  EXPECT_EQ(r.width, 1234);
  EXPECT_EQ(r.height, 777);
  EXPECT_EQ(r.sidebar, 333);
  EXPECT_EQ(r.palette, 1);
  EXPECT_EQ(r.last_case, "/tmp/x.json");
  std::ofstream(p) << R"({"width": 5, "height": "x", "palette": 7, "sidebar": 1e9})";
  const Settings d = load_settings(p);
  EXPECT_EQ(d.width, Settings{}.width);
  EXPECT_EQ(d.height, Settings{}.height);
  EXPECT_EQ(d.palette, 0);
  EXPECT_EQ(d.sidebar, Settings{}.sidebar);
  std::ofstream(p) << "not json";
  EXPECT_EQ(load_settings(p).width, Settings{}.width);
  fs::remove(p);
}

TEST(GuiItems, RequestTableSortsAndFilters) {
  CaseSpec c;
  c.requests = {RequestSpec{1, 500}, RequestSpec{64, 64}, RequestSpec{1, 9000}, RequestSpec{8, 100}};
  std::string err;
  EXPECT_EQ(request_rows(c, 0, true, "", &err), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(request_rows(c, 2, false, "", &err), (std::vector<int>{2, 0, 3, 1}));
  EXPECT_EQ(request_rows(c, 1, true, "", &err), (std::vector<int>{0, 2, 3, 1}));  // ties keep index order
  EXPECT_EQ(request_rows(c, 0, true, "q=1", &err), (std::vector<int>{0, 2}));
  EXPECT_EQ(request_rows(c, 0, true, "q=1 kv>=4096", &err), (std::vector<int>{2}));
  EXPECT_EQ(request_rows(c, 0, true, "kv<100", &err), (std::vector<int>{1}));
  EXPECT_TRUE(err.empty()) << err;
  EXPECT_TRUE(request_rows(c, 0, true, "len>3", &err).empty());
  EXPECT_NE(err.find("\"len>3\" is not a filter term"), std::string::npos) << err;
}

TEST(GuiItems, AxisTicksPaletteAndShortcuts) {
  EXPECT_EQ(nice_ticks(1000, 10), (std::vector<int>{0, 100, 200, 300, 400, 500, 600, 700, 800, 900}));
  EXPECT_EQ(nice_ticks(7, 10), (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(nice_ticks(300, 4).size(), 3u);  // step 100
  EXPECT_TRUE(nice_ticks(0, 5).empty());
  const Rgba def = owner_colour(1);
  set_palette(Palette::kColourBlind);
  const Rgba cb = owner_colour(1), full = block_full_colour();
  set_palette(Palette::kDefault);
  EXPECT_EQ(cb.r, 86);  // Okabe-Ito sky blue
  EXPECT_EQ(full.b, 233);
  EXPECT_FALSE(def.r == cb.r && def.g == cb.g && def.b == cb.b);
  bool f1 = false, undo = false;
  for (const auto& [k, what] : shortcut_list()) f1 |= k == "F1", undo |= k == "Ctrl+Z";
  EXPECT_TRUE(f1 && undo);
}

TEST(GuiItems, GeneratorAndTabs) {
  GeneratorSettings g;
  g.count = 64;
  g.kind = 1;
  const auto reqs = generate_requests(g);
  ASSERT_EQ(reqs.size(), 64u);
  for (const auto& r : reqs) {
    EXPECT_EQ(r.q_len, 1);
    EXPECT_GE(r.kv_len, g.kv_min);
    EXPECT_LE(r.kv_len, g.kv_max);
  }
  EXPECT_EQ(generate_requests(g)[5].kv_len, reqs[5].kv_len);  // seeded
  EXPECT_EQ(parse_tab("Split-KV"), Tab::kSplit);
  EXPECT_EQ(parse_tab("diff"), Tab::kDiff);
  EXPECT_EQ(parse_tab("Softmax"), Tab::kSoftmax);
  EXPECT_EQ(parse_tab("engine"), Tab::kEngine);
  EXPECT_FALSE(parse_tab("nope").has_value());
  UiState ui;  // --view picks the Engine tab's engine
  EXPECT_TRUE(apply_view("vllm-flashinfer", ui));
  EXPECT_EQ(ui.engine, 1);
  EXPECT_TRUE(apply_view("sglang-fa", ui));
  EXPECT_EQ(ui.engine, 0);
  EXPECT_TRUE(apply_view("sglang-nsa", ui));  // the DSA views: the Engine enum's order
  EXPECT_EQ(ui.engine, static_cast<int>(attnscope::Engine::kSglangNsa));
  EXPECT_TRUE(apply_view("vllm-flashmla-sparse", ui));
  EXPECT_EQ(ui.engine, 3);
}

TEST(GuiItems, ExportedReproReopensToTheSameState) {
  // what File > Export repro writes, and what opening it gives back
  auto s = session_of("gqa-decode-long.json");
  const std::string text = case_file_to_json(make_repro(*s)).dump(2);
  const CaseFile f = parse_case_text(text);
  EXPECT_EQ(f.spec, s->spec());
  auto again = run_session(f);
  ASSERT_EQ(again->replay.size(), s->results.size());
  for (const auto& r : again->replay) EXPECT_TRUE(r.match()) << r.backend;
  EXPECT_EQ(again->plan.split.items.size(), s->plan.split.items.size());
}

// The editor's live validation: the error under the field with a caret under the bad token, each
// field its own, and the case refused as a whole (so the app keeps the last valid plan).
TEST(GuiItems, ExprErrorCaretPointsAtTheBadToken) {
  CaseSpec c = read_case_file(example("zoo/causal.json")).spec;
  c.attention.mask_mod = "kv_idx <= qidx";
  const ExprFieldStatus st = expr_field_status(c, false);
  ASSERT_TRUE(st.error);
  EXPECT_EQ(st.message.rfind("column 11: unknown name \"qidx\"", 0), 0u) << st.message;
  EXPECT_EQ(st.excerpt, "kv_idx <= qidx");
  EXPECT_EQ(st.caret, std::string(10, ' ') + "^");
  EXPECT_THROW(validate_case(c), CaseError);
  EXPECT_FALSE(expr_field_status(c, true).error);  // no score_mod: nothing to say there

  // several lines: the caret goes under the bad token of its own line, which the message names
  c.attention.mask_mod = "kv_idx <= q_idx &&\n  q_idx = 3";
  const ExprFieldStatus ml = expr_field_status(c, false);
  ASSERT_TRUE(ml.error);
  EXPECT_EQ(ml.excerpt, "  q_idx = 3");
  EXPECT_EQ(ml.excerpt[ml.caret.size() - 1], '=');
  EXPECT_EQ(ml.message, "line 2, column 9: \"=\" is not an operator: == compares") << ml.message;

  // the end of the text: the caret just after the last character, not on a blank line below
  c.attention.mask_mod = "kv_idx <= \n";
  const ExprFieldStatus end = expr_field_status(c, false);
  ASSERT_TRUE(end.error);
  EXPECT_EQ(end.excerpt, "kv_idx <= ");
  EXPECT_EQ(end.caret, std::string(9, ' ') + "^");

  // a long line is cut around the token, "..." at the cuts, the caret still under it
  std::string longer;
  for (int i = 0; i < 20; ++i) longer += "kv_idx != " + std::to_string(i) + " && ";
  longer += "kv_idx <= q_idx $ 1 && q_idx >= 0 && q_idx >= 1 && q_idx >= 2 && q_idx >= 3";
  const int col = static_cast<int>(longer.find('$')) + 1;
  for (int width : {24, 40, 80}) {
    const ExprFieldStatus w = expr_error_view(longer, "column " + std::to_string(col) + ": unexpected \"$\"", col, width);
    EXPECT_LE(static_cast<int>(w.excerpt.size()), width);
    EXPECT_EQ(w.excerpt.rfind("...", 0), 0u) << w.excerpt;
    EXPECT_EQ(w.excerpt.substr(w.excerpt.size() - 3), "...") << w.excerpt;
    ASSERT_LT(w.caret.size(), w.excerpt.size() + 1);
    EXPECT_EQ(w.excerpt[w.caret.size() - 1], '$') << w.excerpt << "\n" << w.caret;
  }

  // rules without a column: the message alone
  c.attention.mask_mod = "kv_idx <= q_idx + h";
  const ExprFieldStatus head = expr_field_status(c, false);
  ASSERT_TRUE(head.error);
  EXPECT_NE(head.message.find("reads h"), std::string::npos) << head.message;
  EXPECT_TRUE(head.excerpt.empty());
  c.attention.mask_mod.reset();
  c.attention.score_mod = "30 * tanh(score / 30)";
  c.attention.soft_cap = 50.0;
  const ExprFieldStatus cap = expr_field_status(c, true);
  ASSERT_TRUE(cap.error);
  EXPECT_NE(cap.message.find("soft_cap"), std::string::npos) << cap.message;
  c.attention.soft_cap.reset();
  EXPECT_FALSE(expr_field_status(c, true).error);

  // each field its own error: a bad mask_mod leaves the score_mod's status clean
  c.attention.mask_mod = "kv_idx <";
  EXPECT_TRUE(expr_field_status(c, false).error);
  EXPECT_FALSE(expr_field_status(c, true).error);
}

TEST(GuiItems, ExprExamplesParseAndAreTheZoos) {
  int masks = 0, scores = 0;
  for (const auto& e : expr_examples()) {
    SCOPED_TRACE(e.name);
    EXPECT_NO_THROW(Expr::parse(e.text, e.score ? Expr::Kind::kScore : Expr::Kind::kMask));
    (e.score ? scores : masks)++;
    if (std::string(e.zoo).empty()) continue;
    const AttentionSpec a = read_case_file(example(std::string("zoo/") + e.zoo)).spec.attention;
    EXPECT_EQ(e.score ? a.score_mod : a.mask_mod, std::optional<std::string>(e.text));
  }
  EXPECT_GE(masks, 7);
  EXPECT_GE(scores, 2);
}

TEST(GuiItems, BuiltinMaskAsMaskModKeepsTheMask) {
  // causal + window: the expression ANDed with the same built-in mask allows the same pairs
  CaseSpec c = read_case_file(example("gemma2-window-softcap.json")).spec;
  const auto b = builtin_as_mask_mod(c);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(*b, "kv_idx <= q_idx && q_idx - kv_idx < 512");
  EXPECT_EQ(mask_mod_and_note(c, 0), "");
  CaseSpec with = c;
  with.attention.mask_mod = *b;
  validate_case(with);
  const Plan p0 = make_plan(c), p1 = make_plan(with);
  EXPECT_EQ(allowed_pairs(with, p1), allowed_pairs(c, p0));
  EXPECT_EQ(p1.blocks.empty, p0.blocks.empty);
  EXPECT_NE(mask_mod_and_note(with, 1).find("ANDed with the built-in mask (kv_idx <= q_idx"), std::string::npos);
  // doc() reads each request's own doc_starts: one expression for all; a pad_start of one request
  // prints a mask of its own, so there is no single expression to offer
  EXPECT_EQ(builtin_as_mask_mod(read_case_file(example("zoo/documents.json")).spec), "doc(kv_idx) == doc(q_idx)");
  CaseSpec padded = c;
  padded.requests[1].pad_start = 1000;
  EXPECT_FALSE(builtin_as_mask_mod(padded).has_value());
  // non-causal zoo masks stand alone
  const CaseSpec natten = read_case_file(example("zoo/natten-2d.json")).spec;
  EXPECT_EQ(mask_mod_and_note(natten, 0), "");
  EXPECT_FALSE(builtin_as_mask_mod(natten).has_value());  // the built-in mask is "1"
  // the app plans a large mask_mod on the runner's thread, a small one at once
  EXPECT_EQ(mask_mod_pairs(natten), 1024 * 1024);
  EXPECT_GT(mask_mod_pairs(natten), kPlanInlinePairs);
  EXPECT_LE(mask_mod_pairs(read_case_file(example("zoo/tree-speculative.json")).spec), kPlanInlinePairs);
  EXPECT_EQ(mask_mod_pairs(c), 0);
  EXPECT_TRUE(plan_on_runner(natten));
  EXPECT_FALSE(plan_on_runner(c));
  // /sparse's indexer likewise (it scored every visible key in the frame of the edit: 128 ms a frame on
  // DeepSeek-V3.2's decode example); given indices run no indexer
  const CaseSpec dsa = read_case_file(example("deepseek-v32-dsa-decode.json")).spec;
  EXPECT_EQ(indexer_macs(dsa), int64_t{4096 + 5000 + 6656 + 8192} * 64 * 128);  // q_len 1 each, 64 heads x 128 dims
  EXPECT_TRUE(plan_on_runner(dsa));
  EXPECT_EQ(indexer_macs(read_case_file(example("dsa-index-bug.json")).spec), 0);
  EXPECT_FALSE(plan_on_runner(read_case_file(example("dsa-index-bug.json")).spec));
}

// The hover readout's score is the score_mod's, the same as its built-in twin's.
TEST(GuiItems, MaskReadoutAppliesTheScoreMod) {
  for (const char* name : {"zoo/softcap.json", "zoo/alibi.json"}) {
    SCOPED_TRACE(name);
    auto s = session_of(name);
    Session twin;
    twin.file.spec = s->spec();
    auto& a = twin.file.spec.attention;
    if (std::string(name) == "zoo/softcap.json")
      a.soft_cap = 30.0;
    else
      a.alibi = true;
    a.score_mod.reset();
    twin.plan = make_plan(twin.spec());
    for (int h : {0, 3})
      for (auto [q, k] : {std::pair{300, 10}, std::pair{300, 299}, std::pair{511, 400}}) {
        const Readout r = mask_readout(*s, 0, h, q, k), t = mask_readout(twin, 0, h, q, k);
        EXPECT_NEAR(r.score, t.score, 1e-9 * std::max(1.0, std::abs(t.score))) << h << " " << q << " " << k;
        EXPECT_EQ(r.score_mod, *s->spec().attention.score_mod);
        EXPECT_TRUE(t.score_mod.empty());
      }
    // the probabilities of a row, from the score_mod's score and the reference's LSE, sum to 1
    double sum = 0;
    for (int k = 0; k < 512; ++k) {
      const Readout x = mask_readout(*s, 0, 1, 200, k);
      if (x.allowed) {
        ASSERT_TRUE(x.has_prob);
        sum += x.prob;
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-4);
  }
  EXPECT_EQ(mask_readout(*session_of("zoo/natten-2d.json"), 0, 0, 40, 40).mask_mod,
            *read_case_file(example("zoo/natten-2d.json")).spec.attention.mask_mod);
}

TEST(GuiItems, ExprSummaryCountsBlocksAndSkippedTiles) {
  auto s = session_of("zoo/natten-2d.json");
  const ExprSummary e = build_expr_summary(*s, 0);
  const SplitPlan& sp = s->plan.split;
  ASSERT_TRUE(e.lists_tiles);
  EXPECT_EQ(e.items, sp.num_items);
  EXPECT_EQ(e.listed_tiles, static_cast<int64_t>(sp.item_tiles.size()));
  int64_t range = 0;
  for (const auto& it : sp.items)
    for (int k = it.kv_begin; k < it.kv_end; k += kKvTile) ++range;
  EXPECT_EQ(e.range_tiles, range);
  EXPECT_LT(e.listed_tiles, e.range_tiles / 2);  // a 7 x 7 neighbourhood skips most tiles
  EXPECT_EQ(e.full + e.partial + e.empty, s->plan.blocks.full + s->plan.blocks.partial + s->plan.blocks.empty);
  EXPECT_EQ(e.req_empty, e.empty);  // one request
  EXPECT_DOUBLE_EQ(e.sparsity, s->plan.blocks.sparsity());
  EXPECT_GT(e.sparsity, 0.5);
  ASSERT_FALSE(e.expr_lines.empty());
  EXPECT_EQ(e.expr_lines[0], "mask_mod: " + *s->spec().attention.mask_mod);
  ASSERT_EQ(e.plan_lines.size(), 2u);
  EXPECT_NE(e.plan_lines[1].find("tiles are skipped"), std::string::npos) << e.plan_lines[1];

  // two requests: their own counts add up to the batch's
  auto d = session_of("zoo/documents.json");
  const ExprSummary d0 = build_expr_summary(*d, 0), d1 = build_expr_summary(*d, 1);
  EXPECT_EQ(d0.req_full + d1.req_full, d0.full);
  EXPECT_EQ(d0.req_partial + d1.req_partial, d0.partial);
  EXPECT_EQ(d0.req_empty + d1.req_empty, d0.empty);

  // no expression: no expression lines, and the items visit every tile of their ranges
  const ExprSummary plain = build_expr_summary(*session_of("prefix-lm.json"), 0);
  EXPECT_TRUE(plain.expr_lines.empty());
  EXPECT_FALSE(plain.lists_tiles);
  EXPECT_EQ(plain.listed_tiles, plain.range_tiles);
  EXPECT_GT(plain.range_tiles, 0);
}

// --- screenshots under Xvfb ---

namespace {

struct Image {
  int w = 0, h = 0;
  std::vector<unsigned char> px;
  const unsigned char* at(int x, int y) const { return px.data() + (static_cast<size_t>(y) * w + x) * 4; }
};

bool shoot(const std::string& case_file, const std::string& tab, Image* img, std::string* log) {
  attnscope::testing::GuiShot s =
      attnscope::testing::gui_screenshot(ATTNSCOPE_GUI, case_file + " --size 1280x800 --tab " + tab, "gui_" + tab);
  *log = s.log;
  img->w = s.w, img->h = s.h, img->px = std::move(s.px);
  return s.rc == 0 && !img->px.empty();
}

// Distinct colours (quantised) in the panel area right of the sidebar.
int colours_in_panel(const Image& img) {
  std::set<int> c;
  for (int y = 60; y < img.h - 40; y += 3)
    for (int x = img.w * 35 / 100; x < img.w - 10; x += 3) {
      const unsigned char* p = img.at(x, y);
      c.insert((p[0] >> 4) << 8 | (p[1] >> 4) << 4 | (p[2] >> 4));
    }
  return static_cast<int>(c.size());
}

int64_t count(const Image& img, bool (*pred)(const unsigned char*)) {
  int64_t n = 0;
  for (int y = 0; y < img.h; ++y)
    for (int x = img.w * 35 / 100; x < img.w; ++x) n += pred(img.at(x, y));
  return n;
}

bool yellow(const unsigned char* p) { return p[0] > 230 && p[1] > 200 && p[2] < 80; }

}  // namespace

// One tab and the case it is shot on; printed by value in gtest's messages (not as two pointers).
struct Shot {
  const char* tab;
  const char* file;
};
void PrintTo(const Shot& s, std::ostream* os) { *os << s.tab << " on " << s.file; }

class Screenshot : public ::testing::TestWithParam<Shot> {};

TEST_P(Screenshot, TabRendersItsContent) {
  if (!attnscope::testing::have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const auto [tab, file] = GetParam();
  Image img;
  std::string log;
  ASSERT_TRUE(shoot(example(file), tab, &img, &log)) << log;
  EXPECT_EQ(img.w, 1280);
  EXPECT_EQ(img.h, 800);
  EXPECT_NE(log.find(std::string("tab ") + tab), std::string::npos) << log;
  // the printed frame figures add up: the average is not above the maximum
  double avg = -1, mx = -1;
  const auto at = log.find("frame time avg ");
  ASSERT_NE(at, std::string::npos) << log;
  ASSERT_EQ(std::sscanf(log.c_str() + at, "frame time avg %lf ms, max %lf ms", &avg, &mx), 2) << log;
  EXPECT_LE(avg, mx) << log;
  // a blank or broken render is one or two flat colours; every populated tab has several and
  // covers a good share of the panel with non-background pixels
  EXPECT_GT(colours_in_panel(img), 6) << tab;
  EXPECT_GT(count(img, [](const unsigned char* p) { return p[0] + p[1] + p[2] > 120; }), 20000) << tab << ": panel nearly empty";
  const std::string t = tab;
  // saturated colours: page owners, work-item cells, progress bars
  auto vivid = [](const unsigned char* p) { return std::max({p[0], p[1], p[2]}) - std::min({p[0], p[1], p[2]}) > 90; };
  if (t == "pages" || t == "split" || t == "timing" || t == "sweep" || t == "engine") {
    EXPECT_GT(count(img, vivid), 1500) << t;
  }
  if (t == "mask") {
    EXPECT_GT(count(img, yellow), 5000) << "the allowed region of the mask";
  }
  if (t == "softmax") {
    EXPECT_GT(count(img, yellow), 800) << "the m / d / logit / probability plots";
  }
  if (t == "local") {
    EXPECT_GT(count(img, yellow), 500) << "the virtual-batch diagrams";
  }
  if (t == "diff") {
    EXPECT_GT(count(img, [](const unsigned char* p) { return p[1] > 120 && p[0] < 150 && p[2] < 160 && p[2] > 60; }), 2000)
        << "the error heatmap's colour ramp";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryTab, Screenshot,
                         ::testing::Values(Shot{"mask", "llama4-chunked-local.json"}, Shot{"pages", "poisoned-pages.json"},
                                           Shot{"local", "llama4-chunked-local.json"}, Shot{"split", "gqa-decode-long.json"},
                                           Shot{"softmax", "gemma2-window-softcap.json"},
                                           Shot{"sweep", "gqa-decode-long.json --sweep '/requests/*/kv_len=64:4096:x4'"},
                                           Shot{"diff", "prefix-lm.json"}, Shot{"timing", "prefix-lm.json"},
                                           Shot{"engine", "llama4-chunked-local.json"}),
                         [](const auto& info) { return std::string(info.param.tab); });

// A mask zoo case: the heatmap, and the mask_mod printed above it in its own colour.
TEST(Gui, ZooMaskTabShowsTheExpression) {
  if (!attnscope::testing::have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  Image img;
  std::string log;
  ASSERT_TRUE(shoot(example("zoo/dilated-window.json"), "mask", &img, &log)) << log;
  EXPECT_GT(count(img, yellow), 2000) << "the allowed region of the mask";
  const int64_t expr_text =
      count(img, [](const unsigned char* p) { return std::abs(p[0] - 140) < 12 && std::abs(p[1] - 217) < 12 && p[2] > 240; });
  EXPECT_GT(expr_text, 300) << "the mask_mod line above the map";
}

TEST(Gui, WithoutADisplayItSaysSoAndPointsToTheCli) {
  const std::string cmd = "env -u DISPLAY -u WAYLAND_DISPLAY " + std::string(ATTNSCOPE_GUI) + " > /tmp/attnscope_nodisp.log 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream lf("/tmp/attnscope_nodisp.log");
  const std::string out((std::istreambuf_iterator<char>(lf)), {});
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("no display"), std::string::npos) << out;
  EXPECT_NE(out.find("attnscope-cli"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

// The planning-cost view's chart: one series per timed column over the batch sizes, log x, log y when the
// times span a decade; an invalid size is counted, not drawn.
TEST(GuiItems, PlanCostPlotHasASeriesPerPlanner) {
  PlanCostReport r;
  r.columns = {{"split:flashinfer", ""}, {"make_plan", ""}};
  r.points.resize(3);
  r.points[0].batch = 1, r.points[0].us = {2.0, 15.0}, r.points[0].notes = {"", ""};
  r.points[1].batch = 64, r.points[1].us = {9.0, -1.0}, r.points[1].notes = {"", "threw"};
  r.points[2].batch = 1024, r.points[2].error = "too big";
  const SweepPlot p = build_plan_cost_plot(r);
  ASSERT_EQ(p.series.size(), 2u);
  EXPECT_EQ(p.series[0].x, (std::vector<double>{1, 64}));
  EXPECT_EQ(p.series[1].x, (std::vector<double>{1})) << "a column not timed at a size has no point there";
  EXPECT_EQ(p.invalid, 1);
  EXPECT_TRUE(p.log_x);
  EXPECT_FALSE(p.log_y) << "2 .. 15 us is under a decade";
  EXPECT_EQ(p.y_label, "host us per call");
  EXPECT_FALSE(p.x_ticks.empty());
}
