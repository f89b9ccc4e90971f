// `attnscope-cli run CASE --export-script DIR`: the generated repro.py compiles for every example and
// both target paths (FlashInfer, PyTorch SDPA / flex_attention); its --reference-only mode (numpy
// only) reproduces attnscope's cpu.reference to float32 rounding; the files the FlashInfer path
// reads rebuild the same paged cache; broken uses are one-line errors with exit code 2. The GPU
// paths (the libraries themselves) run on a GPU machine, not here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "attnscope/mask.h"
#include "attnscope/mask_expr.h"
#include "attnscope/mla.h"
#include "attnscope/plan.h"
#include "attnscope/py_text.h"
#include "attnscope/registry.h"
#include "case_json.h"
#include "export_script.h"
#include "shell.h"

namespace fs = std::filesystem;

namespace {

using Out = attnscope::testing::ShellOut;
using attnscope::testing::sh;
using attnscope::testing::src;

Out cli(const std::string& args) { return sh(std::string(ATTNSCOPE_CLI) + " " + args); }

std::vector<std::string> examples() {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(src("examples")))
    if (e.path().extension() == ".json") v.push_back(e.path().string());
  std::sort(v.begin(), v.end());
  return v;
}

// A python3 that can run `import <module>`, or "" (pyenv shims and Debian's /usr/bin/python3 may
// differ in what they have installed; setup-deps.sh installs Debian's python3-numpy).
std::string python_with(const std::string& module) {
  for (const char* py : {"python3", "/usr/bin/python3"})
    if (sh(std::string(py) + " -c 'import " + module + "' >/dev/null").code == 0) return py;
  return "";
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("attnscope_script_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The max abs numbers of the lines "  O   max abs X ..." and "  LSE max abs X ..." of --reference-only.
double stat_of(const std::string& out, const std::string& label) {
  const std::regex re("\\n  " + label + " +max abs ([0-9.e+-]+|inf|nan)");
  std::smatch m;
  if (!std::regex_search(out, m, re)) return -1;
  return std::stod(m[1].str());
}

}  // namespace

TEST(ExportScript, EveryExampleCompilesOnBothPaths) {
  const std::string py = python_with("py_compile");
  if (py.empty()) GTEST_SKIP() << "python3 is not installed";
  const auto ex = examples();
  ASSERT_GE(ex.size(), 8u);
  for (const auto& path : ex) {
    const std::string name = fs::path(path).stem().string();
    SCOPED_TRACE(path);
    const attnscope::CaseSpec shape = attnscope::read_case_file(path).spec;
    if (shape.parallel) continue;  // a partitioned case exports merge.py (test_partition_cli.cpp)
    // a score_mod the script cannot write (dsa-index-bug.json's weight on token 0) is refused, naming the way out
    if (shape.attention.score_mod &&
        !attnscope::lower_score_mod(attnscope::Expr::parse(*shape.attention.score_mod, attnscope::Expr::Kind::kScore))) {
      TempDir d(name + "_refused");
      const Out o = cli("run " + path + " --export-script " + d.str());
      EXPECT_EQ(o.code, 2) << o.out;
      EXPECT_NE(o.out.find("export the case instead (run --export FILE)"), std::string::npos) << o.out;
      continue;
    }
    const bool sinks = shape.has_sinks();
    // SDPA / flex path: the case's own backends but those with a script writer of their own (the
    // FlashInfer path below), default target
    {
      TempDir d(name + "_sdpa");
      const attnscope::CaseSpec spec = attnscope::read_case_file(path).spec;
      std::vector<std::string> sdpa;
      std::string list;
      for (const auto& b : spec.backends)
        if (const auto* f = attnscope::family_of(b); !f || !f->script_part) {
          sdpa.push_back(b);
          list += (list.empty() ? "" : ",") + b;
        }
      const std::string target = attnscope::script_target(sdpa, std::nullopt);
      const Out o = cli("run " + path + " --backends " + list + " --export-script " + d.str());
      ASSERT_TRUE(o.code == 0 || o.code == 3) << o.out;  // 3: a GPU comparison not checked on this machine
      EXPECT_NE(o.out.find("repro script for " + target + " written to"), std::string::npos) << o.out;
      std::vector<std::string> files = {"repro.py", "q.npy", "k.npy", "v.npy", "o_cpu.reference.npy", "case.json"};
      // an FP8 case's own files; cpu.tiled's output where it runs the case (it refuses FP8 here)
      for (const char* f : {"k_scale.npy", "v_scale.npy", "k_orig.npy", "v_orig.npy", "o_ideal_original.npy"})
        if (spec.fp8_kv()) files.push_back(f);
      if (!spec.fp8_kv()) files.push_back("o_cpu.tiled.npy");
      for (const auto& f : files) EXPECT_TRUE(fs::exists(d.path / f)) << f;
      EXPECT_FALSE(fs::exists(d.path / "kv_indices.npy")) << "the page table is for the FlashInfer path only";
      const std::string text = read(d.path / "repro.py");
      if (sinks)  // no library of the script takes sinks: PyTorch eager with the sink column
        EXPECT_NE(text.find("torch.cat([s, sinks.expand("), std::string::npos);
      else
        EXPECT_TRUE(text.find("scaled_dot_product_attention(") != std::string::npos ||
                    text.find("flex_attention)(") != std::string::npos);
      const Out c = sh(py + " -m py_compile " + (d.path / "repro.py").string());
      EXPECT_EQ(c.code, 0) << c.out;
      // case.json is the repro case: it validates and names its environment
      const auto j = nlohmann::json::parse(read(d.path / "case.json"));
      EXPECT_TRUE(j.contains("environment"));
    }
    // FlashInfer path, prefill and decode (decode refuses multi-token queries in the script itself);
    // FlashInfer's prefill and decode take no sinks and no MLA (its MLA wrapper is flashinfer.mla's)
    for (const std::string fi : {"flashinfer.prefill", "flashinfer.decode"}) {
      if (sinks || shape.is_mla()) break;
      TempDir d(name + "_" + fi);
      const Out o = cli("run " + path + " --backends cpu.reference,flashinfer.prefill,flashinfer.decode --script-backend " + fi +
                        " --export-script " + d.str());
      ASSERT_NE(o.code, 2) << o.out;
      for (const char* f : {"repro.py", "k_cache.npy", "v_cache.npy", "qo_indptr.npy", "kv_indptr.npy", "kv_indices.npy",
                            "kv_last_page_len.npy", "case.json"})
        EXPECT_TRUE(fs::exists(d.path / f)) << fi << ": " << f;
      const std::string text = read(d.path / "repro.py");
      EXPECT_NE(
          text.find(fi == "flashinfer.prefill" ? "BatchPrefillWithPagedKVCacheWrapper" : "BatchDecodeWithPagedKVCacheWrapper"),
          std::string::npos);
      const Out c = sh(py + " -m py_compile " + (d.path / "repro.py").string());
      EXPECT_EQ(c.code, 0) << fi << ": " << c.out;
    }
  }
}

TEST(ExportScript, ReferenceOnlyReproducesCpuReference) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  // small cases covering every mask ingredient, soft-cap, sampled reference rows, GQA, paging
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"prefix-lm", ""},
      {"fully-masked-rows", ""},      // documents + padding: fully masked rows, O = 0 and LSE = -inf
      {"gemma2-window-softcap", ""},  // window + soft-cap, reference sampled to 32 rows
      {"llama4-chunked-local", " --backends cpu.reference,flashinfer.prefill --script-backend flashinfer.prefill"},
      {"encoder-headdim32", " --backends cpu.reference,cpu.lowp,cpu.tiled"},
      // issue 28's shapes: sinks in both references, trees in allowed(), MLA's forms as plain Q / K / V
      {"gpt-oss-sinks-sliding", ""},
      {"gpt-oss-sinks-full", ""},
      {"eagle-tree-verify", ""},
      {"deepseek-v3-prefill", ""},
  };
  for (const auto& [name, extra] : cases) {
    SCOPED_TRACE(name);
    TempDir d(name + "_ref");
    const Out o = cli("run " + src("examples/" + name + ".json") + extra + " --export-script " + d.str());
    ASSERT_NE(o.code, 2) << o.out;
    const Out r = sh(py + " " + (d.path / "repro.py").string() + " --reference-only");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("MATCH"), std::string::npos) << r.out;
    // both are fp64 computations stored as float32: far below any bf16/fp16 kernel error (~1e-3)
    const double o_err = stat_of(r.out, "O"), l_err = stat_of(r.out, "LSE");
    EXPECT_GE(o_err, 0) << r.out;
    EXPECT_LE(o_err, 1e-6) << r.out;
    EXPECT_GE(l_err, 0) << r.out;
    EXPECT_LE(l_err, 1e-5) << r.out;
  }
}

