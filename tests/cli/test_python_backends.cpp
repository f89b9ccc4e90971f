// python:PATH.py:FUNCTION backends (docs/python-backends.md): the contract on the example, every
// containment case, the permission and the repro's source hash. In-process tests share one worker
// (the process's), so only the cases that kill it pay for a new one.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../../backends/python/python_family.h"
#include "attnscope/compare.h"
#include "attnscope/mask_expr.h"
#include "attnscope/py_text.h"
#include "attnscope/registry.h"
#include "attnscope/sha256.h"
#include "case_gen.h"
#include "case_json.h"
#include "cli_run.h"
#include "dump.h"
#include "export_script.h"
#include "npy_check.h"
#include "session.h"
#include "shell.h"

using namespace attnscope;
namespace fs = std::filesystem;
using attnscope::testing::cli;
using attnscope::testing::numpy_python;

namespace {

std::string src(const std::string& rel) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/" + rel; }

const char* kModule = R"(import os, time
import numpy as np
def zeros(b):
    return np.zeros((b.total_q, b.num_qo_heads, b.head_dim_vo), np.float32)
def pid(b):
    o = zeros(b)
    o[0, 0, 0] = os.getpid() % 100000
    return o
def boom(b):
    x = 1
    return x / 0
def segv(b):
    os.kill(os.getpid(), 11)
def exit3(b):
    os._exit(3)
def hang(b):
    time.sleep(120)
def bad_shape(b):
    return np.zeros((2, 3), np.float32)
def bad_dtype(b):
    return zeros(b).astype(np.int64)
def bad_lse(b):
    return zeros(b), np.zeros((1,), np.float32)
def nan_out(b):
    o = zeros(b)
    o[1, 0, 2] = np.nan
    return o
def metadata(b):
    # the engines' forms describe the same cache: FlashInfer's CSR and vLLM's block table agree
    for r in range(b.num_requests):
        n = b.kv_indptr[r + 1] - b.kv_indptr[r]
        assert list(b.kv_indices[b.kv_indptr[r]:b.kv_indptr[r + 1]]) == list(b.block_table[r, :n]), r
        assert (n - 1) * b.page_size + b.kv_last_page_len[r] == b.cache_seqlens[r], r
        assert b.cu_seqlens_k[r + 1] - b.cu_seqlens_k[r] == b.cache_seqlens[r], r
    assert b.cu_seqlens_q[-1] == b.total_q == b.q.shape[0]
    assert b.k_cache.shape == (b.num_pages, b.page_size, b.num_kv_heads, b.head_dim_qk), b.k_cache.shape
    assert not b.q.flags.writeable
    return zeros(b)
def long_error(b):
    raise ValueError("head " + "x" * 50000 + " tail")
def fork_sleeper(b):
    pid = os.fork()
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sleeper.pid"), "w") as f:
        f.write(str(pid))
    return zeros(b)
)";

class PythonBackends : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    py_ = numpy_python();
    if (py_.empty()) return;
    setenv("ATTNSCOPE_PYTHON", py_.c_str(), 1);  // the CLI runs below inherit it
    dir_ = fs::temp_directory_path() / ("attnscope_py_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "k.py") << kModule;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (py_.empty()) GTEST_SKIP() << "no Python with NumPy here (python3 -c 'import numpy' failed; set ATTNSCOPE_PYTHON)";
    allow_all_user_code(true);
    set_user_code_timeout(kDefaultUserCodeTimeout);
  }
  void TearDown() override {
    allow_all_user_code(false);
    set_user_code_timeout(kDefaultUserCodeTimeout);
  }
  static std::string id(const std::string& fn) { return "python:" + (dir_ / "k.py").string() + ":" + fn; }
  static CaseSpec small_case() {
    CaseSpec c;
    c.name = "py";
    c.requests = {{5, 40}, {1, 33}};
    c.num_qo_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim_qk = c.head_dim_vo = 16;
    c.kv_cache.page_size = 8;
    c.kv_cache.allocation = PageAlloc::kShuffled;
    c.dtype = DType::kFp32;  // worker_pid's value exact
    validate_case(c);
    return c;
  }
  static Result run(const std::string& backend, const CaseSpec& c = small_case()) {
    const Plan p = plan_case(c);
    auto b = make_backend(backend);
    return run_backend(*b, c, p, make_workload(c, p.pages), RunOptions{});
  }
  static int worker_pid() { return static_cast<int>(run(id("pid")).o.at(0)); }  // pid % 100000
  static std::string py_;
  static fs::path dir_;
};
std::string PythonBackends::py_;
fs::path PythonBackends::dir_;

}  // namespace

