// GUI against hostile input (issue 32): files that are not regular files, huge or malformed saved
// sweeps, window sizes and screenshot paths that cannot work, sweep ticks that never ended; and
// the readings that looked like bugs (chunk restarts, not-compared cells, sampled-reference
// TFLOP/s, a virtual-batch line without local chunking, clipped text). No window needed, except
// the Xvfb runs at the end.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "case_json.h"
#include "desktop.h"
#include "draw/colormap.h"
#include "draw/text_fit.h"
#include "edit_script.h"
#include "explain.h"
#include "file_input.h"
#include "panels/diff_panel.h"
#include "panels/mask_panel.h"
#include "panels/softmax_panel.h"
#include "panels/sweep_panel.h"
#include "panels/timing_panel.h"
#include "xvfb_run.h"

using namespace attnscope;
using namespace attnscope::gui;
namespace fs = std::filesystem;

namespace {

std::string example(const std::string& name) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/examples/" + name; }

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("attnscope_gui_inputs_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d / name;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// A report of n points of one numeric path, two backends; y follows x with noise and one spike.
SweepReport make_report(size_t n, double x0 = 1, double dx = 1) {
  SweepReport r;
  r.case_name = "synthetic";
  r.path = "/requests/*/kv_len";
  r.base = nlohmann::json::object();
  for (size_t i = 0; i < n; ++i) {
    SweepPoint p;
    p.value = x0 + dx * static_cast<double>(i);
    p.tile = 64, p.chunk_pages = 16, p.items = 3;
    for (const char* b : {"cpu.tiled", "cpu.reference"}) {
      SweepBackend be;
      be.backend = b;
      be.status = "ok";
      be.digest = "0123456789abcdef";
      be.host_ms = 1 + 0.001 * static_cast<double>(i % 97) + (i == n / 3 ? 50 : 0);
      be.tflops = 0.01;
      p.backends.push_back(be);
    }
    r.points.push_back(p);
  }
  return r;
}

// Runs f on a thread; false when it has not returned within `seconds` (the thread is left behind).
template <class F>
bool returns_within(double seconds, F f) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([done, f] {
    f();
    done->store(true);
  }).detach();
  const auto t0 = std::chrono::steady_clock::now();
  while (!done->load() && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return done->load();
}

std::string load_error(const std::string& path) {
  try {
    load_sweep_report(path);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// The chart's tick builder added a step of 2 to 1e17 (whose rounding unit is 16) until memory ran out.
TEST(GuiInputs, SweepTicksEndWhenTheStepIsBelowTheRoundingUnit) {
  std::vector<double> at;
  std::vector<std::string> label;
  ASSERT_TRUE(returns_within(10, [&] { sweep_ticks(1e17, 1e17 + 16, false, &at, &label); }));
  EXPECT_GE(at.size(), 1u);
  EXPECT_LE(at.size(), 50u);
  EXPECT_EQ(at.size(), label.size());
  for (size_t i = 1; i < label.size(); ++i) EXPECT_NE(label[i], label[i - 1]);
  // the whole plot of such a sweep, as --sweep-report draws it
  SweepReport r = make_report(2, 1e17, 16);
  SweepPlot p;
  ASSERT_TRUE(returns_within(10, [&] { p = build_sweep_plot(r, 0); }));
  EXPECT_LE(p.x_ticks.size(), 50u);
  EXPECT_LE(p.y_ticks.size(), 50u);
  // ordinary ranges keep their 1-2-5 ticks
  sweep_ticks(0, 100, false, &at, &label);
  EXPECT_EQ(label.front(), "0");
  EXPECT_EQ(label.back(), "100");
  EXPECT_GE(at.size(), 4u);
  sweep_ticks(0, 300, true, &at, &label);  // 300 decades: a label every few, not 300
  EXPECT_LE(at.size(), 30u);
}

// 200,000 points were drawn (and their labels rebuilt) every frame: the series are decimated for
// drawing, keeping each bucket's extremes so a spike still shows.
TEST(GuiInputs, SweepPlotDecimatesALargeReport) {
  const SweepReport r = make_report(200000);
  const SweepPlot p = build_sweep_plot(r, 0, 2000);
  ASSERT_EQ(p.series.size(), 2u);
  for (const auto& s : p.series) {
    EXPECT_EQ(s.ran, 200000);
    EXPECT_LE(s.x.size(), 2000u + 4u);
    EXPECT_GE(s.x.size(), 500u);
    double hi = 0;
    for (double y : s.y) hi = std::max(hi, y);
    EXPECT_GT(hi, 50) << "the spike at point " << 200000 / 3 << " survives decimation";
    EXPECT_EQ(s.point.front(), 0);
    EXPECT_EQ(s.point.back(), 199999);
    for (size_t k = 1; k < s.x.size(); ++k) EXPECT_LE(s.x[k - 1], s.x[k]);
  }
  // a small report is drawn whole
  const SweepPlot small = build_sweep_plot(make_report(50), 0, 4000);
  EXPECT_EQ(small.series[0].x.size(), 50u);
}

// --sweep-report printed raw json.exception text without the file's name.
TEST(GuiInputs, SweepReportErrorsNameTheFileAndTheProblem) {
  const fs::path empty = scratch("empty.json"), bad = scratch("bad.json"), arr = scratch("arr.json"),
                 other = scratch("other.json"), point = scratch("point.json"), scalar = scratch("scalar.json");
  write(empty, "");
  write(bad, "{\"schema\": \"attnscope/sweep@1\", \"points\": [ {");
  write(arr, "[1, 2]");
  write(other, "{\"schema\": \"attnscope/case@1\"}");
  nlohmann::json j = nlohmann::json::parse(sweep_to_json(make_report(3)).dump());
  j["points"][1].erase("plan");
  write(point, j.dump());
  j = nlohmann::json::parse(sweep_to_json(make_report(3)).dump());
  j["points"][2] = 7;
  write(scalar, j.dump());
  struct Want {
    fs::path file;
    std::string says;
  };
  for (const Want& w :
       {Want{empty, "empty"}, Want{bad, "not valid JSON: line 1, column"}, Want{arr, "/: not an object"},
        Want{other, "/schema: \"attnscope/case@1\" is not attnscope/sweep@1"}, Want{point, "/points/1/plan: missing"},
        Want{scalar, "/points/2: not an object"}, Want{scratch("absent.json"), "no such file"},
        Want{"/dev/zero", "not a regular file (a character device)"}, Want{fs::temp_directory_path(), "is a directory"}}) {
    const std::string e = load_error(w.file.string());
    EXPECT_EQ(e.rfind(w.file.string() + ": ", 0), 0u) << e;
    EXPECT_NE(e.find(w.says), std::string::npos) << e;
    EXPECT_EQ(e.find("json.exception"), std::string::npos) << e;
  }
}

TEST(GuiInputs, SweepReportRoundTripsPointByPoint) {
  const SweepReport r = make_report(7);
  const fs::path f = scratch("ok.json");
  write(f, sweep_to_json(r).dump(2));
  const SweepReport back = load_sweep_report(f.string());
  EXPECT_EQ(back.case_name, r.case_name);
  EXPECT_EQ(back.path, r.path);
  ASSERT_EQ(back.points.size(), r.points.size());
  for (size_t i = 0; i < r.points.size(); ++i) {
    EXPECT_EQ(back.points[i].value, r.points[i].value);
    ASSERT_EQ(back.points[i].backends.size(), 2u);
    EXPECT_DOUBLE_EQ(back.points[i].backends[0].host_ms, r.points[i].backends[0].host_ms);
  }
}

// A report of 200,000 points loads in bounded time (the memory is checked on the program, below).
TEST(GuiInputs, ALargeSweepReportLoads) {
  const fs::path f = scratch("large.json");
  write(f, sweep_to_json(make_report(200000)).dump(2));
  const auto t0 = std::chrono::steady_clock::now();
  const SweepReport r = load_sweep_report(f.string());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.points.size(), 200000u);
  EXPECT_LT(s, 60) << "seconds to load";
  std::printf("load_sweep_report: %.0f MB, 200000 points: %.2f s\n", static_cast<double>(fs::file_size(f)) / 1e6, s);
  fs::remove(f);
}

// A settings last_case that was a FIFO froze the GUI in open(); /dev/zero was read until bad_alloc.
TEST(GuiInputs, CaseFilesAreRegularFilesOfBoundedSize) {
  const fs::path fifo = scratch("case.fifo");
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string why;
  ASSERT_TRUE(returns_within(5, [&] {
    try {
      load_case_file(fifo.string());
    } catch (const std::exception& e) {
      why = e.what();
    }
  })) << "opening a FIFO blocked";
  EXPECT_NE(why.find("(a FIFO)"), std::string::npos) << why;
  EXPECT_EQ(why.rfind(fifo.string() + ": ", 0), 0u) << why;
  why.clear();
  ASSERT_TRUE(returns_within(5, [&] {
    try {
      load_case_file("/dev/zero");
    } catch (const std::exception& e) {
      why = e.what();
    }
  }));
  EXPECT_NE(why.find("character device"), std::string::npos) << why;
  // a sparse file past the limit is refused by its size, not read
  const fs::path big = scratch("big.json");
  { std::ofstream(big) << "{"; }
  fs::resize_file(big, kMaxCaseBytes + 1);
  std::string text;
  EXPECT_NE(read_regular_file(big.string(), kMaxCaseBytes, &text).find("MiB allowed"), std::string::npos);
  EXPECT_TRUE(text.empty());
  fs::remove(big);
  fs::remove(fifo);
  // a real case still opens
  EXPECT_EQ(load_case_file(example("prefix-lm.json")).spec.name, "prefix-lm");
}

TEST(GuiInputs, WindowSizeAndScreenshotPathAreCheckedFirst) {
  int w = 0, h = 0;
  EXPECT_NE(parse_window_size("30000x30000", &w, &h).find("at most 8192x8192"), std::string::npos);
  EXPECT_NE(parse_window_size("100x100", &w, &h).find("at least"), std::string::npos);
  EXPECT_NE(parse_window_size("1280x800px", &w, &h).find("WxH"), std::string::npos);
  EXPECT_EQ(parse_window_size("1280x800", &w, &h), "");
  EXPECT_EQ(w, 1280);
  EXPECT_EQ(h, 800);
  EXPECT_EQ(check_screenshot_path(fs::temp_directory_path().string()), "is a directory");
  EXPECT_NE(check_screenshot_path("/proc/attnscope.png"), "");
  EXPECT_NE(check_screenshot_path("/nonexistent-folder/x.png").find("does not exist"), std::string::npos);
  const fs::path dir = scratch("shots");
  fs::create_directories(dir);
  EXPECT_EQ(check_screenshot_path((dir / "x.png").string()), "");
  EXPECT_TRUE(fs::is_empty(dir)) << "the probe is removed";
}

TEST(GuiInputs, ElideCutsWholeCharactersAndSaysSo) {
  auto mono = [](const std::string& s) { return 7.f * static_cast<float>(s.size()); };
  EXPECT_EQ(elide("short", 100, mono), "short");
  const std::string cut = elide("0 1 2 3 4 5 6 7 8 9 10 11 12 13", 70, mono);
  EXPECT_LE(mono(cut), 70);
  EXPECT_EQ(cut.substr(cut.size() - 3), "...");
  EXPECT_NE(cut[cut.size() - 4], ' ');
  const std::string u = elide("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 7 * 6, mono);  // 2-byte characters
  EXPECT_EQ(u, "\xc3\xa9...");
}

// Rows a sampled reference never computed were drawn near-black, inside the ramp's dark end.
TEST(GuiInputs, DiffMarksNotComparedRowsApart) {
  auto s = run_session(read_case_file(example("mixed-prefill-decode-fragmented.json")));
  ASSERT_TRUE(s->sample_rows.has_value());
  int shown = -1;
  for (size_t i = 0; i < s->diffs.size(); ++i)
    if (s->diffs[i].available && (s->diffs[i].baseline == "cpu.reference" || s->diffs[i].backend == "cpu.reference"))
      shown = static_cast<int>(i);
  ASSERT_GE(shown, 0);
  const DiffItems it = build_diff_items(*s, shown);
  const int64_t rows = s->spec().total_q() * s->spec().num_qo_heads;
  EXPECT_GT(it.not_compared, 0);
  EXPECT_LT(it.not_compared, rows);
  int64_t compared = 0;
  for (float h : it.histogram) compared += static_cast<int64_t>(h);
  EXPECT_EQ(compared + it.not_compared, rows);
  // a neutral mid grey, while every colour of the ramp is saturated
  const Rgba g = diff_cell_colour(NAN, -8, 0);
  EXPECT_EQ(g.r, g.g);
  EXPECT_EQ(g.g, g.b);
  EXPECT_GT(g.r, 80);
  EXPECT_LT(g.r, 180);
  for (int i = 0; i <= 100; ++i) {
    const Rgba c = diff_cell_colour(-8 + 8 * i / 100.f, -8, 0);
    EXPECT_GE(std::max({c.r, c.g, c.b}) - std::min({c.r, c.g, c.b}), 50) << i;
  }
}

// cpu.reference's TFLOP/s divided the whole case's FLOPs by a run over 16 sampled rows.
TEST(GuiInputs, TimingCountsTheWorkEachRunDid) {
  auto s = run_session(read_case_file(example("mixed-prefill-decode-fragmented.json")));
  const TimingItems it = build_timing_items(*s);
  bool saw_sampled = false, saw_full = false;
  for (const auto& row : it.rows) {
    const Result* r = s->result(row.backend);
    ASSERT_NE(r, nullptr);
    if (!r->row_valid.empty()) {
      saw_sampled = true;
      EXPECT_TRUE(row.sampled);
      EXPECT_LT(row.flops, 0.5 * it.flops) << row.backend;
      EXPECT_GT(row.flops, 0) << row.backend;
    } else {
      saw_full = true;
      EXPECT_DOUBLE_EQ(row.flops, it.flops) << row.backend;
    }
    if (row.host_ms > 0 && !row.device_timed) {
      EXPECT_NEAR(row.tflops, row.flops / (row.host_ms * 1e-3) / 1e12, 1e-9 + 1e-9 * row.tflops);
    }
  }
  EXPECT_TRUE(saw_sampled);
  EXPECT_TRUE(saw_full);
}

TEST(GuiInputs, BenchmarkIsOfferedOnlyWhereAGpuCanRunIt) {
  auto s = run_session(read_case_file(example("prefix-lm.json")));
  Session none = *s, gpu_no_backend = *s, ready = *s;
  none.env.devices.clear();
  none.env.device_error = "no NVIDIA GPU or driver found";
  none.file.spec.backends.push_back("cuda.flash");
  EXPECT_NE(bench_hint(none).find("No GPU here (no NVIDIA GPU or driver found)"), std::string::npos) << bench_hint(none);
  EXPECT_EQ(bench_hint(none).find("add cuda.flash"), std::string::npos);
  gpu_no_backend.env.devices = {DeviceInfo{}};
  EXPECT_NE(bench_hint(gpu_no_backend).find("add cuda.flash"), std::string::npos);
  ready.env.devices = {DeviceInfo{}};
  ready.file.spec.backends.push_back("cuda.flash");
  EXPECT_EQ(bench_hint(ready), "");
}

// A red "virtual batch" line lay along row 0 of every case, local chunking or not.
TEST(GuiInputs, VirtualBatchLinesOnlyBetweenVirtualBatches) {
  for (const char* f : {"prefix-lm.json", "gqa-decode-long.json", "mixed-prefill-decode-fragmented.json"}) {
    auto s = run_session(read_case_file(example(f)));
    for (int r = 0; r < static_cast<int>(s->spec().requests.size()); ++r)
      EXPECT_TRUE(build_mask_items(*s, r).unit_starts.empty()) << f << " request " << r;
  }
  auto s = run_session(read_case_file(example("llama4-chunked-local.json")));
  bool any = false;
  for (int r = 0; r < static_cast<int>(s->spec().requests.size()); ++r)
    for (int q : build_mask_items(*s, r).unit_starts) {
      any = true;
      EXPECT_GT(q, 0);
    }
  EXPECT_TRUE(any);
}

// m "dropped" at a chunk boundary (4.0 -> 1.82) with nothing to say that a new chunk starts its own state.
TEST(GuiInputs, SoftmaxMarksWhereAChunkStartsItsOwnState) {
  const CaseSpec c = read_case_file(example("gemma2-window-softcap.json")).spec;
  const SoftmaxTrace t = explain_case(c, 0, 0, 0);
  ASSERT_TRUE(t.split);
  const SoftmaxView v = build_softmax_view(t, -1);
  ASSERT_FALSE(v.breaks.empty());
  int chunks = 1;
  for (size_t i = 1; i < t.steps.size(); ++i) chunks += t.steps[i].chunk != t.steps[i - 1].chunk;
  int chunk_breaks = 0;
  for (const auto& b : v.breaks) {
    ASSERT_GT(b.at, 0);
    ASSERT_LT(b.at, static_cast<int>(t.steps.size()));
    const bool chunk = t.steps[b.at].chunk != t.steps[b.at - 1].chunk;
    EXPECT_TRUE(chunk || t.steps[b.at].way != t.steps[b.at - 1].way);
    chunk_breaks += chunk;
    EXPECT_EQ(b.label, chunk ? "chunk " + std::to_string(t.steps[b.at].chunk) : "way " + std::to_string(t.steps[b.at].way));
  }
  EXPECT_EQ(chunk_breaks, chunks - 1);
  // the first step's view holds no break yet
  EXPECT_TRUE(build_softmax_view(t, 0).breaks.empty());
}

TEST(GuiInputs, EditLatencyPercentilesAndDragSpec) {
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 50), 2);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2);  // nearest rank
  EXPECT_DOUBLE_EQ(percentile({5, 1, 4, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, 95), 19);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  std::string why;
  const auto d = parse_drag("/attention/window=64:4096", &why);
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(d->path, "/attention/window");
  EXPECT_EQ(d->from, 64);
  EXPECT_EQ(d->to, 4096);
  EXPECT_TRUE(d->integer);
  EXPECT_FALSE(parse_drag("/data/std=0.5:2", &why)->integer);
  EXPECT_FALSE(parse_drag("window=1:2", &why));
  EXPECT_FALSE(parse_drag("/attention/window=a:2", &why));
  EXPECT_FALSE(parse_drag("/attention/window=64", &why));
}

// --- the program itself, under Xvfb ---

namespace {

using attnscope::testing::have_xvfb;

int run_gui(const std::string& args, std::string* out, const std::string& env = "", const char* gui = ATTNSCOPE_GUI) {
  const fs::path log = scratch("gui.log");
  const std::string cmd = attnscope::testing::under_xvfb(gui, args, env) + " > " + log.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  out->assign(std::istreambuf_iterator<char>(in), {});
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

}  // namespace

TEST(GuiRuns, BadOptionsExitTwoNamingTheOption) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const fs::path empty = scratch("empty-report.json");
  write(empty, "");
  struct Want {
    std::string args, says;
  };
  const std::string shot = " --screenshot " + scratch("x.png").string();
  for (const Want& w : {Want{"--size 30000x30000" + shot, "--size 30000x30000 must be at most"},
                        Want{"--screenshot " + fs::temp_directory_path().string(), "is a directory"},
                        Want{"--screenshot /proc/attnscope.png", "--screenshot /proc/attnscope.png: "},
                        Want{"--sweep-report " + empty.string() + shot, empty.string() + ": the file is empty"},
                        Want{"--sweep-report /dev/zero" + shot, "/dev/zero: is not a regular file"},
                        Want{"/dev/zero" + shot, "/dev/zero: is not a regular file"}}) {
    std::string out;
    EXPECT_EQ(run_gui(w.args, &out), 2) << w.args << "\n" << out;
    EXPECT_NE(out.find(w.says), std::string::npos) << w.args << "\n" << out;
    EXPECT_EQ(out.find("json.exception"), std::string::npos) << out;
    EXPECT_EQ(out.find("terminate"), std::string::npos) << out;
  }
}

// The sweep whose chart never finished its ticks: now drawn, and the screenshot written.
TEST(GuiRuns, SweepReportOfNearlyEqualHugeValuesRenders) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const fs::path f = scratch("seeds.json"), png = scratch("seeds.png");
  SweepReport r = make_report(2, 100000000000000000.0, 16);
  r.path = "/data/seed";
  write(f, sweep_to_json(r).dump());
  std::string out;
  EXPECT_EQ(
      run_gui(example("prefix-lm.json") + " --sweep-report " + f.string() + " --tab sweep --screenshot " + png.string(), &out), 0)
      << out;
  EXPECT_TRUE(fs::exists(png)) << out;
}

// Screenshot runs wrote ~/.config/attnscope/recent.txt.
TEST(GuiRuns, ScreenshotsLeaveTheUsersFilesAlone) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const fs::path home = scratch("home");
  fs::remove_all(home);
  fs::create_directories(home);
  std::string out;
  EXPECT_EQ(run_gui(example("prefix-lm.json") + " --tab pages --screenshot " + scratch("p.png").string(), &out,
                    "HOME=" + home.string()),
            0)
      << out;
  EXPECT_FALSE(fs::exists(home / ".config/attnscope/recent.txt")) << out;
  EXPECT_FALSE(fs::exists(home / ".config/attnscope/settings.json")) << out;
}