TEST(ExportScript, AChangedRecordedReferenceIsAMismatch) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  TempDir d("tamper");
  ASSERT_EQ(cli("run " + src("examples/prefix-lm.json") + " --export-script " + d.str()).code, 0);
  // add 1e-3 to one recorded output value (a bf16-sized error): the script must notice
  const Out t = sh(py + " -c \"import numpy as np; p='" + (d.path / "o_cpu.reference.npy").string() +
                   "'; a=np.load(p); a[3, 1, 7] += 1e-3; np.save(p, a)\"");
  ASSERT_EQ(t.code, 0) << t.out;
  const Out r = sh(py + " " + (d.path / "repro.py").string() + " --reference-only");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("MISMATCH"), std::string::npos) << r.out;
}

TEST(ExportScript, FlashInferFilesRebuildTheSamePagedCache) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  // HND + fragmented pool, NaN-poisoned unused slots, shuffled pages with GQA: gathering the pool
  // through FlashInfer's CSR arrays must give k.npy / v.npy exactly, request by request
  for (const std::string name : {"mixed-prefill-decode-fragmented", "poisoned-pages", "gqa-decode-long"}) {
    SCOPED_TRACE(name);
    TempDir d(name + "_pages");
    const Out o = cli("run " + src("examples/" + name + ".json") +
                      " --backends cpu.reference,flashinfer.prefill --export-script " + d.str());
    ASSERT_NE(o.code, 2) << o.out;
    const std::string layout = nlohmann::json::parse(read(d.path / "case.json"))["kv_cache"]["layout"];
    const std::string check = R"(
import numpy as np, os, sys
d, hnd = sys.argv[1], sys.argv[2] == "HND"
L = lambda n: np.load(os.path.join(d, n + ".npy"))
indptr, idx, last = L("kv_indptr"), L("kv_indices"), L("kv_last_page_len")
assert indptr.dtype == np.int32 and idx.dtype == np.int32
for pool, logical in ((L("k_cache"), L("k")), (L("v_cache"), L("v"))):
    if hnd:
        pool = pool.transpose(0, 2, 1, 3)  # -> [pages, page_size, heads, dim]
    ps = pool.shape[1]
    rows = [pool[idx[indptr[i]:indptr[i + 1]]].reshape(-1, *pool.shape[2:])[:(indptr[i + 1] - indptr[i] - 1) * ps + last[i]]
            for i in range(len(last))]
    got = np.concatenate(rows)
    assert got.shape == logical.shape and np.array_equal(got, logical), "pool through the page table != logical K/V"
    assert not np.isnan(got).any()
print("same cache")
)";
    std::ofstream(d.path / "check.py") << check;
    const Out r = sh(py + " " + (d.path / "check.py").string() + " " + d.str() + " " + layout);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("same cache"), std::string::npos) << r.out;
  }
}

