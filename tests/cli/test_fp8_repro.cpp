// Repro of FP8 cases (issue 27, item 7): `run --export` carries the FP8 settings and the exported
// file replays bit for bit at every scale granularity and with FP8 attention; `run --export-script`
// writes the stored values, scales and originals, and a script whose --reference-only mode (numpy
// only) reproduces both of attnscope's ideals, and whose library call rebuilds the FP8 cache with
// PyTorch's FP8 dtypes (FlashInfer: kv_data_type and run()'s scales; SDPA: dequantised first). The
// library calls themselves run on a GPU machine; here the text is checked and compiled.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscope/registry.h"
#include "case_json.h"
#include "fp8_stats.h"
#include "shell.h"

namespace fs = std::filesystem;

namespace {

using attnscope::testing::sh;
using Out = attnscope::testing::ShellOut;

Out cli(const std::string& args) { return sh(std::string(ATTNSCOPE_CLI) + " " + args); }

std::string python_with(const std::string& module) {
  for (const char* py : {"python3", "/usr/bin/python3"})
    if (sh(std::string(py) + " -c 'import " + module + "' >/dev/null").code == 0) return py;
  return "";
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("attnscope_fp8_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

std::string read(const std::string& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A small FP8 case: a decode request and a short prefill on a shuffled, poisoned pool with GQA, so
// the token scales' logical order differs from the pool's.
struct Fp8Case {
  std::string tag;
  std::string format = "fp8_e4m3";
  std::string granularity = "tensor";
  nlohmann::json k = "amax", v = "amax";
  nlohmann::json q_scale;  // null: no /fp8_attention
  std::vector<std::string> backends = {"cpu.reference", "cpu.lowp"};
  bool decode = false;  // every request q_len 1 (FlashInfer's decode runs nothing else)
};

nlohmann::json case_json(const Fp8Case& f) {
  nlohmann::json j = {{"schema", "attnscope/case@1"},
                      {"name", "fp8-" + f.tag},
                      {"requests", {{{"q_len", 1}, {"kv_len", 70}}, {{"q_len", f.decode ? 1 : 5}, {"kv_len", 37}}}},
                      {"heads", {{"qo", 4}, {"kv", 2}}},
                      {"head_dim", 32},
                      {"dtype", "bf16"},
                      {"kv_cache",
                       {{"page_size", 8},
                        {"allocation", "shuffled"},
                        {"allocation_seed", 5},
                        {"poison_unused", true},
                        {"dtype", f.format},
                        {"scales", {{"granularity", f.granularity}, {"k", f.k}, {"v", f.v}}}}},
                      {"data", {{"seed", 7}, {"outliers", {{"channels", {3}}, {"scale", 20.0}}}}},
                      {"backends", f.backends}};
  if (!f.q_scale.is_null()) j["fp8_attention"] = {{"q_scale", f.q_scale}};
  return j;
}

std::vector<Fp8Case> every_granularity() {
  std::vector<Fp8Case> v;
  v.push_back({"tensor-amax"});
  Fp8Case t{"tensor-given"};
  t.k = 0.0123456789012345678;
  t.v = 0.00390625;
  v.push_back(t);
  Fp8Case h{"head-given", "fp8_e5m2", "head"};
  h.k = {0.001, 0.25};
  v.push_back(h);
  v.push_back({"head-amax", "fp8_e4m3", "head"});
  v.push_back({"token-amax", "fp8_e4m3", "token"});
  Fp8Case a{"attention-amax"};
  a.q_scale = "amax";
  v.push_back(a);
  Fp8Case g{"attention-given", "fp8_e5m2", "tensor"};
  g.q_scale = 0.0009765625;
  g.k = 0.002;
  v.push_back(g);
  return v;
}

std::string write_case(const TempDir& d, const Fp8Case& f) {
  const std::string p = d / (f.tag + ".json");
  std::ofstream(p) << case_json(f).dump(2);
  return p;
}

}  // namespace

// The exported file keeps /kv_cache/dtype, /kv_cache/scales (a given number keeps its value, "amax"
// stays "amax") and /fp8_attention, and running it gives every backend's recorded bits again.
TEST(Fp8Repro, ExportedCasesReplayBitForBitAtEveryGranularity) {
  for (const Fp8Case& f : every_granularity()) {
    SCOPED_TRACE(f.tag);
    TempDir d(f.tag + "_export");
    const std::string in = write_case(d, f), out = d / "repro.json";
    const Out o = cli("run " + in + " --export " + out + " --json");
    ASSERT_EQ(o.code, 0) << o.out;
    const auto first = nlohmann::json::parse(o.out);
    const auto r = nlohmann::json::parse(read(out));
    EXPECT_EQ(r["kv_cache"]["dtype"], f.format);
    EXPECT_EQ(r["kv_cache"]["scales"]["granularity"], f.granularity);
    EXPECT_EQ(r["kv_cache"]["scales"]["k"], f.k);
    EXPECT_EQ(r["kv_cache"]["scales"]["v"], f.v);
    if (f.q_scale.is_null())
      EXPECT_FALSE(r.contains("fp8_attention"));
    else
      EXPECT_EQ(r["fp8_attention"]["q_scale"], f.q_scale);
    ASSERT_EQ(r["recorded"]["digests"].size(), f.backends.size());

    const Out again = cli("run " + out + " --json");
    ASSERT_EQ(again.code, 0) << again.out;
    const auto second = nlohmann::json::parse(again.out);
    int replayed = 0;
    for (const auto& x : second["replay"]) {
      if (x["kind"] != "digest") continue;
      EXPECT_EQ(x["state"], "bit-identical") << x.dump();
      ++replayed;
    }
    EXPECT_EQ(replayed, static_cast<int>(f.backends.size()));
    for (size_t i = 0; i < f.backends.size(); ++i) EXPECT_EQ(second["results"][i]["digest"], first["results"][i]["digest"]);
  }
}

// The exported digests are those of the FP8 case, not of its bf16 twin: replaying a file whose FP8
// settings were dropped is a DIFFERS (the check above would not see a reader that ignored them).
TEST(Fp8Repro, AReplayWithoutTheFp8SettingsDiffers) {
  TempDir d("dropped");
  Fp8Case f{"dropped"};
  f.k = 0.05;
  const std::string out = d / "repro.json";
  ASSERT_EQ(cli("run " + write_case(d, f) + " --export " + out).code, 0);
  auto r = nlohmann::json::parse(read(out));
  r["kv_cache"].erase("dtype");
  r["kv_cache"].erase("scales");
  std::ofstream(d / "bf16.json") << r.dump(2);
  const Out o = cli("run " + d / "bf16.json");
  EXPECT_EQ(o.code, 1) << o.out;
  EXPECT_NE(o.out.find("DIFFERS"), std::string::npos) << o.out;
}

// --reference-only recomputes both ideals in fp64 from the exported files (stored values times their
// scales; the originals) and matches attnscope's to float32 rounding at every granularity.
TEST(Fp8Repro, ScriptReferenceOnlyReproducesBothIdeals) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  for (const Fp8Case& f : every_granularity()) {
    SCOPED_TRACE(f.tag);
    TempDir d(f.tag + "_script");
    const Out o = cli("run " + write_case(d, f) + " --export-script " + (d / "s"));
    ASSERT_EQ(o.code, 0) << o.out;
    const Out r = sh(py + " " + (d / "s/repro.py") + " --reference-only");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("fp64 dequantised ideal vs attnscope's ideal_dequantised"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("fp64 original ideal vs attnscope's ideal_original"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\nMATCH"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("dequantised vs original ideal"), std::string::npos) << r.out;
  }
}

// The files hold what the script says: stored values that are FP8 numbers of the case's format,
// scales in the documented shapes (the amax recipe's value where computed), originals that the stored
// values times their scales approximate to FP8's precision, and Q's under FP8 attention.
TEST(Fp8Repro, ScriptFilesHoldStoredValuesScalesAndOriginals) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  for (const Fp8Case& f : every_granularity()) {
    SCOPED_TRACE(f.tag);
    TempDir d(f.tag + "_files");
    ASSERT_EQ(cli("run " + write_case(d, f) + " --export-script " + (d / "s")).code, 0);
    const bool e4m3 = f.format == "fp8_e4m3";
    std::ofstream(d / "check.py") << R"PY(
import os, sys
import numpy as np
d, gran, e4m3, attention = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
given = {"k": sys.argv[5], "v": sys.argv[6], "q": sys.argv[7]}
L = lambda n: np.load(os.path.join(d, n + ".npy"))
mant, top, tiny = (3, 448.0, 2.0 ** -9) if e4m3 else (2, 57344.0, 2.0 ** -16)


def is_fp8(x):
    x = x.astype(np.float64)
    m, _ = np.frexp(x)
    normal = (m * 2 ** (mant + 1)) == np.round(m * 2 ** (mant + 1))
    sub = (x / tiny) == np.round(x / tiny)
    return bool(np.all((np.abs(x) <= top) & (normal | sub)))


def bcast(s):
    return s.reshape(s.shape[0], -1, 1) if s.ndim == 2 else s.reshape(1, -1, 1)


def recipe(orig, g):
    """amax / the format's max per group, in double, rounded once to float; an all-zero group gets 1"""
    a = np.abs(orig).astype(np.float64)
    m = {"tensor": a.max().reshape(1), "head": a.max(axis=(0, 2)), "token": a.max(axis=2)}[g]
    return np.where(m > 0, m / top, 1.0).astype(np.float32)


k, v, q = L("k"), L("v"), L("q")
T, H = k.shape[0], k.shape[1]
for name, x in (("k", k), ("v", v)) + ((("q", q),) if attention else ()):
    g = gran if name != "q" else "tensor"
    s = L(name + "_scale")
    assert s.shape == {"tensor": (1,), "head": (H,), "token": (T, H)}[g], (name, s.shape)
    assert s.dtype == np.float32 and np.all(s > 0), name
    assert is_fp8(x), name + ".npy holds a value that is not FP8"
    orig = L(name + "_orig")
    assert orig.shape == x.shape, name
    if given[name] == "amax":
        assert np.array_equal(s, recipe(orig, g)), (name, s, recipe(orig, g))
    else:
        assert np.array_equal(s, np.asarray(eval(given[name]), dtype=np.float64).astype(np.float32).reshape(s.shape)), name
    # round to nearest: within half an FP8 step of the original (relative 2^-(mant+1)), or of a subnormal
    # step, unless saturated at the format's max
    deq = x.astype(np.float64) * bcast(s)
    err = np.abs(deq - orig)
    bound = np.abs(orig) * 2.0 ** -(mant + 1) + bcast(s) * tiny
    ok = (err <= bound * (1 + 1e-6)) | (np.abs(x) == top)
    assert np.all(ok), (name, float((err - bound).max()))
print("files ok")
)PY";
    auto arg = [](const nlohmann::json& x) {  // appends: GCC 12's false -Wrestrict on "'" + std::string&&
      return x.is_string() || x.is_null() ? std::string("amax") : std::string("'").append(x.dump()).append("'");
    };
    const Out r = sh(py + " " + (d / "check.py") + " " + (d / "s") + " " + f.granularity + " " + (e4m3 ? "1" : "0") + " " +
                     (f.q_scale.is_null() ? "0" : "1") + " " + arg(f.k) + " " + arg(f.v) + " " + arg(f.q_scale));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("files ok"), std::string::npos) << r.out;
    EXPECT_EQ(fs::exists(d / "s/q_orig.npy"), !f.q_scale.is_null());
  }
}

// The SDPA path rebuilds the FP8 tensors in PyTorch and dequantises to the dtype before the call (and
// says so); the FlashInfer path passes the FP8 dtypes to plan() and the per-tensor scales to run(),
// with the argument names of FlashInfer's Python API; every script compiles.
TEST(Fp8Repro, ScriptTextRebuildsTheFp8CacheForEachLibrary) {
  const std::string py = python_with("py_compile");
  if (py.empty()) GTEST_SKIP() << "python3 is not installed";
  struct Want {
    Fp8Case f;
    std::string target;
    std::vector<std::string> has;
  };
  Fp8Case e5{"e5m2", "fp8_e5m2"};
  Fp8Case att{"attention"};
  att.q_scale = "amax";
  Fp8Case tok{"token", "fp8_e4m3", "token"};
  const std::vector<Want> wants = {
      {Fp8Case{"sdpa"},
       "cpu.lowp",
       {"TORCH_FP8 = \"fp8_e4m3\", \"float8_e4m3fn\"", "def dequantised_lowp(torch, q, k, v):", "x8 = t.to(f8)",
        "Q, K and V go in dequantised to DTYPE", "run_library(torch, ql, kl, vl)", "naive_lowp(torch, ql, kl, vl)",
        "fp8_summary(o_lib, o_ref, o_orig)", "scaled_dot_product_attention("}},
      {e5,
       "flashinfer.decode",
       {"kv_dt = torch.float8_e5m2", "q_dt = dt", "q_data_type=q_dt, kv_data_type=kv_dt, o_data_type=dt",
        "k_scale=k_scale, v_scale=v_scale, return_lse=True", "BatchDecodeWithPagedKVCacheWrapper",
        "k_scale, v_scale = (float(load(n)[0]) for n in (\"k_scale\", \"v_scale\"))"}},
      {Fp8Case{"prefill"},
       "flashinfer.prefill",
       {"kv_dt = torch.float8_e4m3fn", "kv_data_type=kv_dt", "k_scale=k_scale, v_scale=v_scale,", "backend=\"fa2\""}},
      {att,
       "flashinfer.prefill_sm90",
       {"q_dt = kv_dt", "q_scale=q_scale, k_scale=k_scale, v_scale=v_scale,", "backend=\"fa3\"", "o_data_type=dt",
        "FP8_ATTENTION = True"}},
      // what FlashInfer's Python API cannot take: said in the script, which exits 2
      {tok, "flashinfer.decode", {"cannot(\"FlashInfer decode cannot express this case: FlashInfer's wrappers take one k_scale"}},
      {att, "flashinfer.decode", {"not FP8 attention (an FP8 query, /fp8_attention): its fa3 (SM90) prefill runs that"}},
      {Fp8Case{"fa3-bf16-q"}, "flashinfer.prefill_sm90", {"takes an FP8 KV cache only with an FP8 query"}},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.f.tag + " " + w.target);
    TempDir d(w.f.tag + "_text");
    Fp8Case f = w.f;
    if (w.target != "cpu.lowp") f.backends.push_back(w.target);
    f.decode = w.target == "flashinfer.decode";
    const Out o = cli("run " + write_case(d, f) + " --script-backend " + w.target + " --export-script " + (d / "s"));
    ASSERT_NE(o.code, 2) << o.out;
    const std::string text = read(d / "s/repro.py");
    for (const auto& h : w.has) EXPECT_NE(text.find(h), std::string::npos) << h;
    const Out c = sh(py + " -m py_compile " + (d / "s/repro.py"));
    EXPECT_EQ(c.code, 0) << c.out;
  }
}