// --edit-latency: per edit, p50 / p95, and each stage with its run / reused counts; no debounce.
TEST(GuiRuns, EditLatencyPrintsPercentilesAndStages) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  std::string out;
  ASSERT_EQ(run_gui(example("prefix-lm.json") + " --tab timing --edit-latency 3 --screenshot " + scratch("l.png").string(), &out),
            0)
      << out;
  double p50 = 0, p95 = 0, e1 = 0, e2 = 0, e3 = 0;
  const auto at = out.find("edit to results");
  ASSERT_NE(at, std::string::npos) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + out.find("p50 ", at), "p50 %lf ms, p95 %lf ms", &p50, &p95), 2) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + out.find("per edit:"), "per edit: %lf %lf %lf ms", &e1, &e2, &e3), 3) << out;
  EXPECT_GT(std::min({e1, e2, e3}), 0);
  EXPECT_LE(p50, p95);
  // every edit toggles the data seed: each backend ran for each edit, none was reused
  EXPECT_NE(out.find("cpu.reference "), std::string::npos) << out;
  EXPECT_NE(out.find("(3 runs, 0 reused)"), std::string::npos) << out;
  EXPECT_NE(out.find("plan (in the frame of the edit)"), std::string::npos) << out;
  EXPECT_EQ(out.find("debounce"), std::string::npos) << "no timer between the edit and the run";
  EXPECT_NE(out.find("screenshot "), std::string::npos) << out;
}