TEST(ExportScript, WithoutTheLibraryTheScriptSaysWhatItNeedsAndExitsTwo) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  if (sh(py + " -c 'import torch; assert torch.cuda.is_available()' >/dev/null").code == 0)
    GTEST_SKIP() << "PyTorch with a GPU is here: the GPU path would run";
  TempDir d("nolib");
  ASSERT_NE(cli("run " + src("examples/gqa-decode-long.json") +
                " --backends cpu.reference,flashinfer.decode --script-backend flashinfer.decode --export-script " + d.str())
                .code,
            2);
  Out r = sh(py + " " + (d.path / "repro.py").string());
  EXPECT_EQ(r.code, 2) << r.out;
  if (sh(py + " -c 'import flashinfer' >/dev/null").code != 0) {
    EXPECT_NE(r.out.find("needs flashinfer-python==0.7.2.post1"), std::string::npos) << r.out;
  }
  TempDir s("nolib_sdpa");
  ASSERT_EQ(cli("run " + src("examples/prefix-lm.json") + " --export-script " + s.str()).code, 0);
  r = sh(py + " " + (s.path / "repro.py").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.rfind("cannot run: needs ", 0), 0u) << r.out;
}

TEST(ExportScript, ScriptRefusesWhatTheApiCannotExpress) {
  // FlashInfer's decode kernel has no custom mask: documents and padding cannot be given to it, and
  // the script says so instead of guessing (exit 2 before any import)
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  TempDir d("refuse");
  ASSERT_NE(cli("run " + src("examples/fully-masked-rows.json") +
                " --backends cpu.reference,flashinfer.decode --script-backend flashinfer.decode --export-script " + d.str())
                .code,
            2);
  const std::string text = read(d.path / "repro.py");
  EXPECT_EQ(text.find("def run_library"), std::string::npos) << "no dead library code when the API cannot run the case";
  const Out r = sh(py + " " + (d.path / "repro.py").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("cannot express this case"), std::string::npos) << r.out;
}