TEST(PythonIds, WrittenIdsAreKnownAndMalformedOnesAreNot) {
  EXPECT_TRUE(is_known_backend("python:a/b.py:attention"));
  EXPECT_EQ(user_code_file("python:a/b.py:attention"), (fs::current_path() / "a/b.py").lexically_normal().string());
  for (const char* bad : {"python:", "python:a.py", "python:a.txt:f", "python:a.py:1f", "python:a.py:f-g"})
    EXPECT_FALSE(is_known_backend(bad)) << bad;
  EXPECT_NE(known_backends_text().find("python:PATH.py:FUNCTION"), std::string::npos);
  EXPECT_EQ(user_code_file("cpu.reference"), "");
}

TEST(PythonIds, Sha256OfKnownVectors) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(std::string(1000, 'a')).substr(0, 16), "41edece42d63e8d9");
}

TEST_F(PythonBackends, ExampleMeetsTheTwiceLowpRuleOnRandomCases) {
  const std::string ex = "python:" + src("examples/python/numpy_attention.py") + ":attention";
  int tested = 0;
  for (uint64_t seed = 0; seed < 60 && tested < 6; ++seed) {
    attnscope::testing::GenLimits lim;
    lim.max_kv = 160;
    CaseSpec c = attnscope::testing::random_case(seed, lim);
    if (!refusal(ex, c).empty()) continue;  // ALiBi: not handed to python: backends
    ++tested;
    SCOPED_TRACE(c.name);
    const Plan p = plan_case(c);
    const Workload w = make_workload(c, p.pages);
    auto go = [&](const std::string& b) { return run_backend(*make_backend(b), c, p, w, RunOptions{}); };
    const Result a = go(ex), ref = go("cpu.reference"), low = go("cpu.lowp");
    ASSERT_TRUE(a.ok()) << a.message;
    ComparisonSpec k{ex, "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"};
    const DiffReport d = compare_results(c, a, ref, k, &low);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
    EXPECT_LT(d.lse.max_abs, 1e-4);
  }
  EXPECT_EQ(tested, 6);
}

TEST_F(PythonBackends, TheFunctionSeesTheEnginesMetadata) {
  const Result r = run(id("metadata"));
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_GT(r.timing.overhead_ms, 0) << "the hand-off's cost, for the Timing tab's column";
}

