// attnscope-cli consistency: the text a user reads, the exit codes (0 a difference where nothing is
// promised, 1 a CPU reference that differs, 2 bad --last, 3 a backend that cannot run here) and --json.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"

namespace {

using attnscope::testing::cli;
using attnscope::testing::cli_faults;

std::string src(const std::string& rel) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/" + rel; }
const std::string kFp8 = src("examples/fp8-decode-vs-prefill.json");

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// Sets a variable for the CLI runs of one scope.
struct Env {
  std::string name;
  Env(const char* n, const std::string& v) : name(n) { setenv(n, v.c_str(), 1); }
  ~Env() { unsetenv(name.c_str()); }
};

TEST(ConsistencyCli, TextOnTheFp8Example) {
  const auto o = cli("consistency " + kFp8 + " --last 8");
  // 3 where the GPU backends of the case cannot run (this build or machine), else 0
  ASSERT_TRUE(o.code == 0 || o.code == 3) << o.code << o.out << o.err;
  const auto l = lines(o.out);
  ASSERT_GE(l.size(), 6u) << o.out;
  EXPECT_EQ(l[0].rfind("consistency of fp8-decode-vs-prefill: the last 8 tokens of 4 requests (kv_len 130..300) as one "
                       "prefill (q_len 8) and as 8 decode steps, O of 32 qo heads x 128 dims in bf16; fp8_e4m3 KV cache, "
                       "tensor scales given to every derived case as the prefill's",
                       0),
            0u)
      << l[0];
  EXPECT_TRUE(std::regex_search(o.out, std::regex("\ncpu\\.reference +bit-identical \\(1024 rows, as promised\\)\n"))) << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex("\ncpu\\.lowp +bit-identical \\(1024 rows, as promised\\)\n"))) << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex("\ncpu\\.reference +\\.{8}\n"))) << o.out;
  EXPECT_EQ(l.back().rfind(o.code == 0 ? "ok: " : "NOT CHECKED: ", 0), 0u) << l.back();
  EXPECT_EQ(o.err, "");
}

TEST(ConsistencyCli, ExitCodes) {
  {  // the references alone: bit-identical, 0
    const auto o = cli("consistency " + kFp8 + " --last 4 --backends cpu.reference,cpu.lowp");
    EXPECT_EQ(o.code, 0) << o.out << o.err;
    EXPECT_EQ(lines(o.out).back(), "ok: 2 bit-identical, 0 differ");
  }
  {  // a reference that differs from position 3: FAILED, 1
    Env e("ATTNSCOPE_TEST_CONSISTENCY_FAULT", "cpu.reference@3");
    const auto o = cli_faults("consistency " + kFp8 + " --last 6 --backends cpu.reference,cpu.lowp");
    EXPECT_EQ(o.code, 1) << o.out << o.err;
    EXPECT_NE(o.out.find("\ncpu.reference  FAILED: differs from position 3 (request 0, key 127), max |diff| "), std::string::npos)
        << o.out;
    EXPECT_TRUE(std::regex_search(o.out, std::regex("\ncpu.reference +\\.\\.\\.[89]{3}\n"))) << o.out;
    EXPECT_EQ(lines(o.out).back().rfind("FAILED: ", 0), 0u) << o.out;
  }
  {  // the same difference in a backend that promises nothing: reported, 0
    Env e("ATTNSCOPE_TEST_CONSISTENCY_FAULT", "cpu.tiled@4");
    const auto o = cli_faults("consistency " + src("examples/prefix-lm.json") + " --last 12");
    EXPECT_EQ(o.code, 0) << o.out << o.err;
    EXPECT_NE(o.out.find("\ncpu.tiled      differs from position 4 (request 0, key 88)"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("first differing key per request: 88, 112; "), std::string::npos) << o.out;
    EXPECT_EQ(lines(o.out).back(), "ok: 2 bit-identical, 1 differ") << o.out;
  }
  for (const std::string bad : {"--last 0", "--last 131", "--last -2", "--last x", "", "--last 4 --backends cpu.nope",
                                "--last 4 --backends 'cpu.reference>cpu.nope'"}) {
    SCOPED_TRACE(bad);
    const auto o = cli("consistency " + kFp8 + " " + bad);
    EXPECT_EQ(o.code, 2);
    EXPECT_EQ(o.out, "");
    EXPECT_EQ(o.err.rfind(bad.find("backends") != std::string::npos ? "error: --backends: " : "error: --last: ", 0), 0u) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }
  const auto o = cli("consistency " + kFp8 + " --last 131");
  EXPECT_NE(o.err.find("131 is more than request 0's kv_len 130"), std::string::npos) << o.err;
}

// The fault switch is the tests' copy's (attnscope-cli-faults): the product CLI reads no test switch.
TEST(ConsistencyCli, TheProductIgnoresTheTestFaultSwitch) {
  Env e("ATTNSCOPE_TEST_CONSISTENCY_FAULT", "cpu.reference@3");
  const auto o = cli("consistency " + kFp8 + " --last 6 --backends cpu.reference,cpu.lowp");
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_EQ(lines(o.out).back(), "ok: 2 bit-identical, 0 differ") << o.out;
  EXPECT_EQ(cli_faults("consistency " + kFp8 + " --last 6 --backends cpu.reference,cpu.lowp").code, 1);
}

TEST(ConsistencyCli, JsonCarriesTheSeries) {
  Env e("ATTNSCOPE_TEST_CONSISTENCY_FAULT", "cpu.lowp@2");
  const auto o = cli_faults("consistency " + kFp8 + " --last 5 --backends cpu.reference,cpu.lowp,flashinfer.decode --json");
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j.at("exit_code").get<int>(), o.code);
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(j.at("last"), 5);
  EXPECT_EQ(j.at("kv_lens"), (std::vector<int>{130, 187, 251, 300}));
  const auto& b = j.at("backends");
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].at("verdict"), "bit-identical");
  EXPECT_EQ(b[0].at("max_abs_per_position"), (std::vector<double>{0, 0, 0, 0, 0}));
  EXPECT_EQ(b[0].at("identical_rows_per_position"), (std::vector<int>{128, 128, 128, 128, 128}));
  EXPECT_EQ(b[1].at("verdict"), "FAILED");
  EXPECT_EQ(b[1].at("first_differing_position"), 2);
  EXPECT_EQ(b[1].at("first_differing_key_by_request"), (std::vector<int>{127, 184, 248, 297}));
  const auto m = b[1].at("max_abs_per_position").get<std::vector<double>>();
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[1], 0);
  EXPECT_GT(m[2], 0);
  // a backend that did not run has a status and a reason, no number
  if (b[2].at("verdict") == "not run") {
    EXPECT_NE(b[2].at("status"), "ok");
    EXPECT_FALSE(b[2].at("reason").get<std::string>().empty());
    EXPECT_FALSE(b[2].contains("max_abs_per_position"));
  }
}

TEST(ConsistencyCli, HelpNamesTheCommand) {
  const auto o = cli("consistency --help");
  EXPECT_EQ(o.code, 0);
  EXPECT_NE(o.out.find("consistency CASE --last N"), std::string::npos);
  EXPECT_NE(o.out.find("--last N             tokens per request, 1 <= N <= the smallest kv_len (required)"), std::string::npos);
}

}  // namespace