TEST(ExportScript, BrokenUsesAreOneLineErrorsWithExitTwo) {
  const std::string ex = src("examples/prefix-lm.json");
  const fs::path file = fs::temp_directory_path() / ("attnscope_script_file_" + std::to_string(::getpid()));
  std::ofstream(file) << "x";
  TempDir d("broken");
  const std::vector<std::pair<std::string, std::string>> uses = {
      {"run " + ex + " --export-script " + (file / "sub").string(), "error: --export-script: cannot create"},
      {"run " + ex + " --export-script " + d.str() + " --script-backend cuda.flash",
       "error: --script-backend: \"cuda.flash\" is not a backend of this run"},
      {"run " + ex + " --script-backend cpu.tiled", "error: --script-backend: needs --export-script DIR"},
  };
  for (const auto& [args, want] : uses) {
    const Out o = cli(args);
    EXPECT_EQ(o.code, 2) << args << ": " << o.out;
    EXPECT_EQ(o.out.rfind(want, 0), 0u) << args << ": " << o.out;
    EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << o.out;
  }
  fs::remove(file);
}

// The mask zoo's scripts: a mask_mod is written into allowed() as numpy (attnscope's own
// translation), a soft-cap / ALiBi score_mod as the parameters it is; --reference-only then
// reproduces cpu.reference on every zoo case; a score_mod no library takes is refused in one line.
TEST(ExportScript, ZooCasesWriteTheirExpressionAndReproduceTheReference) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  int n = 0;
  for (const auto& e : fs::directory_iterator(src("examples/zoo"))) {
    if (e.path().extension() != ".json") continue;
    const std::string name = e.path().stem().string();
    SCOPED_TRACE(name);
    TempDir d("zoo_" + name);
    const Out o = cli("run " + e.path().string() + " --export-script " + d.str());
    ASSERT_TRUE(o.code == 0 || o.code == 3) << o.out;
    const std::string text = read(d.path / "repro.py");
    if (name != "alibi" && name != "softcap") {
      EXPECT_NE(text.find("MASK_MOD = "), std::string::npos);
    }
    const Out r = sh(py + " " + (d.path / "repro.py").string() + " --reference-only");
    EXPECT_EQ(r.code, 0) << r.out;
    const double o_err = stat_of(r.out, "O");
    EXPECT_GE(o_err, 0) << r.out;
    EXPECT_LE(o_err, 1e-6) << r.out;  // fp64 both sides, stored as float32
    ++n;
  }
  EXPECT_GE(n, 10);
  // a score_mod no script API takes as a parameter
  const std::string c = read(src("examples/zoo/softcap.json"));
  TempDir d("zoo_odd");
  fs::create_directories(d.path);
  std::ofstream(d.path / "odd.json") << std::regex_replace(c, std::regex("30 \\* tanh\\(score / 30\\)"), "score * 0.5");
  const Out o = cli("run " + (d.path / "odd.json").string() + " --export-script " + (d.path / "out").string());
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("writes a score_mod only of the forms"), std::string::npos) << o.out;
}

