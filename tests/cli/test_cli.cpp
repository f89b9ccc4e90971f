// attnscope-cli as a user runs it: exit codes, error lines, JSON outputs, repro replay.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "case_json.h"
#include "cli_run.h"
#include "npy_check.h"
#include "sweep.h"

namespace fs = std::filesystem;

namespace {

using Out = attnscope::testing::CliOut;
using attnscope::testing::cli;

std::string src(const std::string& rel) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/" + rel; }

std::vector<std::string> examples() {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(src("examples")))
    if (e.path().extension() == ".json") v.push_back(e.path().string());
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST(Cli, EveryExampleValidatesPlansAndRuns) {
  const auto ex = examples();
  ASSERT_GE(ex.size(), 8u);
  for (const auto& path : ex) {
    SCOPED_TRACE(path);
    const Out v = cli("validate " + path);
    EXPECT_EQ(v.code, 0) << v.err;
    EXPECT_EQ(v.out.rfind("ok: ", 0), 0u);
    const Out p = cli("plan " + path);
    EXPECT_EQ(p.code, 0) << p.err;
    EXPECT_NE(p.out.find("SPLIT PLAN"), std::string::npos);
    const Out r = cli("run " + path);
    // an example that merges some backend's partials in a base not its own (/parallel/merge_base) shows
    // the base-mix bug: it fails, and only in the comparisons whose detail names the merge base
    if (const auto spec = attnscope::read_case_file(path).spec; spec.parallel && !spec.parallel->merge_base.empty()) {
      EXPECT_EQ(r.code, 1) << r.out;
      std::istringstream lines(r.out);
      int failed = 0;
      for (std::string line, prev; std::getline(lines, line); prev = line)
        if (line.rfind("    ", 0) == 0 && prev.size() >= 4 && prev.compare(prev.size() - 4, 4, "FAIL") == 0) {
          ++failed;
          EXPECT_NE(line.find("/parallel/merge_base"), std::string::npos) << line;
        }
      EXPECT_GT(failed, 0) << r.out;
      continue;
    }
    // 0, or 3 where a comparison needs a backend this machine cannot run (the GPU ones here)
    if (r.code == 3) {
      EXPECT_NE(r.out.find("NOT CHECKED"), std::string::npos) << r.out;
      EXPECT_TRUE(r.out.find("no CUDA device") != std::string::npos || r.out.find("not compiled") != std::string::npos) << r.out;
    } else {
      EXPECT_EQ(r.code, 0) << r.out << r.err;
    }
    EXPECT_NE(r.out.find("comparison"), std::string::npos) << "every example prints its comparisons";
    EXPECT_NE(r.out.find("PASS"), std::string::npos);
    EXPECT_EQ(r.out.find("FAIL"), std::string::npos);
  }
}

TEST(Cli, BrokenCasesExitTwoWithOneLineNamingThePath) {
  std::ifstream in(src("tests/data/broken/EXPECTED.tsv"));
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    const std::string file = line.substr(0, tab), want = line.substr(tab + 1);
    SCOPED_TRACE(file);
    for (const char* cmd : {"validate ", "run ", "plan "}) {
      const Out o = cli(cmd + src("tests/data/broken/" + file));
      EXPECT_EQ(o.code, 2);
      EXPECT_EQ(o.err.rfind("error: " + want, 0), 0u) << o.err;
      EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    }
    ++n;
  }
  EXPECT_GE(n, 10);
}

TEST(Cli, BadArgumentsExitTwo) {
  const std::string ex = src("examples/gqa-decode-long.json");
  for (const std::string& args : std::vector<std::string>{"frobnicate " + ex, "run", "run " + ex + " --no-such-flag",
                                                          "run " + ex + " --sample-rows x", "run " + ex + " --backends cpu.nope",
                                                          "invariance " + ex + " --planners nope", "run " + ex + " " + ex}) {
    const Out o = cli(args);
    EXPECT_EQ(o.code, 2) << args;
    EXPECT_EQ(o.err.rfind("error: ", 0), 0u) << args << ": " << o.err;
  }
}