// --drag: edits at 60 Hz along a range, results per second, and a refused path exits 2 naming it.
TEST(GuiRuns, DragStepsAPathAndCountsResultUpdates) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  std::string out;
  ASSERT_EQ(
      run_gui(example("gqa-decode-long.json") + " --tab mask --edit-latency 12 --drag /attention/window=64:4096 --screenshot " +
                  scratch("d.png").string(),
              &out),
      0)
      << out;
  int edits = 0, updates = 0;
  const auto at = out.find("drag /attention/window 64 -> 4096: ");
  ASSERT_NE(at, std::string::npos) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + at, "drag /attention/window 64 -> 4096: %d edits at 60 Hz", &edits), 1) << out;
  EXPECT_EQ(edits, 12);
  ASSERT_NE(out.find(" result updates in "), std::string::npos) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + out.rfind(';', out.find(" result updates in ")) + 1, " %d", &updates), 1) << out;
  EXPECT_GE(updates, 1);
  EXPECT_LE(updates, 12);
  std::string bad;
  EXPECT_EQ(run_gui(example("gqa-decode-long.json") + " --edit-latency 2 --drag /attention/windw=1:2 --screenshot " +
                        scratch("e.png").string(),
                    &bad),
            2)
      << bad;
  EXPECT_NE(bad.find("windw"), std::string::npos) << bad;
}