namespace {

// A small case around `mask_mod`: two requests (documents and a prefix in the first), non-causal so
// that the mask_mod alone decides, cpu.reference only.
nlohmann::json hostile_case(const std::string& mask_mod, const std::string& name = "hostile") {
  return {{"schema", "attnscope/case@1"},
          {"name", name},
          {"requests",
           {{{"q_len", 7}, {"kv_len", 19}, {"doc_starts", {0, 5, 11}}, {"prefix_len", 3}}, {{"q_len", 4}, {"kv_len", 4}}}},
          {"heads", {{"qo", 6}, {"kv", 2}}},
          {"head_dim", {{"qk", 16}, {"vo", 16}}},
          {"dtype", "bf16"},
          {"attention", {{"causal", false}, {"mask_mod", mask_mod}}},
          {"data", {{"seed", 3}, {"std", 1.0}}},
          {"backends", {"cpu.reference"}}};
}

// attnscope's mask of every request of the case, one line of 0 / 1 per request (row-major q, k).
std::string attnscope_mask(const std::string& case_path) {
  const attnscope::CaseFile f = attnscope::read_case_file(case_path);
  const attnscope::Plan p = attnscope::make_plan(f.spec);
  std::string out;
  for (size_t r = 0; r < f.spec.requests.size(); ++r) {
    const attnscope::RowMask& m = p.masks[r];
    for (int q = 0; q < m.q_len; ++q)
      for (int k = 0; k < m.kv_len; ++k) out += attnscope::allowed(m, attnscope::q_abs_of(m, q), k) ? '1' : '0';
    out += '\n';
  }
  return out;
}

// Imports DIR/repro.py and prints its allowed() of every request the same way; NumPy's warnings
// (1 / 0, NaN) are errors, so the script must evaluate without them.
const char* kScriptMask = R"(
import importlib.util, sys
spec = importlib.util.spec_from_file_location("repro", sys.argv[1])
repro = importlib.util.module_from_spec(spec)
spec.loader.exec_module(repro)
for r, qs, ks, q_abs, kk in repro.requests():
    print("".join("1" if x else "0" for x in repro.allowed(r, q_abs, kk).ravel()))
)";

}  // namespace

// Issue 32 item 20: expressions the old translation got wrong (a NameError for inf, a
// ZeroDivisionError, an undefined alibi, integer fmod, NaN propagation, int64 wrap-around, Python's
// nesting limit). The script's mask must be attnscope's, pair for pair.
TEST(ExportScript, HostileMaskModsGiveTheScriptAttnscopesMask) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  std::string blocks;
  for (int i = 0; i < 120; ++i)
    blocks += (i ? " || " : "") + std::string("(q_idx >= ") + std::to_string(i % 19) + " && q_idx < " +
              std::to_string(i % 19 + 2) + " && kv_idx >= " + std::to_string(i % 13) + " && kv_idx < " +
              std::to_string(i % 13 + 3) + ")";
  const std::vector<std::string> exprs = {"kv_idx < 1e400",
                                          "1 / 0 > 0",
                                          "alibi(0)",
                                          "kv_idx % 0",
                                          "kv_idx % 0 == kv_idx % 0",
                                          "min(0 / 0, 1)",
                                          "max(0 / 0, kv_idx - 3)",
                                          "kv_idx * 3037000500 * 3037000500 > 0",
                                          "(kv_idx + 1) * 4294967296 * 4294967296 != 0",
                                          "(q_idx - kv_idx) % 3",
                                          "where(0 / 0, kv_idx < 4, 0)",
                                          "doc(kv_idx) == doc(q_idx) && kv_idx > prefix_len",
                                          "exp(kv_idx * 50) > 1e200",
                                          "alibi(kv_idx) > 0.2",
                                          "tanh(kv_idx / 7) * 1e17 % 7 < 3",
                                          blocks};
  std::ofstream(fs::temp_directory_path() / "attnscope_script_mask.py") << kScriptMask;
  for (size_t i = 0; i < exprs.size(); ++i) {
    SCOPED_TRACE(exprs[i].substr(0, 80));
    TempDir d("hostile_" + std::to_string(i));
    fs::create_directories(d.path);
    std::ofstream(d.path / "c.json") << hostile_case(exprs[i]).dump(2);
    const Out o = cli("run " + (d.path / "c.json").string() + " --export-script " + (d.path / "out").string());
    ASSERT_EQ(o.code, 0) << o.out;
    const Out r = sh(py + " -W error::RuntimeWarning " + (fs::temp_directory_path() / "attnscope_script_mask.py").string() + " " +
                     (d.path / "out/repro.py").string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out, attnscope_mask((d.path / "c.json").string()));
    const Out ref = sh(py + " " + (d.path / "out/repro.py").string() + " --reference-only");
    EXPECT_EQ(ref.code, 0) << ref.out;
  }
  fs::remove(fs::temp_directory_path() / "attnscope_script_mask.py");
}