TEST(Cli, JsonOutputsParse) {
  const std::string ex = src("examples/llama4-chunked-local.json");
  const Out p = cli("plan --json " + ex);
  ASSERT_EQ(p.code, 0);
  const auto j = nlohmann::json::parse(p.out);
  EXPECT_GT(j["virtual_batches"]["batches"].size(), 0u);
  EXPECT_TRUE(j["split"]["reasoning"].is_array());
  EXPECT_TRUE(j["block_map"]["text"].get<std::string>().rfind("BlockMask(", 0) == 0);
  const Out r = cli("run --json " + ex);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rj = nlohmann::json::parse(r.out);
  EXPECT_EQ(rj["schema"], "attnscope/report@1");
  EXPECT_FALSE(rj["failed"].get<bool>());
  EXPECT_GT(rj["comparisons"].size(), 0u);
  const Out d = cli("devices --json");
  EXPECT_EQ(d.code, 0);
  EXPECT_TRUE(nlohmann::json::parse(d.out).contains("devices"));
}

TEST(Cli, PlanCarriesFlashInfersOwnPlan) {
  // plan --json: library_plans.flashinfer is FlashInfer's PrefillSplitQOKVIndptr result with the
  // device it answered from, and its agreement with the model, field by field
  for (const char* ex : {"examples/gqa-decode-long.json", "examples/batch-invariance-fixed.json",
                         "examples/llama4-chunked-local.json", "examples/flash-attn-split-heuristic.json"}) {
    SCOPED_TRACE(ex);
    const Out p = cli("plan --json " + src(ex));
    ASSERT_EQ(p.code, 0) << p.err;
    const auto j = nlohmann::json::parse(p.out);
    ASSERT_TRUE(j.contains("library_plans"));
    const auto& f = j["library_plans"]["flashinfer"];
    const std::string line = f["agreement"]["line"].get<std::string>();
    EXPECT_EQ(line.rfind("FlashInfer's own planner", 0), 0u) << line;
    const Out t = cli(std::string("plan ") + src(ex));
    ASSERT_EQ(t.code, 0);
    EXPECT_NE(t.out.find(line), std::string::npos) << "the text plan prints the same agreement line";
    if (!f["compiled"].get<bool>() || j["split"]["planner"] == "flash_attn") {
      EXPECT_FALSE(f["ran"].get<bool>());
      EXPECT_TRUE(f["agreement"]["agrees"].is_null());
      EXPECT_NE(line.find("not run"), std::string::npos) << line;
      continue;
    }
    ASSERT_TRUE(f["available"].get<bool>()) << f["why"];
    const std::string source = f["device"]["source"].get<std::string>();
    EXPECT_NE(line.find(source), std::string::npos) << "the line names where the device answers came from";
    EXPECT_EQ(f["request_indices"].size(), f["new_batch_size"].get<size_t>());
    EXPECT_EQ(f["merge_indptr"].size(), j["split"]["merge_indptr"].size());
    EXPECT_EQ(f["inputs"]["qo_indptr"].size(), j["units"].size() + 1);
    if (!f["device"]["from_device"].get<bool>()) {
      // no GPU here: the H100 SXM profile with the case's SMs, said on the line, and the model agrees
      EXPECT_NE(source.find("profile H100 SXM"), std::string::npos) << source;
      EXPECT_TRUE(f["agreement"]["agrees"].get<bool>()) << line;
      EXPECT_EQ(f["cta_tile_q"], j["split"]["cta_tile_q"]);
      EXPECT_EQ(f["split_kv"], j["split"]["split_kv"]);
      EXPECT_EQ(f["padded_batch_size"], j["split"]["padded_items"]);
      EXPECT_EQ(f["merge_indptr"], j["split"]["merge_indptr"]);
      for (size_t i = 0; i < f["request_indices"].size(); ++i) {
        ASSERT_EQ(f["request_indices"][i], j["split"]["items"][i][0]);
        ASSERT_EQ(f["qo_tile_indices"][i], j["split"]["items"][i][1]);
        ASSERT_EQ(f["kv_tile_indices"][i], j["split"]["items"][i][2]);
      }
    }
  }
  // the repro records it too, and a repro without it (written before) still replays
  const fs::path dir = fs::temp_directory_path() / ("attnscope_libplan_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string repro = (dir / "repro.json").string();
  ASSERT_EQ(cli("run " + src("examples/gqa-decode-long.json") + " --export " + repro).code, 0);
  std::ifstream in(repro);
  auto j = nlohmann::json::parse(in);
  in.close();
  ASSERT_TRUE(j["recorded"]["library_plans"]["flashinfer"].contains("agreement"));
  EXPECT_EQ(cli("run " + repro).code, 0);
  j["recorded"].erase("library_plans");
  std::ofstream(repro) << j.dump(2);
  EXPECT_EQ(cli("run " + repro).code, 0);
  fs::remove_all(dir);
}

TEST(Cli, ExportedReproReplaysBitForBit) {
  const fs::path dir = fs::temp_directory_path() / ("attnscope_repro_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string repro = (dir / "repro.json").string(), report = (dir / "report.json").string();
  const Out r = cli("run " + src("examples/poisoned-pages.json") + " --export " + repro + " --report " + report);
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(fs::exists(repro));
  ASSERT_TRUE(fs::exists(report));
  const Out again = cli("run " + repro);
  EXPECT_EQ(again.code, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("bit-identical to the recorded digest"), std::string::npos);
  // tamper with a recorded digest: the replay must fail with exit 1
  std::ifstream in(repro);
  auto j = nlohmann::json::parse(in);
  in.close();
  j["recorded"]["digests"]["cpu.tiled"] = "0000000000000000";
  std::ofstream(repro) << j.dump(2);
  const Out bad = cli("run " + repro);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("DIFFERS"), std::string::npos);
  fs::remove_all(dir);
}

// Regression (issue: replay never claims more than it checked). A repro with a digest for a GPU
// backend, replayed where that backend cannot run, used to print the CPU replays and end "ok", exit
// 0. Now every recorded digest gets a line and an unchecked one makes the run NOT CHECKED, exit 3.
TEST(Cli, ReplayNamesEveryRecordedDigestAndExitsThreeWhenOneIsNotChecked) {
  const fs::path dir = fs::temp_directory_path() / ("attnscope_unchecked_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string repro = (dir / "repro.json").string();
  ASSERT_EQ(cli("run " + src("examples/poisoned-pages.json") + " --export " + repro).code, 0);
  std::ifstream in(repro);
  auto j = nlohmann::json::parse(in);
  in.close();
  // a digest for a backend this run leaves out (--backends below), and one for cuda.flash
  const std::string tiled = j["recorded"]["digests"]["cpu.tiled"];
  j["recorded"]["digests"]["cuda.flash"] = "0123456789abcdef";
  std::ofstream(repro) << j.dump(2);
  const Out o = cli("run " + repro + " --backends cpu.reference,cpu.lowp");
  EXPECT_NE(o.out.find("cpu.tiled"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("NOT CHECKED (why: backend not in this run)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("bit-identical to the recorded digest"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("\nok"), std::string::npos) << "nothing differs, but it must not say ok: " << o.out;
  EXPECT_EQ(o.code, 3) << o.out;
  // --json says the same per backend
  const Out js = cli("run --json " + repro + " --backends cpu.reference,cpu.lowp");
  const auto rep = nlohmann::json::parse(js.out);
  std::map<std::string, std::string> state;
  for (const auto& r : rep["replay"]) state[r["backend"]] = r["state"];
  EXPECT_EQ(state["cpu.tiled"], "NOT CHECKED");
  EXPECT_EQ(state["cpu.reference"], "bit-identical");
  EXPECT_EQ(rep["summary"]["exit_code"], 3);
  EXPECT_EQ(js.code, 3);
  // where cuda.flash cannot run (no device, or not compiled) its digest is NOT CHECKED with that reason
  const Out all = cli("run " + repro + " --backends cpu.reference,cpu.lowp,cpu.tiled,cuda.flash");
  if (all.out.find("cuda.flash         ok") == std::string::npos) {
    EXPECT_TRUE(all.out.find("NOT CHECKED (why: no CUDA device") != std::string::npos ||
                all.out.find("NOT CHECKED (why: not compiled") != std::string::npos)
        << all.out;
    EXPECT_EQ(all.code, 3) << all.out;
  }
  (void)tiled;
  fs::remove_all(dir);
}

// Regression: a malformed recorded section was accepted and ignored; now it is an error naming the
// path and the rule, like any other part of the case.
TEST(Cli, MalformedRecordedSectionIsAnErrorWithItsPath) {
  const std::string base = R"({"schema": "attnscope/case@1", "requests": [{"q_len": 2, "kv_len": 9}], "heads": {"qo": 2, "kv": 1},
    "head_dim": 32, "dtype": "bf16", "backends": ["cpu.reference"], )";
  const std::pair<std::string, std::string> bad[] = {
      {R"("recorded": {"digests": "x"}})", "/recorded/digests: must be an object"},
      {R"("recorded": {"digests": {"cpu.reference": "zz"}}})", "/recorded/digests/cpu.reference: must be a digest"},
      {R"("recorded": {"digests": {"nope.backend": "0123456789abcdef"}}})",
       "/recorded/digests/nope.backend: \"nope.backend\" is not a backend id"},
      {R"("recorded": {"verdicts": [{"backend": "a"}]}})", "/recorded/verdicts/0/"},
      {R"("recorded": {"plan": {"cta_tile_q": "64"}}})", "/recorded/plan/cta_tile_q: must be an integer"},
      {R"("recorded": {"what": 1}})", "/recorded/what: unknown key"},
      {R"("environment": {"devices": [{"name": 3}]}})", "/environment/devices/0/name: must be a string"},
  };
  for (const auto& [tail, want] : bad) {
    const fs::path f = fs::temp_directory_path() / ("attnscope_rec_" + std::to_string(::getpid()) + ".json");
    std::ofstream(f) << base + tail;
    const Out o = cli("validate " + f.string());
    EXPECT_EQ(o.code, 2) << tail;
    EXPECT_NE(o.err.find(want), std::string::npos) << tail << " -> " << o.err;
    fs::remove(f);
  }
}

// Regression: {"name": "a", "name": "b"} was accepted with the last value winning.
TEST(Cli, DuplicateKeyIsAnErrorNamingPathAndKey) {
  const std::pair<std::string, std::string> bad[] = {
      {R"({"schema": "attnscope/case@1", "name": "a", "name": "b", "requests": [{"q_len": 2, "kv_len": 9}], "heads": {"qo": 2, "kv": 1}, "head_dim": 32})",
       "/: duplicate key \"name\""},
      {R"({"schema": "attnscope/case@1", "requests": [{"q_len": 2, "kv_len": 9}, {"q_len": 1, "q_len": 3, "kv_len": 9}], "heads": {"qo": 2, "kv": 1}, "head_dim": 32})",
       "/requests/1: duplicate key \"q_len\""},
      {R"({"schema": "attnscope/case@1", "requests": [{"q_len": 2, "kv_len": 9}], "heads": {"qo": 2, "kv": 1, "kv": 2}, "head_dim": 32})",
       "/heads: duplicate key \"kv\""},
  };
  for (const auto& [text, want] : bad) {
    const fs::path f = fs::temp_directory_path() / ("attnscope_dup_" + std::to_string(::getpid()) + ".json");
    std::ofstream(f) << text;
    const Out o = cli("validate " + f.string());
    EXPECT_EQ(o.code, 2) << text;
    EXPECT_NE(o.err.find(want), std::string::npos) << text << " -> " << o.err;
    fs::remove(f);
  }
}

TEST(Cli, FailingComparisonExitsOne) {
  const fs::path f = fs::temp_directory_path() / ("attnscope_fail_" + std::to_string(::getpid()) + ".json");
  std::ofstream(f) << R"({"schema": "attnscope/case@1", "name": "too-strict", "description": "bitwise lowp vs reference fails",
    "requests": [{"q_len": 8, "kv_len": 40}], "heads": {"qo": 2, "kv": 1}, "head_dim": 32, "dtype": "bf16",
    "backends": ["cpu.reference", "cpu.lowp"], "comparisons": [{"backend": "cpu.lowp", "baseline": "cpu.reference", "rule": "bitwise"}]})";
  const Out o = cli("run " + f.string());
  EXPECT_EQ(o.code, 1) << o.out;
  EXPECT_NE(o.out.find("FAIL"), std::string::npos);
  fs::remove(f);
}

// Regression: a twice_lowp comparison whose low-precision run was left out of the run had no bound
// and reported FAIL (exit 1); nothing was compared, so it is NOT CHECKED (exit 3), with the reason.
TEST(Cli, TwiceLowpWithoutItsLowpRunIsNotCheckedNotFailed) {
  const fs::path f = fs::temp_directory_path() / ("attnscope_nolowp_" + std::to_string(::getpid()) + ".json");
  std::ofstream(f) << R"({"schema": "attnscope/case@1", "name": "no-lowp", "description": "the bound's run is left out",
    "requests": [{"q_len": 8, "kv_len": 40}], "heads": {"qo": 2, "kv": 1}, "head_dim": 32, "dtype": "bf16",
    "backends": ["cpu.reference", "cpu.lowp", "cpu.tiled"],
    "comparisons": [{"backend": "cpu.tiled", "baseline": "cpu.reference", "rule": "twice_lowp", "lowp": "cpu.lowp"}]})";
  const Out o = cli("run " + f.string() + " --backends cpu.reference,cpu.tiled");
  EXPECT_EQ(o.code, 3) << o.out;
  EXPECT_EQ(o.out.find("FAIL"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("SKIP"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("cpu.lowp was not run"), std::string::npos) << o.out;
  // with the low-precision run present the same comparison is checked and passes
  EXPECT_EQ(cli("run " + f.string()).code, 0);
  fs::remove(f);
}

TEST(Cli, InvarianceShowsFixedIdenticalAndAutoHonest) {
  const Out o = cli("invariance --json " + src("examples/batch-invariance-auto.json"));
  ASSERT_EQ(o.code, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  const int n = j["num_requests"];
  bool saw_fixed = false, auto_breaks = false;
  for (const auto& p : j["planners"]) {
    if (p["planner"] == "fixed") {
      saw_fixed = true;
      EXPECT_EQ(p["identical_requests"].get<int>(), n);
    }
    if (p["planner"] == "flashinfer") auto_breaks = p["identical_requests"].get<int>() < n;
  }
  EXPECT_TRUE(saw_fixed);
  EXPECT_TRUE(auto_breaks) << "the example is built so that FlashInfer's auto chunk size changes with the batch";
}

// With flashinfer.prefill the tile and chunk are FlashInfer's own plan, the flash_attn model is
// skipped with the reason, and a planner that compared nothing (no device here, skipped) makes the
// exit code 3, never 0.
TEST(Cli, InvarianceOfFlashInferUsesItsOwnPlanAndSaysWhatItSkipped) {
  const std::string ex = src("examples/batch-invariance-fixed.json");
  const Out plan = cli("plan --json " + ex);
  ASSERT_EQ(plan.code, 0) << plan.err;
  const auto lib = nlohmann::json::parse(plan.out)["library_plans"]["flashinfer"];
  const Out o = cli("invariance --json " + ex + " --backend flashinfer.prefill");
  const auto j = nlohmann::json::parse(o.out);
  bool any_error = false, saw_flash_attn = false;
  for (const auto& p : j["planners"]) {
    any_error = any_error || !p["error"].get<std::string>().empty();
    if (p["planner"] == "flash_attn") {
      saw_flash_attn = true;
      EXPECT_NE(p["error"].get<std::string>().find("no flash_attn mode"), std::string::npos) << p.dump();
    }
    if (p["planner"] == "flashinfer" && lib["available"].get<bool>()) {
      EXPECT_EQ(p["batch_tile"], lib["cta_tile_q"]) << "the batch's tile is FlashInfer's, not the model's";
    }
  }
  EXPECT_TRUE(saw_flash_attn);
  ASSERT_TRUE(any_error);  // flash_attn is always skipped
  EXPECT_EQ(o.code, 3) << o.out;
}

TEST(Cli, DumpWritesNpyFilesOtherToolsCanRead) {
  const fs::path dir = fs::temp_directory_path() / ("attnscope_dump_" + std::to_string(::getpid()));
  const Out o = cli("run " + src("examples/prefix-lm.json") + " --dump " + dir.string());
  ASSERT_EQ(o.code, 0) << o.err;
  for (const char* f : {"q.npy", "k.npy", "v.npy", "o_cpu.reference.npy", "lse_cpu.tiled.npy", "meta.json"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  // .npy header: magic, version 1.0, a dict naming little-endian float32 and the shape
  std::ifstream in(dir / "q.npy", std::ios::binary);
  std::string head(128, '\0');
  in.read(head.data(), 128);
  EXPECT_EQ(head.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(head.find("'descr': '<f4'"), std::string::npos);
  EXPECT_NE(head.find("'shape': (126, 4, 64)"), std::string::npos) << head;
  const auto size = fs::file_size(dir / "q.npy");
  EXPECT_EQ(size, 128u + 126u * 4 * 64 * 4);  // header padded to 128 bytes, then the floats
  const auto meta = nlohmann::json::parse(std::ifstream(dir / "meta.json"));
  EXPECT_EQ(meta["q_len"][0], 96);
  EXPECT_EQ(meta["results"][0]["files"]["lse"], "lse_cpu.reference.npy");
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".npy") {
      EXPECT_EQ(attnscope::testing::npy_problem(e.path()), "") << e.path();
    }
  }
  fs::remove_all(dir);
}

// Regression (issue 32, item 7): without a GPU `bench` exited 1, the code of a failed check, and
// printed "device copy 0 GB/s"; it checked nothing, so 3 and no bandwidth line.
TEST(Cli, BenchWithoutAGpuSaysWhy) {
  const Out js = cli("bench --json " + src("bench/decode-paged.json") + " --reps 2");
  bool timed = false;
  for (const auto& row : nlohmann::json::parse(js.out)["rows"]) timed |= row["status"] == "ok";
  if (timed) GTEST_SKIP() << "a GPU timed a backend here: this test is about a machine without one";
  const Out o = cli("bench " + src("bench/decode-paged.json") + " --reps 2");
  EXPECT_EQ(o.code, 3) << "nothing was timed: NOT CHECKED, not FAILED";
  EXPECT_EQ(js.code, 3);
  EXPECT_NE(o.out.find("cuda.flash"), std::string::npos);
  EXPECT_TRUE(o.out.find("not compiled") != std::string::npos || o.out.find("no CUDA device") != std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("device copy"), std::string::npos) << "no bandwidth was measured: " << o.out;
  EXPECT_EQ(o.out.find("not compiled: not compiled"), std::string::npos) << "the status said once: " << o.out;
}

// Regression: `bench --backends cpu.reference` crashed (the CPU backends were handed an empty workload: GPU
// backends make their inputs on the device, the others need the host's). A CPU backend is listed, not timed.
TEST(Cli, BenchOfACpuBackendSaysItIsNotTimed) {
  const Out o = cli("bench " + src("examples/gqa-decode-long.json") + " --backends cpu.reference,cpu.tiled --reps 1");
  EXPECT_EQ(o.code, 3) << o.out << o.err;
  EXPECT_NE(o.out.find("cpu.reference"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("no device timing"), std::string::npos) << o.out;
}

TEST(Cli, ExplainStepsThroughOneRowOnEveryExample) {
  for (const auto& e : examples()) {
    SCOPED_TRACE(e);
    const Out o = cli("explain " + e + " --request 0 --row 0 --head 0");
    // cpu.tiled (whose arithmetic the trace is) takes no per-token FP8 scales and no FP8 attention:
    // those examples have no trace and say why, instead of printing stored FP8 values as an output
    if (e.find("fp8-kv-per-token") != std::string::npos || e.find("fp8-attention") != std::string::npos) {
      EXPECT_EQ(o.code, 2) << o.out;
      EXPECT_NE(o.err.find("cpu.tiled's arithmetic, which refuses this case"), std::string::npos) << o.err;
      continue;
    }
    EXPECT_EQ(o.code, 0) << o.err;
    EXPECT_NE(o.out.find("cpu.tiled's bits"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("cpu.reference (fp64)"), std::string::npos) << o.out;
  }
  const Out js = cli("explain --json " + src("examples/gqa-decode-long.json") + " --request 1 --row 0 --head 5");
  ASSERT_EQ(js.code, 0) << js.err;
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["schema"], "attnscope/explain@1");
  EXPECT_TRUE(j["plan"]["split_kv"].get<bool>());
  EXPECT_EQ(j["merges"].size() + 1, j["partials"].size());
  EXPECT_FALSE(j["steps"].empty());
  // a row that does not exist, or a missing option: exit 2 with the argument named
  const Out bad = cli("explain " + src("examples/gqa-decode-long.json") + " --request 1 --row 9 --head 0");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--row 9: request 1 has 1 queries"), std::string::npos) << bad.err;
  const Out missing = cli("explain " + src("examples/gqa-decode-long.json") + " --request 1 --row 0");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--head: required"), std::string::npos) << missing.err;
}

// explain on a /sparse row: docs/dsa.md section 5's checks for that row. The sparse output's LSE is the
// dense one plus ln(recall) (an identity of fp64 softmaxes: checked to 1e-9), the counts are the
// example's (request 1's first row at position 2044 keeps its 2045 visible tokens, 3 -1 padding), and
// an FP8 indexer's row counts its flips against the fp64 twin.
TEST(Cli, ExplainASparseRowChecksRecallDenseAndFlips) {
  const Out js = cli("explain --json " + src("examples/dsa-short-context.json") + " --request 1 --row 0 --head 7");
  ASSERT_EQ(js.code, 0) << js.err;
  const auto j = nlohmann::json::parse(js.out);
  ASSERT_TRUE(j.contains("sparse")) << js.out.substr(0, 400);
  const auto& k = j["sparse"];
  EXPECT_EQ(k["kept"], 2045);
  EXPECT_EQ(k["padding"], 3);
  EXPECT_EQ(k["gathered"].size(), 2045u);
  EXPECT_DOUBLE_EQ(k["recall"].get<double>(), 1.0) << "every visible token is kept";
  EXPECT_NEAR(k["dense_lse"].get<double>(), j["exact"]["lse"].get<double>(), 1e-9);
  EXPECT_LT(k["sparse_minus_dense_o_max_abs"].get<double>(), 1e-9);
  EXPECT_FALSE(k.contains("fp8_flips_vs_fp64")) << "fp64 scoring: no twin to flip against";

  const Out fp8 = cli("explain --json " + src("examples/deepseek-v32-dsa-decode.json") + " --request 0 --row 0 --head 3");
  ASSERT_EQ(fp8.code, 0) << fp8.err;
  const auto f = nlohmann::json::parse(fp8.out);
  const auto& s = f["sparse"];
  const double r = s["recall"].get<double>();
  EXPECT_GT(r, 0.0);
  EXPECT_LT(r, 1.0) << "2048 of 4096 kept";
  EXPECT_NEAR(f["exact"]["lse"].get<double>(), s["dense_lse"].get<double>() + std::log(r), 1e-9);
  EXPECT_GT(s["sparse_minus_dense_o_max_abs"].get<double>(), 1e-3);
  EXPECT_LE(s["recall_min"].get<double>(), r);
  ASSERT_TRUE(s.contains("fp8_flips_vs_fp64"));
  EXPECT_GE(s["fp8_flips_vs_fp64"].get<int>(), 0);
  EXPECT_LT(s["fp8_flips_vs_fp64"].get<int>(), 2048);
  // FlashInfer's top-k on the row: where it runs (a GPU), the same tokens; else not run, saying why
  ASSERT_TRUE(s.contains("gpu_top_k")) << fp8.out.substr(0, 400);
  EXPECT_NE(s["gpu_top_k"]["by"].get<std::string>().find("FlashInfer"), std::string::npos);
  if (s["gpu_top_k"].contains("differs"))
    EXPECT_EQ(s["gpu_top_k"]["differs"], 0);
  else
    EXPECT_FALSE(s["gpu_top_k"]["not_run"].get<std::string>().empty());
  const Out text = cli("explain " + src("examples/deepseek-v32-dsa-decode.json") + " --request 0 --row 0 --head 3");
  EXPECT_NE(text.out.find("  FP8 indexer against its fp64 twin: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("on the GPU, on this row's scores as fp32: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("(sparse LSE = dense LSE + ln recall = "), std::string::npos) << text.out;
}

namespace {

std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::string cur;
    bool quoted = false;
    for (char ch : line) {
      if (ch == '"') {
        quoted = !quoted;
      } else if (ch == ',' && !quoted) {
        f.push_back(cur);
        cur.clear();
      } else {
        cur += ch;
      }
    }
    f.push_back(cur);
    rows.push_back(f);
  }
  return rows;
}

}  // namespace

// A sweep's CSV rows are what separate `run`s of the same cases give: plan figures, every backend's
// digest, every comparison's verdict and max abs; an invalid value is a row with the reason.
TEST(Cli, SweepRowsMatchSeparateRuns) {
  const fs::path dir = fs::temp_directory_path() / ("attnscope_sweep_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const nlohmann::json base = nlohmann::json::parse(R"({"schema": "attnscope/case@1", "name": "sweep-small",
    "requests": [{"q_len": 8, "kv_len": 40}, {"q_len": 1, "kv_len": 90}], "heads": {"qo": 4, "kv": 2}, "head_dim": 32,
    "dtype": "bf16", "kv_cache": {"page_size": 4}, "split": {"planner": "fixed", "fixed_split_size": 4},
    "backends": ["cpu.reference", "cpu.lowp", "cpu.tiled"],
    "comparisons": [{"backend": "cpu.tiled", "baseline": "cpu.reference", "rule": "twice_lowp", "lowp": "cpu.lowp"}]})");
  const std::string case_path = (dir / "base.json").string(), csv = (dir / "sweep.csv").string();
  std::ofstream(case_path) << base.dump(2);
  const Out o = cli("sweep " + case_path + " --set '/requests/*/kv_len=20:80:x2' --csv " + csv);
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const auto rows = read_csv(csv);
  ASSERT_EQ(rows.size(), 4u) << o.out;  // header + 20, 40, 80
  const auto& h = rows[0];
  auto col = [&](const std::string& name) {
    const auto it = std::find(h.begin(), h.end(), name);
    EXPECT_NE(it, h.end()) << name;
    return static_cast<size_t>(it - h.begin());
  };
  for (size_t i = 1; i < rows.size(); ++i) {
    const int kv = std::stoi(rows[i][0]);
    nlohmann::json c = base;
    for (auto& r : c["requests"]) r["kv_len"] = kv;
    const std::string one = (dir / ("v" + std::to_string(kv) + ".json")).string();
    std::ofstream(one) << c.dump(2);
    const Out r = cli("run --json " + one);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto rep = nlohmann::json::parse(r.out);
    SCOPED_TRACE("kv_len " + std::to_string(kv));
    EXPECT_EQ(rows[i][col("tile")], std::to_string(rep["plan"]["cta_tile_q"].get<int>()));
    EXPECT_EQ(rows[i][col("chunk_pages")], std::to_string(rep["plan"]["chunk_pages"].get<int>()));
    EXPECT_EQ(rows[i][col("items")], std::to_string(rep["plan"]["num_items"].get<int>()));
    for (const auto& res : rep["results"])
      EXPECT_EQ(rows[i][col(res["backend"].get<std::string>() + " digest")], res["digest"].get<std::string>());
    const auto& k = rep["comparisons"][0];
    EXPECT_EQ(rows[i][col("cpu.tiled vs cpu.reference (twice_lowp) verdict")],
              k["verdict"]["pass"].get<bool>() ? "PASS" : "FAIL");
    EXPECT_EQ(std::stod(rows[i][col("cpu.tiled vs cpu.reference (twice_lowp) max_abs")]), k["o"]["max_abs"].get<double>());
  }
  // the chunk count changes with kv_len: the sweep shows the planner at work, not one plan thrice
  EXPECT_NE(rows[1][col("items")], rows[3][col("items")]);
  // an invalid value is a row with the CaseError, the sweep goes on; a path that does not exist is exit 2
  const Out bad = cli("sweep " + case_path + " --set '/requests/*/q_len=4,50' --csv " + csv);
  EXPECT_EQ(bad.code, 0) << bad.out;
  EXPECT_NE(bad.out.find("invalid: /requests/0/q_len: 50 > kv_len 40"), std::string::npos) << bad.out;
  const Out nopath = cli("sweep " + case_path + " --set '/requests/7/kv_len=1'");
  EXPECT_EQ(nopath.code, 2);
  EXPECT_NE(nopath.err.find("/requests has 2 elements, no index 7"), std::string::npos) << nopath.err;
  // /requests/# is the batch size: requests cut, or extended with copies of the last one
  const Out batch = cli("sweep --json " + case_path + " --set '/requests/#=1:4:x2'");
  ASSERT_EQ(batch.code, 0) << batch.err;
  const auto bj = nlohmann::json::parse(batch.out);
  ASSERT_EQ(bj["points"].size(), 3u);
  EXPECT_EQ(bj["points"][0]["plan"]["num_items"], 3);  // request 0 alone: 40 keys in chunks of 4 pages x 4 = 16 keys
  EXPECT_GT(bj["points"][2]["plan"]["num_items"].get<int>(), bj["points"][1]["plan"]["num_items"].get<int>());
  const Out json = cli("sweep --json " + case_path + " --set '/kv_cache/page_size=1,16'");
  const auto sj = nlohmann::json::parse(json.out);
  EXPECT_EQ(sj["points"].size(), 2u);
  // what the GUI reads back (attnscope --sweep-report) is what the CLI wrote
  EXPECT_EQ(attnscope::sweep_to_json(attnscope::sweep_from_json(sj)).dump(), nlohmann::ordered_json::parse(json.out).dump());
  nlohmann::json broken = sj;
  broken["points"][1]["plan"].erase("num_items");
  try {
    attnscope::sweep_from_json(broken);
    ADD_FAILURE() << "a report without /points/1/plan/num_items was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "/points/1/plan/num_items: missing");
  }
  fs::remove_all(dir);
}

// plan's text shows /sparse's selection per request; the counts follow from the lengths by hand: a query at
// position p keeps min(p + 1, 2048) tokens (request 1's queries sit at 2044 to 2051: 2045 + 2046 + 2047 +
// 5 x 2048 kept, 3 + 2 + 1 padding)
TEST(Cli, PlanShowsTheSparseSelection) {
  const Out o = cli("plan " + src("examples/dsa-short-context.json"));
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("sparse DeepSeek sparse attention (ANDed with it): top_k 2048, indexer 64 heads x 128 dims, fp64 scores"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("request 0: 300 kept, 1748 -1 padding;"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("request 1: 16378 kept, 6 -1 padding;"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("request 2: 2048 kept, 0 -1 padding;"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("allowed pairs per head: 18726"), std::string::npos) << o.out;  // 300 + 16378 + 2048
}