// An 80 MB report with 200,000 points took the GUI 17-27 s and 1.5 GB to open. Read point by
// point, drawn decimated, the whole program's peak stays near the file's size.
TEST(GuiRuns, ALargeSweepReportOpensInModestMemory) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const fs::path f = scratch("large-report.json"), png = scratch("large.png");
  write(f, sweep_to_json(make_report(200000)).dump(2));
  const double mb = static_cast<double>(fs::file_size(f)) / 1e6;
  std::string out;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(
      run_gui(example("prefix-lm.json") + " --sweep-report " + f.string() + " --tab sweep --screenshot " + png.string(), &out), 0)
      << out;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // the program's own peak (VmHWM), printed with the frame times
  const auto at = out.find("peak resident ");
  ASSERT_NE(at, std::string::npos) << out;
  const double peak_mb = std::atof(out.c_str() + at + 14);
  EXPECT_GT(peak_mb, 0) << out;
  EXPECT_LT(peak_mb, 200 + mb) << "peak resident " << peak_mb << " MiB for a " << mb << " MB report\n" << out;
  std::printf("attnscope --sweep-report (%.0f MB, 200000 points): %.1f s to the screenshot, peak resident %.0f MiB\n", mb, s,
              peak_mb);
  fs::remove(f);
}

// No exception may end the GUI: a view that throws is turned off with its error shown, the rest
// goes on (here the screenshot is still written; screenshot mode then exits 1).
TEST(GuiRuns, AViewThatThrowsIsTurnedOffNotTheProgram) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const fs::path png = scratch("throw.png");
  fs::remove(png);
  std::string out;
  EXPECT_EQ(run_gui(example("prefix-lm.json") + " --tab mask --screenshot " + png.string(), &out,
                    "ATTNSCOPE_TEST_THROW_IN_VIEW=mask", ATTNSCOPE_GUI_FAULTS),
            1)
      << out;
  EXPECT_NE(out.find("Internal error in the Mask view: test fault"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(png)) << out;
  EXPECT_EQ(out.find("terminate"), std::string::npos) << out;
  EXPECT_EQ(out.find("Assertion"), std::string::npos) << out;
  // the product GUI reads no test switch
  EXPECT_EQ(
      run_gui(example("prefix-lm.json") + " --tab mask --screenshot " + png.string(), &out, "ATTNSCOPE_TEST_THROW_IN_VIEW=mask"),
      0)
      << out;
}