// A case name or description with a NUL, other control characters, non-ASCII and bytes that are
// not UTF-8 lands in the script as escapes: the script stays ASCII, compiles and runs.
TEST(ExportScript, NamesWithControlCharactersAreEscapedInTheScript) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  TempDir d("names");
  fs::create_directories(d.path);
  static const char kName[] = "nul\0here\x07\r\nimport os  # \xc3\xa9";
  static const char kDescription[] =
      "line\x0b"
      "feed\x0c\x1b[31m \xe2\x80\xa8 end";
  nlohmann::json c = hostile_case("kv_idx <= q_idx", std::string(kName, sizeof kName - 1));
  c["description"] = std::string(kDescription, sizeof kDescription - 1);
  std::ofstream(d.path / "c.json") << c.dump(2, ' ', false, nlohmann::json::error_handler_t::strict);
  const Out o = cli("run " + (d.path / "c.json").string() + " --export-script " + (d.path / "out").string());
  ASSERT_EQ(o.code, 0) << o.out;
  const std::string text = read(d.path / "out/repro.py");
  for (const char ch : text)
    ASSERT_TRUE(ch == '\n' || (ch >= 0x20 && ch < 0x7f)) << "byte " << static_cast<int>(static_cast<unsigned char>(ch));
  EXPECT_NE(text.find("# attnscope repro: nul\\x00here\\x07  import os  # \\u00e9\n"), std::string::npos) << text.substr(0, 400);
  EXPECT_NE(text.find("line\\x0bfeed\\x0c\\x1b[31m \\u2028 end"), std::string::npos) << text.substr(0, 600);
  const Out r = sh(py + " " + (d.path / "out/repro.py").string() + " --reference-only");
  EXPECT_EQ(r.code, 0) << r.out;
}

// Issue 32 item 22: links already inside DIR are replaced, never written through, and the write
// probe opens nothing that is there.
TEST(ExportScript, LinksInsideTheFolderAreNotFollowed) {
  TempDir d("links");
  const fs::path out = d.path / "out", victim = d.path / "victim.txt", missing = d.path / "missing.txt";
  fs::create_directories(out);
  std::ofstream(victim) << "keep me";
  std::ofstream(d.path / "c.json") << hostile_case("kv_idx <= q_idx").dump(2);
  for (const char* name : {"case.json", "repro.py", "q.npy", "o_cpu.reference.npy", ".attnscope-write-probe"})
    fs::create_symlink(victim, out / name);
  fs::create_symlink(missing, out / "k.npy");  // a dangling link must not create its target
  const Out o = cli("run " + (d.path / "c.json").string() + " --export-script " + out.string());
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_EQ(read(victim), "keep me");
  EXPECT_FALSE(fs::exists(missing));
  for (const char* name : {"case.json", "repro.py", "q.npy", "k.npy", "o_cpu.reference.npy"}) {
    EXPECT_FALSE(fs::is_symlink(out / name)) << name;
    EXPECT_TRUE(fs::is_regular_file(out / name)) << name;
  }
  EXPECT_TRUE(fs::is_symlink(out / ".attnscope-write-probe")) << "the probe leaves what is there alone";
  size_t temporaries = 0;
  for (const auto& e : fs::directory_iterator(out)) temporaries += e.path().extension() == ".tmp";
  EXPECT_EQ(temporaries, 0u);
  // --dump DIR writes the same way
  fs::create_symlink(victim, d.path / "meta.json");
  fs::create_symlink(victim, d.path / "v.npy");
  ASSERT_EQ(cli("run " + (d.path / "c.json").string() + " --dump " + d.str()).code, 0);
  EXPECT_EQ(read(victim), "keep me");
  EXPECT_TRUE(fs::is_regular_file(d.path / "meta.json") && !fs::is_symlink(d.path / "meta.json"));
}