// A case FlashInfer's API cannot express: the script runs its --reference-only check all the same
// and, run for the library, says why and exits 2 before it needs PyTorch.
TEST(Fp8Repro, ARefusedScriptStillChecksTheIdealsAndExitsTwo) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy (Debian: python3-numpy, installed by scripts/setup-deps.sh)";
  TempDir d("refused");
  Fp8Case f{"refused", "fp8_e4m3", "head"};
  f.backends = {"cpu.reference", "flashinfer.decode"};
  f.decode = true;
  ASSERT_NE(cli("run " + write_case(d, f) + " --export-script " + (d / "s")).code, 2);
  const Out ref = sh(py + " " + (d / "s/repro.py") + " --reference-only");
  EXPECT_EQ(ref.code, 0) << ref.out;
  const Out run = sh(py + " " + (d / "s/repro.py"));
  EXPECT_EQ(run.code, 2) << run.out;
  EXPECT_NE(run.out.find("not head scales"), std::string::npos) << run.out;
}

// Scales given far too small clamp nearly every K and V value: the CLI's fp8 line says how many (the
// GUI's counts, fp8_stats.h), not only the quantisation error they cause; amax scales clamp none.
TEST(Fp8Cli, TheFp8LineCountsSaturatedElements) {
  TempDir d("saturate");
  const std::string text = R"({"schema": "attnscope/case@1", "name": "saturating-scales",
    "requests": [{"q_len": 3, "kv_len": 40}, {"q_len": 1, "kv_len": 17}], "heads": {"qo": 4, "kv": 2},
    "head_dim": 32, "dtype": "bf16", "data": {"seed": 5},
    "kv_cache": {"page_size": 8, "dtype": "fp8_e4m3", "scales": {"granularity": "tensor", "k": 0.00005, "v": 0.00002}},
    "backends": ["cpu.reference", "cpu.lowp"]})";
  std::ofstream(d.path / "case.json") << text;
  const attnscope::CaseFile f = attnscope::parse_case_text(text);
  const attnscope::Fp8Data data = attnscope::build_fp8_data(f.spec, attnscope::plan_case(f.spec).pages);
  ASSERT_TRUE(data.available) << data.why;
  EXPECT_GT(data.k.saturated, data.k.elements * 9 / 10);
  EXPECT_GT(data.v.saturated, data.v.elements * 9 / 10);
  const Out o = cli("run " + (d.path / "case.json").string());
  const std::string want = "fp8     K: " + std::to_string(data.k.saturated) + " of " + std::to_string(data.k.elements) +
                           " elements saturated, V: " + std::to_string(data.v.saturated) + " of " +
                           std::to_string(data.v.elements) + " (clamped to +-448); quantisation error";
  EXPECT_NE(o.out.find(want), std::string::npos) << want << "\n" << o.out;
  const Out amax =
      cli("run " + attnscope::testing::src("examples/fp8-kv-per-token-fragmented.json") + " --backends cpu.reference");
  EXPECT_NE(amax.out.find("fp8     quantisation error"), std::string::npos) << amax.out;
}
