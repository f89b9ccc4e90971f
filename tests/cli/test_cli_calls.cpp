// attnscope-cli's surface as issue 32 found it: help and version, where usage and errors go, messages
// that name the file, table columns, sweep paths and values, replay of the recorded plan and
// verdicts, and the no-GPU message. Each test fails on the behaviour the issue reports.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "attnscope/backend.h"
#include "attnscope/device.h"
#include "attnscope/plan.h"
#include "bench.h"
#include "cli_run.h"
#include "environment.h"
#include "sweep.h"

namespace fs = std::filesystem;
using attnscope::testing::cli;
using Out = attnscope::testing::CliOut;

namespace {

std::string src(const std::string& rel) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/" + rel; }

// A folder of this test's own, removed at the end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("attnscope_" + tag + "_" + std::to_string(::getpid()))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name, const std::string& text) const {
    const std::string p = (path / name).string();
    std::ofstream(p) << text;
    return p;
  }
};

// A small case of CPU backends only: every exit code below is the CLI's answer, not a GPU's absence.
const char* kSmallCase = R"({"schema": "attnscope/case@1", "name": "small",
  "requests": [{"q_len": 8, "kv_len": 40}, {"q_len": 1, "kv_len": 90}], "heads": {"qo": 4, "kv": 2}, "head_dim": 32,
  "dtype": "bf16", "kv_cache": {"page_size": 4}, "backends": ["cpu.reference", "cpu.lowp", "cpu.tiled"],
  "comparisons": [{"backend": "cpu.tiled", "baseline": "cpu.reference", "rule": "allclose"},
                  {"backend": "cpu.tiled", "baseline": "cpu.reference", "rule": "twice_lowp", "lowp": "cpu.lowp"}]})";

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  size_t b = 0;
  for (size_t e; (e = s.find('\n', b)) != std::string::npos; b = e + 1) v.push_back(s.substr(b, e - b));
  return v;
}

// The line that starts with `head`, or "".
std::string line_starting(const std::string& text, const std::string& head) {
  for (const auto& l : lines(text))
    if (l.rfind(head, 0) == 0) return l;
  return "";
}

}  // namespace