// A case whose full reference is over the live run's budget (set low here through attnscope-faults'
// hook): each edit's sampled results reach the screen first, then every row's; the benchmark times both.
TEST(GuiRuns, ALargeReferenceShowsSampledResultsFirst) {
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run is not installed (scripts/setup-deps.sh installs it)";
  const std::string args = example("prefix-lm.json") + " --tab timing --edit-latency 3 --screenshot " + scratch("s.png").string();
  std::string out;
  ASSERT_EQ(run_gui(args, &out, "ATTNSCOPE_TEST_REFERENCE_BUDGET=1", ATTNSCOPE_GUI_FAULTS), 0) << out;
  double full = 0, first = 0, p95 = 0;
  const auto at_full = out.find("edit to results"), at_first = out.find("edit to first results");
  ASSERT_NE(at_full, std::string::npos) << out;
  ASSERT_NE(at_first, std::string::npos) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + out.find("p50 ", at_full), "p50 %lf ms, p95 %lf ms", &full, &p95), 2) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + out.find("p50 ", at_first), "p50 %lf ms, p95 %lf ms", &first, &p95), 2) << out;
  EXPECT_GT(first, 0);
  EXPECT_LE(first, full) << "the sampled results come first";
  EXPECT_NE(out.find("cpu.reference (sampled) "), std::string::npos) << out;
  EXPECT_NE(out.find("compare (sampled) "), std::string::npos) << out;
  // the product's budget: this case runs every row at once
  ASSERT_EQ(run_gui(args, &out, "ATTNSCOPE_TEST_REFERENCE_BUDGET=1"), 0) << out;
  EXPECT_EQ(out.find("edit to first results"), std::string::npos) << out;
  EXPECT_EQ(out.find("(sampled)"), std::string::npos) << out;
}