TEST_F(PythonBackends, AnExceptionIsTheStatusWithItsTracebackLine) {
  const int before = worker_pid();
  const Result r = run(id("boom"));
  EXPECT_EQ(r.status, Status::kError);
  EXPECT_NE(r.message.find("ZeroDivisionError: division by zero"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("k.py:11 in boom: return x / 0"), std::string::npos) << r.message;
  EXPECT_EQ(worker_pid(), before) << "an exception leaves the worker running";
}

// A 50 KB exception text is cut in the middle, saying how much, and keeps both ends and the file:line.
TEST_F(PythonBackends, ALongExceptionIsCutAndKeepsItsTracebackLine) {
  const Result r = run(id("long_error"));
  EXPECT_EQ(r.status, Status::kError);
  EXPECT_LT(r.message.size(), 4096u) << r.message.substr(0, 200);
  EXPECT_EQ(r.message.rfind("Python exception: ValueError: head xxx", 0), 0u) << r.message.substr(0, 200);
  EXPECT_NE(r.message.find("... [48022 characters cut] ..."), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("xxx tail (at k.py:"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find(" in long_error: raise ValueError("), std::string::npos) << r.message;
}

TEST_F(PythonBackends, ASegfaultIsTheStatusAndTheWorkerRestarts) {
  const int before = worker_pid();
  const Result r = run(id("segv"));
  EXPECT_EQ(r.status, Status::kError);
  EXPECT_NE(r.message.find("died of signal 11 (SIGSEGV)"), std::string::npos) << r.message;
  const Result next = run(id("zeros"));
  EXPECT_TRUE(next.ok()) << next.message;
  EXPECT_NE(worker_pid(), before);
}

TEST_F(PythonBackends, AnOsExitIsTheStatus) {
  const Result r = run(id("exit3"));
  EXPECT_EQ(r.status, Status::kError);
  EXPECT_NE(r.message.find("exited with code 3"), std::string::npos) << r.message;
  EXPECT_TRUE(run(id("zeros")).ok());
}

TEST_F(PythonBackends, ACallPastTheTimeoutIsKilled) {
  set_user_code_timeout(1);
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = run(id("hang"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, Status::kError);
  EXPECT_NE(r.message.find("ran past 1 s (--python-timeout)"), std::string::npos) << r.message;
  EXPECT_LT(s, 10);
  EXPECT_TRUE(run(id("zeros")).ok());
}

TEST_F(PythonBackends, AWrongShapeOrDtypeIsAContractError) {
  const Result shape = run(id("bad_shape"));
  EXPECT_EQ(shape.status, Status::kError);
  EXPECT_NE(shape.message.find("O has shape (2, 3); the contract wants (6, 4, 16)"), std::string::npos) << shape.message;
  const Result dtype = run(id("bad_dtype"));
  EXPECT_NE(dtype.message.find("O has dtype int64"), std::string::npos) << dtype.message;
  const Result lse = run(id("bad_lse"));
  EXPECT_NE(lse.message.find("LSE has shape (1,); the contract wants (6, 4)"), std::string::npos) << lse.message;
}

TEST_F(PythonBackends, NanOutputIsAnError) {
  const Result r = run(id("nan_out"));
  EXPECT_EQ(r.status, Status::kError);
  EXPECT_NE(r.message.find("O has 1 NaN or infinite value(s), the first at token 1, head 0"), std::string::npos) << r.message;
  EXPECT_TRUE(r.o.empty());
}

TEST_F(PythonBackends, OtherBackendsResultsStandBesideACrash) {
  CaseFile f;
  f.spec = small_case();
  f.spec.backends = {"cpu.reference", id("segv"), "cpu.lowp", id("boom")};
  f.spec.comparisons = {{"cpu.lowp", "cpu.reference", CompareRule::kAllclose, 1e-1, 1e-1, ""}};
  const auto s = run_session(f);
  ASSERT_EQ(s->results.size(), 4u);
  EXPECT_TRUE(s->results[0].ok());
  EXPECT_EQ(s->results[1].status, Status::kError);
  EXPECT_TRUE(s->results[2].ok()) << s->results[2].message;
  EXPECT_EQ(s->results[3].status, Status::kError);
  EXPECT_TRUE(s->diffs.at(0).verdict.pass) << s->diffs[0].verdict.detail;
}

TEST_F(PythonBackends, WithoutPermissionItIsRefusedWithTheInstruction) {
  allow_all_user_code(false);
  const Result r = run(id("zeros"));
  EXPECT_EQ(r.status, Status::kUnsupported);
  EXPECT_NE(r.message.find("--allow-python"), std::string::npos) << r.message;
  allow_user_code_file((dir_ / "k.py").string());  // the GUI's answer for this one file
  EXPECT_TRUE(run(id("zeros")).ok());
}

// The CLI: refusal without --allow-python (exit 2 naming the flag), a repro recording the file's sha256,
// and its replay with the file unchanged, changed and missing.
TEST_F(PythonBackends, CliRefusesThenRecordsAndChecksTheSourceHash) {
  const fs::path mod = dir_ / "attn.py", case_path = dir_ / "case.json", repro = dir_ / "repro.json";
  fs::copy_file(src("examples/python/numpy_attention.py"), mod, fs::copy_options::overwrite_existing);
  CaseFile f = read_case_file(src("examples/python/numpy-attention.json"));
  const std::string py = "python:" + mod.string() + ":attention";
  f.spec.backends.back() = py;
  f.spec.comparisons.at(0).backend = py;
  std::ofstream(case_path) << case_file_to_json(f).dump(2);

  const auto refused = cli("run " + case_path.string());
  EXPECT_EQ(refused.code, 2);
  EXPECT_EQ(refused.err.rfind("error: /backends/2: " + py + " runs the code in " + mod.string(), 0), 0u) << refused.err;
  EXPECT_NE(refused.err.find("pass --allow-python"), std::string::npos) << refused.err;
  const auto named = cli("run " + src("examples/prefix-lm.json") + " --backends cpu.reference," + py);
  EXPECT_EQ(named.code, 2);
  EXPECT_EQ(named.err.rfind("error: --backends: " + py, 0), 0u) << named.err;

  const auto ran = cli("run " + case_path.string() + " --allow-python --export " + repro.string());
  ASSERT_EQ(ran.code, 0) << ran.out << ran.err;
  EXPECT_NE(ran.out.find("PASS"), std::string::npos) << ran.out;
  std::string why;
  EXPECT_EQ(read_case_file(repro.string()).recorded["sources"][py]["sha256"], file_sha256(mod.string(), &why));

  const auto same = cli("run " + repro.string() + " --allow-python");
  EXPECT_EQ(same.code, 0) << same.out;
  EXPECT_NE(same.out.find("3 of 3 recorded digests bit-identical"), std::string::npos) << same.out;
  std::ofstream(mod, std::ios::app) << "# an edit\n";
  const auto changed = cli("run " + repro.string() + " --allow-python");
  EXPECT_EQ(changed.code, 3) << changed.out;
  EXPECT_NE(changed.out.find("NOT CHECKED (why: its code file " + mod.string() + " changed since the repro was recorded"),
            std::string::npos)
      << changed.out;
  fs::remove(mod);
  const auto missing = cli("run " + repro.string() + " --allow-python");
  EXPECT_NE(missing.out.find("NOT CHECKED (why: its code file is missing here"), std::string::npos) << missing.out;
}

// The named adapters need PyTorch: where it is missing they say so (unsupported, not an error); where
// it is importable they run and meet the 2x rule like the example.
TEST_F(PythonBackends, AdaptersNeedPyTorch) {
  const bool torch = std::system((py_ + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
  CaseSpec c = small_case();
  c.dtype = DType::kBf16;
  const Plan p = plan_case(c);
  const Workload w = make_workload(c, p.pages);
  auto go = [&](const std::string& b) { return run_backend(*make_backend(b), c, p, w, RunOptions{}); };
  const Result ref = go("cpu.reference"), low = go("cpu.lowp");
  for (const char* id : {"python.sdpa", "python.flex_attention"}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(user_code_file(id), "") << "attnscope's own code needs no permission";
    const Result r = go(id);
    if (!torch) {
      EXPECT_EQ(r.status, Status::kUnsupported);
      EXPECT_EQ(r.message.rfind("PyTorch not importable in " + py_, 0), 0u) << r.message;
      continue;
    }
    ASSERT_TRUE(r.ok()) << r.message;
    const DiffReport d = compare_results(c, r, ref, {id, "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &low);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
  }
  c.attention.soft_cap = 30;
  EXPECT_NE(refusal("python.sdpa", c).find("no soft-cap"), std::string::npos);
}

// The GPU-only adapters where the worker has no PyTorch with CUDA (CI): the engines' kernels say which
// module is missing, SDPA pinned to a backend says it needs CUDA tensors (or that PyTorch is missing);
// unsupported, never an error. An engine's kernel refuses what it cannot read before the call.
TEST_F(PythonBackends, GpuAdaptersSayWhyWithoutTheirLibraries) {
  const CaseSpec c = small_case();
  for (const char* id : {"python.sgl_fa3", "python.vllm_fa"}) {
    SCOPED_TRACE(id);
    CaseSpec bf = c;
    bf.dtype = DType::kBf16;
    const Result r = run(id, bf);
    EXPECT_EQ(r.status, Status::kUnsupported) << r.message;
    EXPECT_EQ(r.message.rfind("not installed: ", 0), 0u) << r.message;
    EXPECT_NE(refusal(id, c).find("FlashAttention takes fp16 / bf16"), std::string::npos) << refusal(id, c);
    bf.kv_cache.layout = KvLayout::kHND;
    EXPECT_NE(refusal(id, bf).find("paged NHD cache"), std::string::npos) << refusal(id, bf);
  }
  const bool torch = std::system((py_ + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
  for (const char* id : {"python.sdpa_flash", "python.sdpa_cudnn", "python.sdpa_efficient", "python.sdpa_math"}) {
    SCOPED_TRACE(id);
    const Result r = run(id);
    EXPECT_EQ(r.status, Status::kUnsupported) << r.message;
    EXPECT_NE(r.message.find(torch ? "runs on PyTorch's CUDA tensors" : "PyTorch not importable"), std::string::npos)
        << r.message;
  }
}

// A function may return O alone: the comparison checks O (it read past the empty LSE before).
TEST_F(PythonBackends, AnOAloneResultIsCompared) {
  const CaseSpec c = small_case();
  const Plan p = plan_case(c);
  const Workload w = make_workload(c, p.pages);
  const Result z = run_backend(*make_backend(id("zeros")), c, p, w, RunOptions{});
  const Result ref = run_backend(*make_backend("cpu.reference"), c, p, w, RunOptions{});
  ASSERT_TRUE(z.ok()) << z.message;
  ASSERT_TRUE(z.lse.empty());
  for (CompareRule rule : {CompareRule::kAllclose, CompareRule::kBitwise}) {
    const DiffReport d = compare_results(c, z, ref, {id("zeros"), "cpu.reference", rule, 1e-2, 1e-3, ""}, nullptr);
    EXPECT_FALSE(d.verdict.pass);  // zeros are not attention
    EXPECT_EQ(d.lse.count, 0);
    EXPECT_GT(d.o.count, 0);
  }
}

// --dump of a function that returns O alone: no lse_ file (it was a header promising [total_q, heads]
// floats and no data, which NumPy refuses), meta.json says why, and every .npy written loads. The id's
// path is escaped in the file name (a '/' in it made the whole dump fail: "cannot write DIR/o_python:/...").
TEST_F(PythonBackends, DumpWritesOnlyLoadableNpysForAnOAloneResult) {
  for (const std::string& backend : {std::string("python:k.py:zeros"), id("zeros")}) {
    SCOPED_TRACE(backend);
    const fs::path case_path = dir_ / "dump_case.json", out = dir_ / "dump";
    CaseFile f;
    f.spec = small_case();
    f.spec.backends = {"cpu.reference", backend};
    std::ofstream(case_path) << case_file_to_json(f).dump(2);
    // run in dir_: the relative id names dir_/k.py
    const auto r = attnscope::testing::cli_at("cd " + dir_.string() + " && " + ATTNSCOPE_CLI,
                                              "run " + case_path.string() + " --allow-python --dump " + out.string());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    const auto meta = nlohmann::json::parse(std::ifstream(out / "meta.json"));
    const std::string o_name = result_npy_name("o_", backend);
    EXPECT_EQ(o_name.find('/'), std::string::npos) << o_name;
    EXPECT_TRUE(fs::exists(out / o_name)) << o_name;
    EXPECT_FALSE(fs::exists(out / result_npy_name("lse_", backend)));
    ASSERT_EQ(meta["results"].size(), 2u);
    EXPECT_EQ(meta["results"][1]["files"]["o"], o_name);
    EXPECT_TRUE(meta["results"][1]["files"]["lse"].is_null()) << meta["results"][1].dump();
    EXPECT_NE(meta["results"][1]["files"]["note"].get<std::string>().find("returned O without an LSE"), std::string::npos);
    std::string load;
    for (const auto& e : fs::directory_iterator(out)) {
      if (e.path().extension() != ".npy") continue;
      EXPECT_EQ(attnscope::testing::npy_problem(e.path()), "") << e.path();
      load += "np.load(" + py_str(e.path().string()) + "); ";
    }
    EXPECT_EQ(std::system((py_ + " -c 'import numpy as np; " + load + "' ").c_str()), 0) << "NumPy loads every file";
    fs::remove_all(out);
  }
}

// A module that forks a sleeper: the run ends at once (the sleeper held the CLI's stderr, so a caller
// reading it waited the sleeper's 20 s) and the sleeper with it; the worker's process group is killed.
TEST_F(PythonBackends, AForkedChildEndsWithTheRun) {
  const fs::path case_path = dir_ / "fork_case.json", pid_file = dir_ / "sleeper.pid";
  CaseFile f;
  f.spec = small_case();
  f.spec.backends = {"cpu.reference", id("fork_sleeper")};
  std::ofstream(case_path) << case_file_to_json(f).dump(2);
  const auto t0 = std::chrono::steady_clock::now();
  // stdout and stderr into one pipe, as a caller capturing both reads them: EOF only when every holder ends
  const auto r = attnscope::testing::sh(std::string(ATTNSCOPE_CLI) + " run " + case_path.string() + " --allow-python");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 0) << r.out;
  int pid = 0;
  std::ifstream(pid_file) >> pid;
  ASSERT_GT(pid, 1) << "the module wrote its child's pid";
  auto alive = [pid] {  // a zombie (ended, not yet reaped by init) counts as ended
    std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(st, line)) return ::kill(pid, 0) == 0;
    const size_t paren = line.rfind(')');
    return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
  };
  bool still = alive();
  for (int i = 0; i < 50 && still; ++i) {  // SIGKILL is delivered at once, the exit may take a moment
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    still = alive();
  }
  if (still) ::kill(pid, SIGKILL);  // clean up what this test started
  EXPECT_FALSE(still) << "the forked sleeper outlived the run";
  EXPECT_LT(s, 10) << "the run's output stayed open until the sleeper ended";
  fs::remove(pid_file);
}

namespace {

// Small cases with a mask_mod or a score_mod for python.flex_attention (dim 16, fp32 / bf16).
std::vector<CaseSpec> expression_cases() {
  auto base = [](std::vector<RequestSpec> reqs, bool causal) {
    CaseSpec c;
    c.name = "flex-expr";
    c.requests = std::move(reqs);
    c.num_qo_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim_qk = c.head_dim_vo = 16;
    c.kv_cache.page_size = 8;
    c.kv_cache.allocation = PageAlloc::kShuffled;
    c.dtype = DType::kBf16;
    c.attention.causal = causal;
    return c;
  };
  std::vector<CaseSpec> out;
  CaseSpec dilated = base({{40, 120}, {1, 77}}, false);
  dilated.attention.mask_mod = "kv_idx <= q_idx && q_idx - kv_idx < 64 && (q_idx - kv_idx) % 2 == 0";
  out.push_back(dilated);
  CaseSpec docs = base({{60, 60}, {20, 50}}, false);
  docs.attention.mask_mod = "doc(kv_idx) == doc(q_idx) && kv_idx <= q_idx";
  docs.requests[0].doc_starts = {0, 17, 40};
  out.push_back(docs);
  CaseSpec prefix = base({{48, 48}}, false);
  prefix.attention.mask_mod = "kv_idx <= q_idx || kv_idx < prefix_len";
  prefix.requests[0].prefix_len = 20;
  out.push_back(prefix);
  CaseSpec capped = base({{30, 90}, {1, 40}}, true);
  capped.attention.score_mod = "20 * tanh(score / 20)";
  capped.attention.mask_mod = "floor(q_idx / 16) != floor(kv_idx / 16) + 1";  // a block stripe off
  out.push_back(capped);
  CaseSpec alibi = base({{30, 90}, {1, 40}}, true);
  alibi.attention.score_mod = "score + alibi(h) * (kv_idx - q_idx)";
  alibi.attention.mask_mod = "alibi(2) * (q_idx - kv_idx) < 3 || kv_idx < 4";  // a window from ALiBi's slope, and sinks
  out.push_back(alibi);
  for (auto& c : out) validate_case(c);
  return out;
}

}  // namespace

// python.flex_attention's mask_mod and score_mod come from the case as the export script writes them:
// the registry lowers a score_mod to soft-cap / ALiBi as script_case() does, the ALiBi slopes are the
// script's ALIBI_SLOPES, and the mask_mod is the case's text (the script's MASK_MOD) as PyTorch.
TEST(PythonFlex, ExpressionsAsTheExportScriptWritesThem) {
  const BackendInfo* flex = backend_info("python.flex_attention");
  ASSERT_NE(flex, nullptr);
  for (CaseSpec c : expression_cases()) {
    SCOPED_TRACE(c.attention.mask_mod.value_or("") + " / " + c.attention.score_mod.value_or(""));
    c.backends = {"cpu.reference"};
    CaseFile f;
    f.spec = c;
    const auto s = run_session(f);
    const std::string script = make_repro_script(*s, "cpu.reference");
    CaseSpec run_as;
    ASSERT_EQ(expressions_for(*flex, c, &run_as), "");
    const CaseSpec scripted = script_case(c);
    EXPECT_EQ(run_as.attention.soft_cap, scripted.attention.soft_cap);
    EXPECT_EQ(run_as.attention.alibi, scripted.attention.alibi);
    const nlohmann::json m = python::expression_meta(run_as);
    if (run_as.attention.soft_cap) {
      EXPECT_NE(script.find("SOFT_CAP = " + py_float(*run_as.attention.soft_cap)), std::string::npos);
    }
    if (run_as.attention.alibi) {
      ASSERT_TRUE(m.contains("alibi_slopes"));
      std::vector<std::string> slopes;
      for (const auto& x : m["alibi_slopes"]) slopes.push_back(py_float(x.get<double>()));
      EXPECT_NE(script.find(py_assign("ALIBI_SLOPES", slopes)), std::string::npos) << script.substr(0, 3000);
    } else {
      EXPECT_FALSE(m.contains("alibi_slopes"));
    }
    ASSERT_TRUE(m.contains("mask_mod"));
    EXPECT_EQ(m["mask_mod_text"], *c.attention.mask_mod);
    EXPECT_NE(script.find("MASK_MOD = " + py_str(*c.attention.mask_mod)), std::string::npos);
    EXPECT_EQ(m["mask_mod"], expr_to_torch(Expr::parse(*c.attention.mask_mod, Expr::Kind::kMask)));
    ASSERT_EQ(m["doc_starts"].size(), c.requests.size());
    EXPECT_EQ(m["prefix_lens"][0], c.requests[0].prefix_len.value_or(0));
  }
  CaseSpec other = expression_cases()[0];
  other.attention.score_mod = "score * 2";  // not a form the export script writes: refused the same way
  CaseSpec run_as;
  EXPECT_NE(expressions_for(*flex, other, &run_as).find("runs a score_mod only of the forms"), std::string::npos);
  EXPECT_THROW(script_case(other), std::invalid_argument);
}

// With PyTorch in the worker (CPU is enough: eager FlexAttention in fp64), the translated mask_mod,
// doc(), prefix_len, alibi() and the lowered score_mods give the reference's attention.
TEST_F(PythonBackends, FlexAttentionRunsTheCasesMaskModAndScoreMod) {
  if (std::system((py_ + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0) GTEST_SKIP() << py_ << " has no PyTorch";
  for (const CaseSpec& c : expression_cases()) {
    SCOPED_TRACE(c.attention.mask_mod.value_or("") + " / " + c.attention.score_mod.value_or(""));
    const Plan p = plan_case(c);
    const Workload w = make_workload(c, p.pages);
    auto go = [&](const std::string& b) { return run_backend(*make_backend(b), c, p, w, RunOptions{}); };
    const Result r = go("python.flex_attention"), ref = go("cpu.reference"), low = go("cpu.lowp");
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_FALSE(r.block_mask.empty()) << "the reply carries the BlockMask for the Mask tab";
    const DiffReport d = compare_results(
        c, r, ref, {"python.flex_attention", "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &low);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
  }
}

// python.fa3 refuses by name what the fa3-fwd 0.0.3 wheel compiled out (fa3_fwd_config.CONFIG's
// FLASHATTENTION_DISABLE_ flags) and what FA3 cannot take, before any worker or GPU (attnscope's check);
// a bf16 causal GQA case, ragged or paged, and FP8 e4m3 attention with tensor or head scales pass it.
TEST(PythonFa3, RefusesByNameWhatTheWheelCompiledOutOrFa3CannotTake) {
  CaseSpec c;
  c.requests = {{5, 40}, {1, 33}};
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 64;
  c.dtype = DType::kBf16;
  c.attention.causal = true;
  c.kv_cache.page_size = 8;
  validate_case(c);
  auto why = [](const CaseSpec& x) { return refusal("python.fa3", x); };
  EXPECT_EQ(why(c), "");
  auto refused = [&](CaseSpec x, const std::string& part) {
    const std::string w = why(x);
    EXPECT_NE(w.find(part), std::string::npos) << "wanted \"" << part << "\" in: " << w;
  };
  CaseSpec x = c;
  x.dtype = DType::kFp16;
  refused(x, "compiled out of fa3-fwd: FLASHATTENTION_DISABLE_FP16");
  x = c;
  x.dtype = DType::kFp32;
  refused(x, "FA3 takes bf16 or FP8 e4m3");
  x = c;
  x.attention.window = 16;
  refused(x, "compiled out of fa3-fwd: FLASHATTENTION_DISABLE_LOCAL");
  x = c;
  x.attention.causal = false;
  x.attention.local_chunk = 16;
  refused(x, "FLASHATTENTION_DISABLE_LOCAL");
  x = c;
  x.attention.alibi = true;
  refused(x, "FA3 has no ALiBi");
  x = c;
  x.requests[0].doc_starts = {0, 20};
  refused(x, "not prefix-LM or documents");
  x = c;
  x.requests[0].pad_start = 38;
  EXPECT_EQ(why(x), "") << "padding: the rows past seqused_q";
  x = c;
  x.head_dim_qk = x.head_dim_vo = 20;
  refused(x, "head dims up to 256 in multiples of 8");
  x = c;
  x.head_dim_qk = x.head_dim_vo = 512;
  refused(x, "head dims up to 256");
  x = c;
  x.head_dim_qk = 128;
  x.head_dim_vo = 64;
  refused(x, "a V head dim unlike Q/K's");
  x = c;
  x.attention.mask_mod = "kv_idx <= q_idx";
  EXPECT_NE(why(x), "") << "a mask_mod";
  x = c;
  x.attention.sinks = SinksSpec{};
  EXPECT_NE(why(x), "") << "sinks";
  // FP8: e4m3 with Q in FP8 and tensor / head scales; e5m2, token scales and bf16 Q refused by name
  x = c;
  x.kv_cache.fp8 = Fp8Format::kE4M3;
  x.fp8_attention = Fp8AttentionSpec{};
  EXPECT_EQ(why(x), "");
  x.kv_cache.scales.granularity = ScaleGranularity::kHead;
  EXPECT_EQ(why(x), "");
  x.kv_cache.scales.granularity = ScaleGranularity::kToken;
  refused(x, "token");
  x.kv_cache.scales.granularity = ScaleGranularity::kTensor;
  x.head_dim_qk = x.head_dim_vo = 72;
  refused(x, "multiples of 16");
  x.head_dim_qk = x.head_dim_vo = 64;
  x.kv_cache.fp8 = Fp8Format::kE5M2;
  refused(x, "FA3 takes FP8 e4m3 only");
  x.kv_cache.fp8 = Fp8Format::kE4M3;
  x.fp8_attention.reset();
  refused(x, "needs /fp8_attention");
  x = c;
  x.kv_cache.storage = KvStorage::kRagged;
  EXPECT_EQ(why(x), "") << "ragged storage is already the varlen buffer";
  const BackendInfo* info = backend_info("python.fa3");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->lse_base, LseBase::kE) << "FA3's softmax_lse is natural log";
  EXPECT_TRUE(info->fp8_attention);
}

// Without the fa3_fwd package (CI): unsupported, "not installed: fa3_fwd (pip install fa3-fwd==0.0.3)",
// as the engines' adapters say it; never an error.
TEST_F(PythonBackends, Fa3SaysNotInstalledWithoutItsPackage) {
  if (std::system((py_ + " -c 'import fa3_fwd_interface' >/dev/null 2>&1").c_str()) == 0)
    GTEST_SKIP() << "fa3_fwd imports in " << py_ << " (the GPU tests run it)";
  CaseSpec c = small_case();
  c.dtype = DType::kBf16;
  const Result r = run("python.fa3", c);
  EXPECT_EQ(r.status, Status::kUnsupported) << r.message;
  EXPECT_EQ(r.message.rfind("not installed: fa3_fwd (pip install fa3-fwd==0.0.3)", 0), 0u) << r.message;
}