// Item 2: --help lists every command the CLI runs and exit code 3; --version prints CMake's project
// version; no arguments is a wrong call (usage on stderr, exit 2), --help a right one (stdout, 0).
TEST(CliCalls, HelpListsEveryCommandAndExitCodeThreeVersionAndNoArgumentsOnStderr) {
  const Out h = cli("--help");
  EXPECT_EQ(h.code, 0);
  EXPECT_TRUE(h.err.empty()) << h.err;
  for (const char* cmd : {"validate", "plan", "run", "invariance", "mla-forms", "bench", "sweep", "explain", "devices"}) {
    SCOPED_TRACE(cmd);
    EXPECT_NE(line_starting(h.out, std::string("  ") + cmd + " "), "") << "the help lists " << cmd << ":\n" << h.out;
    // and the CLI runs it: without its arguments it names what is missing, never "unknown command"
    const Out c = cli(cmd + std::string(" --no-such-option"));
    EXPECT_EQ(c.code, 2);
    EXPECT_EQ(c.err.find("unknown command"), std::string::npos) << c.err;
  }
  EXPECT_TRUE(std::regex_search(h.out, std::regex(R"(exit codes:[^]*\b3 nothing failed)"))) << h.out;
  const Out v = cli("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out, std::string("attnscope-cli ") + attnscope::attnscope_version() + "\n");
  EXPECT_TRUE(std::regex_match(attnscope::attnscope_version(), std::regex(R"(\d+\.\d+\.\d+)")));
  const Out dev = cli("devices --json");
  EXPECT_EQ(nlohmann::json::parse(dev.out)["attnscope"], attnscope::attnscope_version()) << "one version everywhere";
  const Out none = cli("");
  EXPECT_EQ(none.code, 2);
  EXPECT_TRUE(none.out.empty()) << "a wrong call's usage goes to stderr: " << none.out;
  EXPECT_NE(none.err.find("usage: attnscope-cli"), std::string::npos) << none.err;
  const Out sub = cli("run --help");
  EXPECT_EQ(sub.code, 0) << sub.err;
  EXPECT_NE(sub.out.find("usage: attnscope-cli"), std::string::npos);
}

// Item 6: without an NVIDIA driver the runtime's "driver version is insufficient" became the message
// everywhere; now it says no GPU or driver, keeps the versions where a driver is too old, and keeps
// the "no CUDA device" start that maps the reason to Status::kNoDevice.
TEST(CliCalls, NoDriverSaysNoGpuOrDriverAndAnOldDriverKeepsBothVersions) {
  using attnscope::no_device_reason;
  const std::string insufficient = "CUDA driver version is insufficient for CUDA runtime version";
  // cudaErrorInsufficientDriver (35) and cudaDriverGetVersion 0: no driver loaded (this CPU machine)
  const std::string none = no_device_reason(35, insufficient, 0, 13000);
  EXPECT_EQ(none, "no CUDA device: no NVIDIA GPU or driver found");
  EXPECT_EQ(no_device_reason(100, "no CUDA-capable device is detected", 13000, 13000), none);  // cudaErrorNoDevice
  const std::string old = no_device_reason(35, insufficient, 12040, 13000);
  EXPECT_NE(old.find("the NVIDIA driver supports CUDA 12.4, this build needs CUDA 13.0"), std::string::npos) << old;
  EXPECT_NE(old.find(insufficient), std::string::npos) << old;
  const std::string other = no_device_reason(999, "unknown error", 13000, 13000);
  EXPECT_EQ(other, "no CUDA device: unknown error");
  for (const auto& why : {none, old, other}) EXPECT_EQ(attnscope::status_of_reason(why), attnscope::Status::kNoDevice) << why;
}

// Item 7: ids longer than a fixed pad ran into the next column ("flashinfer.prefill_sm90no device").
TEST(CliCalls, TablesSizeColumnsFromTheIds) {
  const std::string ex = src("examples/gqa-decode-long.json");
  const Out r = cli("run " + ex + " --backends cpu.reference,flashinfer.prefill_sm90,flashinfer.decode");
  const std::string row = line_starting(r.out, "flashinfer.prefill_sm90");
  ASSERT_NE(row, "") << r.out;
  EXPECT_TRUE(std::regex_search(row, std::regex(R"(^flashinfer\.prefill_sm90  +\S)"))) << row;
  const Out b = cli("bench " + ex + " --reps 2 --backends flashinfer.prefill_sm90,flashinfer.prefill");
  for (const char* id : {"flashinfer.prefill_sm90", "flashinfer.prefill "}) {
    const std::string l = line_starting(b.out, id);
    ASSERT_NE(l, "") << b.out;
    EXPECT_TRUE(std::regex_search(l, std::regex(R"(^flashinfer\.prefill(_sm90)?  +\S)"))) << l;
  }
  // a sweep value longer than the old 12-character column
  TempDir d("cols");
  const std::string c = d.file("small.json", kSmallCase);
  const Out s = cli("sweep " + c + " --set '/attention/mask_mod=kv_idx >= q_idx - 1000000' --backends cpu.tiled");
  EXPECT_EQ(s.code, 3) << s.err;  // the comparisons' baseline is left out: skipped
  EXPECT_NE(line_starting(s.out, "kv_idx >= q_idx - 1000000  "), "") << s.out;
}

// Items 8 and 23: a path the case format does not have was created, every row was invalid and the
// sweep exited 0; now such a path (a typo, /attention/bogus, /../../etc/x) is exit 2 before anything
// runs, and a sweep whose every value is invalid is exit 2 as well.
TEST(CliCalls, SweepRefusesPathsTheCaseFormatLacksAndASweepWithNoValidValue) {
  TempDir d("sweep_paths");
  const std::string c = d.file("small.json", kSmallCase);
  for (const std::string set : {"/requests/*/kvlen=64,128", "/attention/bogus=1,2", "/../../etc/x=1,2", "/bogus/x/y=1"}) {
    SCOPED_TRACE(set);
    const Out o = cli("sweep " + c + " --set '" + set + "'");
    EXPECT_EQ(o.code, 2);
    EXPECT_TRUE(o.out.empty()) << "nothing ran: " << o.out;
    EXPECT_NE(o.err.find("not a path of the case format"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("unknown key"), std::string::npos) << o.err;
  }
  const Out typo = cli("sweep " + c + " --set '/requests/*/kvlen=64'");
  EXPECT_NE(typo.err.find("/requests/0/kvlen: unknown key"), std::string::npos) << typo.err;
  // an object value with a key of its own is that value's problem: a row, and the sweep goes on
  const Out obj = cli("sweep " + c + " --set '/kv_cache={\"page_size\": 8},{\"page_sise\": 8}'");
  EXPECT_EQ(obj.code, 0) << obj.err;
  EXPECT_NE(obj.out.find("invalid: /kv_cache/page_sise: unknown key"), std::string::npos) << obj.out;
  // every value invalid: not a success
  const Out all = cli("sweep " + c + " --set '/requests/*/q_len=100,200'");
  EXPECT_EQ(all.code, 2) << all.out;
  EXPECT_NE(all.err.find("no value gives a valid case"), std::string::npos) << all.err;
  EXPECT_NE(all.out.find("invalid: /requests/0/q_len"), std::string::npos) << "the rows say why: " << all.out;
}

// Item 8: docs/cli.md's own sweep example gave "fixed invalid: /split/fixed_split_size: missing".
TEST(CliCalls, TheDocsSweepExampleRunsEveryValue) {
  std::ifstream in(src("docs/cli.md"));
  const std::string doc((std::istreambuf_iterator<char>(in)), {});
  const auto at = doc.find("`/split/planner=");
  ASSERT_NE(at, std::string::npos);
  const std::string set = doc.substr(at + 1, doc.find('`', at + 1) - at - 1);
  TempDir d("docs_example");
  const Out o = cli("sweep " + d.file("small.json", kSmallCase) + " --set '" + set + "'");
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_EQ(o.out.find("invalid"), std::string::npos) << set << ":\n" << o.out;
}

// Item 9: a missing file was "error: /: cannot open case file" (a JSON path), a directory "not valid
// JSON ... unexpected end of input"; each now names the file and what it is.
TEST(CliCalls, MissingFileDirectoryAndDeviceNameTheFile) {
  const std::pair<std::string, std::string> bad[] = {
      {src("examples/nope.json"), ": no such file"},
      {src("examples/"), ": is a directory, not a case file"},
      {"/dev/null", ": not a regular file"},
  };
  for (const auto& [path, want] : bad)
    for (const char* cmd : {"validate ", "plan ", "run "}) {
      SCOPED_TRACE(cmd + path);
      const Out o = cli(cmd + path);
      EXPECT_EQ(o.code, 2);
      EXPECT_EQ(o.err, "error: " + path + want + (want == ": not a regular file" ? " (a case is a JSON file)\n" : "\n"));
    }
}

// Item 10: the same pair compared under two rules printed two identical names.
TEST(CliCalls, ComparisonRowsNameTheirRule) {
  TempDir d("rules");
  const std::string c = d.file("small.json", kSmallCase);
  const Out r = cli("run " + c);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(line_starting(r.out, "cpu.tiled vs cpu.reference (allclose)  "), "") << r.out;
  EXPECT_NE(line_starting(r.out, "cpu.tiled vs cpu.reference (twice_lowp)  "), "") << r.out;
  const Out s = cli("sweep --json " + c + " --set '/data/seed=1,2'");
  ASSERT_EQ(s.code, 0) << s.err;
  const auto j = nlohmann::json::parse(s.out);
  EXPECT_EQ(j["points"][0]["comparisons"][0]["comparison"], "cpu.tiled vs cpu.reference (allclose)");
  EXPECT_EQ(j["points"][0]["comparisons"][1]["comparison"], "cpu.tiled vs cpu.reference (twice_lowp)");
}

// Item 19: the list form ran 20,000 values where the range form refuses more than 10,000.
TEST(CliCalls, SweepListOfMoreThan10000ValuesIsRefusedLikeARange) {
  std::string list;
  for (int i = 1; i <= 10000; ++i) {
    if (i > 1) list += ',';
    list += std::to_string(i);
  }
  EXPECT_EQ(attnscope::parse_sweep_set("/data/seed=" + list).values.size(), 10000u);
  TempDir d("many");
  const Out o = cli("sweep " + d.file("small.json", kSmallCase) + " --set /data/seed=" + list + ",10001");
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(o.out.empty()) << "nothing ran";
  EXPECT_EQ(o.err, "error: --set /data/seed: more than 10000 values\n");
  EXPECT_THROW(attnscope::parse_sweep_set("/data/seed=1:10001:+1"), std::invalid_argument);
}

// Item 21: a tampered recorded plan or verdict replayed as ok. Each is now checked, or NOT CHECKED.
TEST(CliCalls, ReplayRechecksTheRecordedPlanAndVerdicts) {
  TempDir d("replay");
  const std::string c = d.file("small.json", kSmallCase), repro = (d.path / "repro.json").string();
  ASSERT_EQ(cli("run " + c + " --export " + repro).code, 0);
  std::ifstream in(repro);
  const auto rec = nlohmann::json::parse(in);
  const Out same = cli("run " + repro);
  EXPECT_EQ(same.code, 0) << same.out;
  EXPECT_NE(same.out.find("equal to the recorded plan"), std::string::npos) << same.out;
  EXPECT_NE(
      line_starting(same.out, "replay  cpu.tiled vs cpu.reference (twice_lowp)").find("equal to the recorded verdict: PASS"),
      std::string::npos)
      << same.out;
  EXPECT_NE(same.out.find("3 of 3 recorded plan and verdicts equal"), std::string::npos) << same.out;
  auto replay = [&](const nlohmann::json& j, const std::string& opts = "") {
    const std::string f = d.file("tampered.json", j.dump(2));
    return cli("run " + f + opts);
  };
  nlohmann::json plan = rec;
  plan["recorded"]["plan"]["num_items"] = rec["recorded"]["plan"]["num_items"].get<int>() + 1;
  const Out p = replay(plan);
  EXPECT_EQ(p.code, 1) << p.out;
  EXPECT_NE(p.out.find("DIFFERS (num_items recorded"), std::string::npos) << p.out;
  nlohmann::json verdict = rec;
  verdict["recorded"]["verdicts"][0]["pass"] = false;
  const Out v = replay(verdict);
  EXPECT_EQ(v.code, 1) << v.out;
  EXPECT_NE(line_starting(v.out, "replay  cpu.tiled vs cpu.reference (allclose)").find("DIFFERS (recorded FAIL"),
            std::string::npos)
      << v.out;
  nlohmann::json detail = rec;
  detail["recorded"]["verdicts"][1]["detail"] = "max abs 0";
  EXPECT_EQ(replay(detail).code, 1);
  nlohmann::json extra = rec;
  extra["recorded"]["verdicts"].push_back(rec["recorded"]["verdicts"][0]);
  const Out e = replay(extra);
  EXPECT_EQ(e.code, 1) << e.out;
  EXPECT_NE(e.out.find("none for recorded verdict 2"), std::string::npos) << e.out;
  // a comparison that cannot run in this replay leaves its verdict NOT CHECKED (exit 3), never "ok"
  const Out part = replay(rec, " --backends cpu.reference,cpu.tiled");
  EXPECT_EQ(part.code, 3) << part.out;
  EXPECT_NE(
      line_starting(part.out, "replay  cpu.tiled vs cpu.reference (twice_lowp)").find("NOT CHECKED (why: not compared here"),
      std::string::npos)
      << part.out;
  const auto js = nlohmann::json::parse(replay(plan, " --json").out);
  bool saw_plan = false;
  for (const auto& x : js["replay"])
    if (x["kind"] == "plan") {
      saw_plan = true;
      EXPECT_EQ(x["state"], "DIFFERS");
    }
  EXPECT_TRUE(saw_plan);
}

// Item 23: `sweep --json` aborted with json.exception.type_error.316 when a message quoted half a
// UTF-8 character; a value that is not UTF-8 is refused by name; a NUL in a value is a row.
TEST(CliCalls, SweepJsonWithNonAsciiOrNulValuesIsAReportNotAnAbort) {
  TempDir d("utf8");
  const std::string c = d.file("small.json", kSmallCase);
  for (const std::string set : {"/attention/mask_mod=kv_idx >= é,kv_idx >= 0",
                                "/attention/mask_mod=\"kv_idx \\u0000 é\",kv_idx >= 0", "/name=\"a\\u0000b\",é"}) {
    SCOPED_TRACE(set);
    const Out o = cli("sweep --json " + c + " --set '" + set + "'");
    EXPECT_EQ(o.code, 0) << o.err;
    EXPECT_EQ(o.err.find("json.exception"), std::string::npos) << o.err;
    const auto j = nlohmann::json::parse(o.out);
    ASSERT_EQ(j["points"].size(), 2u);
    EXPECT_TRUE(j["points"][1].contains("plan")) << "the valid value ran";
  }
  const Out bytes = cli("sweep --json " + c + " --set \"$(printf '/name=\\377')\"");
  EXPECT_EQ(bytes.code, 2);
  EXPECT_EQ(bytes.err, "error: --set: the argument is not valid UTF-8 text\n");
}

// Item 23: a comma inside an expression split it into two values.
TEST(CliCalls, SweepValueMayHoldCommasInsideBracketsOrQuotes) {
  const auto s = attnscope::parse_sweep_set("/attention/mask_mod=min(kv_idx, q_idx) >= 0,kv_idx >= 0");
  ASSERT_EQ(s.values.size(), 2u);
  EXPECT_EQ(s.values[0], "min(kv_idx, q_idx) >= 0");
  EXPECT_EQ(s.values[1], "kv_idx >= 0");
  const auto q = attnscope::parse_sweep_set(R"(/name="a, b","c:d",[1, 2])");
  ASSERT_EQ(q.values.size(), 3u);
  EXPECT_EQ(q.values[0], "a, b");
  EXPECT_EQ(q.values[1], "c:d");
  EXPECT_EQ(q.values[2], nlohmann::json::parse("[1, 2]"));
  for (const char* bad : {"/x=min(a, b", "/x=a)", "/x=\"a, b"})
    EXPECT_THROW(attnscope::parse_sweep_set(bad), std::invalid_argument) << bad;
  TempDir d("commas");
  const Out o = cli("sweep --json " + d.file("small.json", kSmallCase) +
                    " --set '/attention/mask_mod=min(kv_idx, q_idx) >= 0,kv_idx >= 0'");
  ASSERT_EQ(o.code, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["points"].size(), 2u);
  EXPECT_EQ(j["points"][0]["value"], "min(kv_idx, q_idx) >= 0");
  EXPECT_TRUE(j["points"][0].contains("plan")) << j["points"][0].dump();
  const Out unbalanced =
      cli("sweep " + d.file("small2.json", kSmallCase) + " --set '/attention/mask_mod=min(kv_idx, q_idx >= 0'");
  EXPECT_EQ(unbalanced.code, 2);
  EXPECT_NE(unbalanced.err.find("an unclosed ("), std::string::npos) << unbalanced.err;
}

// An FP8 cache moves one byte per K/V element: the bench's GB/s must not count the dtype's two.
TEST(BenchCounts, AnFp8CacheCountsOneBytePerElement) {
  using namespace attnscope;
  CaseSpec c;
  c.requests = {{1, 1000}, {1, 300}};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 128;
  const Plan p = make_plan(c);
  const WorkCounts b = work_counts(c, p);
  c.kv_cache.fp8 = Fp8Format::kE4M3;
  const WorkCounts f = work_counts(c, make_plan(c));
  EXPECT_DOUBLE_EQ(f.kv_bytes * 2, b.kv_bytes);
  EXPECT_DOUBLE_EQ(f.flops, b.flops);
  c.kv_cache.scales.granularity = ScaleGranularity::kToken;  // plus 4 bytes per token, KV head and tensor
  EXPECT_DOUBLE_EQ(work_counts(c, make_plan(c)).kv_bytes, f.kv_bytes + 1300.0 * 2 * 2 * 4);
  c.fp8_attention = Fp8AttentionSpec{};
  EXPECT_DOUBLE_EQ(work_counts(c, make_plan(c)).bytes - work_counts(c, make_plan(c)).kv_bytes, 2.0 * 8 * (128 + 128 * 2));
}

// A /sparse case's bench counts the gathered bytes: every query row reads its kept latent rows (576 bf16
// values each), not the request's whole cache.
TEST(BenchCounts, SparseCountsTheGatheredRows) {
  using namespace attnscope;
  CaseSpec c;
  c.mla = MlaSpec{};
  c.num_qo_heads = 16;
  c.num_kv_heads = 1;
  c.head_dim_qk = 576;
  c.head_dim_vo = 512;
  c.requests = {{1, 1000}, {2, 30}};
  c.sparse = SparseSpec{.top_k = 100, .index_heads = 2, .index_head_dim = 16};
  // request 0 keeps 100 of 1000, request 1's rows see 29 and 30 tokens and keep them all
  EXPECT_DOUBLE_EQ(work_counts(c, make_plan(c)).kv_bytes, (100.0 + 29 + 30) * 576 * 2);
  c.sparse.reset();
  EXPECT_DOUBLE_EQ(work_counts(c, make_plan(c)).kv_bytes, 1030.0 * 576 * 2);
}

// mla-forms: every CPU backend on both forms of a small MLA case, in the non-absorbed output space; the
// reference's own form is exact, its absorbed form is not (the forms round different derived inputs).
TEST(CliCalls, MlaFormsDiffsBothFormsAndRefusesWhatItCannotRun) {
  const Out o = cli("mla-forms " + src("tests/data/readme/mla-forms-small.json"));
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  const std::regex row("\\n(cpu\\.[a-z]+) +(absorbed \\(x W_uv\\)|non-absorbed) +([0-9.e+-]+) +(PASS|FAIL)");
  int rows = 0;
  for (auto it = std::sregex_iterator(o.out.begin(), o.out.end(), row); it != std::sregex_iterator(); ++it) {
    ++rows;
    EXPECT_EQ((*it)[4].str(), "PASS") << (*it)[0].str();
    const double e = std::stod((*it)[3].str());
    if ((*it)[1].str() == "cpu.reference") {
      EXPECT_EQ(e == 0.0, (*it)[2].str() == "non-absorbed") << (*it)[0].str();
    }
  }
  EXPECT_EQ(rows, 6) << o.out;
  const Out plain = cli("mla-forms " + src("examples/prefix-lm.json"));
  EXPECT_EQ(plain.code, 2);
  EXPECT_NE(plain.err.find("error: /mla: mla-forms needs an MLA case"), std::string::npos) << plain.err;
  const Out big = cli("mla-forms " + src("examples/deepseek-v3-decode.json"));
  EXPECT_EQ(big.code, 2);
  EXPECT_NE(big.err.find("error: /requests: the non-absorbed form's K and V would take"), std::string::npos) << big.err;
  const Out unknown = cli("mla-forms " + src("tests/data/readme/mla-forms-small.json") + " --backends cpu.nope");
  EXPECT_EQ(unknown.code, 2);
}