// plan --json's PyTorch text of an expression with a literal past double (1e400 reads back as inf):
// Python has no name `inf`, so the text says float("inf"). Run here with numpy standing in for torch.
TEST(ExportScript, PlanJsonTorchTextOfAnInfiniteLiteralRuns) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  TempDir d("torch_inf");
  fs::create_directories(d.path);
  std::ofstream(d.path / "c.json") << hostile_case("kv_idx < 1e400 && kv_idx * 0 != 1e400").dump(2);
  const Out o = cli("plan " + (d.path / "c.json").string() + " --json");
  ASSERT_EQ(o.code, 0) << o.out;
  const std::string torch = nlohmann::json::parse(o.out)["expressions"]["mask_mod"]["torch"];
  EXPECT_NE(torch.find("float(\"inf\")"), std::string::npos) << torch;
  std::ofstream(d.path / "t.py") << "import numpy as np, sys\n"
                                    "_b = lambda x: np.asarray(x) != 0\n"
                                    "kv_idx = np.arange(5)\n"
                                    "print(int(np.sum(_b(" +
                                        torch + "))))\n";
  const Out r = sh(py + " " + (d.path / "t.py").string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "5\n");
}

// issue 26: the library call of a script comes from the target's family descriptor. A family with a
// writer of its own (ScriptPart) writes it, with its label; the other backends get PyTorch's SDPA,
// pinned to the SDPA backend their descriptor names, or no pin.
TEST(ExportScript, TheLibraryCallComesFromTheFamilyDescriptor) {
  const std::string path = src("examples/prefix-lm.json");
  const attnscope::CaseSpec c = attnscope::script_case(attnscope::read_case_file(path).spec);
  const attnscope::Plan plan = attnscope::plan_case(c);
  const std::string ref = attnscope::backend_for_role(attnscope::Role::kReference);
  int writers = 0, pinned = 0;
  for (const std::string& id : attnscope::known_backends()) {
    SCOPED_TRACE(id);
    const attnscope::BackendFamily* f = attnscope::family_of(id);
    const attnscope::BackendInfo* b = attnscope::backend_info(id);
    ASSERT_TRUE(f && b);
    TempDir d("hook");
    cli("run " + path + " --sample-rows 2 --backends " + ref + "," + id + " --script-backend " + id + " --export-script " +
        d.str());
    const std::string py = read(d.path / "repro.py");
    ASSERT_FALSE(py.empty());
    EXPECT_EQ(attnscope::script_api(c, id) == attnscope::ScriptApi::kFamily, f->script_part != nullptr);
    if (f->script_part) {
      ++writers;
      const attnscope::ScriptPart part = f->script_part(c, plan, id);
      EXPECT_NE(py.find("LIBRARY = " + attnscope::py_str(part.label) + "\n"), std::string::npos) << py;
      if (part.refusal.empty()) {
        EXPECT_NE(py.find(part.run_library), std::string::npos);
      }
      continue;
    }
    EXPECT_NE(py.find("LIBRARY = \"SDPA\"\n"), std::string::npos);
    pinned += !b->script_sdpa_backend.empty();
    EXPECT_EQ(py.find("with sdpa_kernel(SDPBackend." + b->script_sdpa_backend + "):") != std::string::npos,
              !b->script_sdpa_backend.empty());
  }
  EXPECT_GT(writers, 0) << "no family writes its own script part";
  EXPECT_GT(pinned, 0) << "no descriptor pins SDPA";
}

// The default target: the first backend whose family writes its own script, else the first that is
// not a baseline (reference or low-precision role), else the first.
TEST(ExportScript, TheDefaultTargetSkipsTheBaselinesByRole) {
  using attnscope::Role;
  std::vector<std::string> baselines = attnscope::backends_with_role(Role::kReference);
  for (const auto& b : attnscope::backends_with_role(Role::kLowp)) baselines.push_back(b);
  ASSERT_GE(baselines.size(), 2u);
  EXPECT_EQ(attnscope::script_target(baselines, std::nullopt), baselines.front());
  std::vector<std::string> run = baselines;
  run.push_back(attnscope::backend_for_role(Role::kPlanTwin));
  EXPECT_EQ(attnscope::script_target(run, std::nullopt), run.back());
  for (const auto& f : attnscope::backend_families()) {
    if (!f.script_part) continue;
    std::vector<std::string> with = run;
    with.push_back(f.backends.back().id);
    EXPECT_EQ(attnscope::script_target(with, std::nullopt), f.backends.back().id);
  }
}

// issue 26's rule for the app: no header from inside a family folder, and no family's id or id
// prefix as a string literal (the registry answers every question about ids).
TEST(ExportScript, TheAppIncludesNoFamilyHeaderAndQuotesNoFamilyId) {
  std::vector<std::string> headers, quoted;
  for (const auto& f : attnscope::backend_families()) {
    quoted.push_back("\"" + f.name + ".");
    for (const auto& e : fs::directory_iterator(src("backends/" + f.name)))
      if (e.path().extension() == ".h" || e.path().extension() == ".cuh") headers.push_back(e.path().filename().string());
  }
  ASSERT_FALSE(headers.empty());
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(src("app"))) {
    const std::string ext = e.path().extension().string();
    if (ext != ".cpp" && ext != ".h") continue;
    ++files;
    std::istringstream in(read(e.path()));
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      const std::string where = e.path().string() + ":" + std::to_string(n) + ": " + line;
      if (line.rfind("#include", 0) == 0) {
        for (const auto& h : headers)
          EXPECT_TRUE(line.find("\"" + h + "\"") == std::string::npos && line.find("/" + h + "\"") == std::string::npos) << where;
      }
      const std::string code = line.substr(0, line.find("//"));  // comments may name ids
      for (const auto& q : quoted) EXPECT_EQ(code.find(q), std::string::npos) << where;
    }
  }
  EXPECT_GT(files, 10);
}

// flashinfer.mla's script: FlashInfer's MLA wrapper on the latent pool (ckv / kpe views of k_cache.npy),
// planned with the case's requests; the non-absorbed form is refused naming the form it takes.
TEST(ExportScript, MlaWritesFlashInfersMlaWrapperAndRefusesTheOtherForm) {
  const std::string py = python_with("py_compile");
  if (py.empty()) GTEST_SKIP() << "python3 is not installed";
  attnscope::CaseSpec c = attnscope::read_case_file(src("tests/data/readme/mla-forms-small.json")).spec;
  TempDir d("mla");
  fs::create_directories(d.path);
  const fs::path non = d.path / "non.json", abs = d.path / "abs.json";
  attnscope::write_text_file(non.string(), attnscope::case_to_text(c));
  attnscope::write_text_file(abs.string(), attnscope::case_to_text(attnscope::mla_other_form(c)));
  for (const std::string id : {"flashinfer.mla", "flashinfer.mla_sm90"}) {
    SCOPED_TRACE(id);
    const fs::path out = d.path / id;
    const Out o = cli("run " + abs.string() + " --backends cpu.reference," + id + " --script-backend " + id +
                      " --export-script " + out.string());
    ASSERT_NE(o.code, 2) << o.out;
    const std::string text = read(out / "repro.py");
    EXPECT_NE(text.find("flashinfer.mla.BatchMLAPagedAttentionWrapper(workspace, backend=\"" +
                        std::string(id == "flashinfer.mla" ? "fa2" : "fa3") + "\")"),
              std::string::npos);
    EXPECT_NE(text.find("ckv_cache, kpe_cache = pool[..., :512], pool[..., 512:]"), std::string::npos);
    EXPECT_EQ(sh(py + " -m py_compile " + (out / "repro.py").string()).code, 0);
  }
  const fs::path out = d.path / "non";
  const Out o = cli("run " + non.string() +
                    " --backends cpu.reference,flashinfer.mla --script-backend flashinfer.mla --export-script " + out.string());
  ASSERT_NE(o.code, 2) << o.out;
  const std::string text = read(out / "repro.py");
  EXPECT_EQ(text.find("def run_library"), std::string::npos);
  EXPECT_NE(text.find("FlashInfer's MLA wrapper runs the absorbed form"), std::string::npos);
}
