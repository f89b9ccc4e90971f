// The python family on the GPU (docs/python-backends.md, "On the GPU"): inputs through CUDA IPC as
// PyTorch tensors, CUDA-event timing with the hand-off apart, the named adapters (SDPA per backend,
// compiled FlexAttention, the engines' kernels against PyTorch stand-ins in tests/python/standins) and
// the Triton example, each under the 2x rule against cpu.reference. Skips, saying why, without a GPU,
// or without PyTorch with CUDA (or Triton) in the worker's Python.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>

#include "attnscope/compare.h"
#include "attnscope/registry.h"
#include "case_gen.h"
#include "case_json.h"
#include "fa3_case_gen.h"
#include "gpu_test_util.h"

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

std::string src(const std::string& rel) { return std::string(ATTNSCOPE_SOURCE_DIR) + "/" + rel; }

const char* kModule = R"(import torch
def inputs(b):
    # views of attnscope's device buffers, in the case dtype
    want = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[b.dtype]
    assert b.inputs == "torch"
    assert b.q.is_cuda and b.k_cache.is_cuda and b.block_table.is_cuda, "not on the GPU"
    assert b.q.dtype == want and b.k_cache.dtype == want, (b.q.dtype, want)
    assert b.block_table.dtype == torch.int32 and b.cu_seqlens_q.dtype == torch.int32
    assert b.k_cache.shape == (b.num_pages, b.page_size, b.num_kv_heads, b.head_dim_qk), b.k_cache.shape
    assert int(b.cu_seqlens_q[-1]) == b.total_q == b.q.shape[0]
    assert int(b.kv_indptr[-1]) == b.kv_indices.shape[0]
    return torch.zeros((b.total_q, b.num_qo_heads, b.head_dim_vo), device="cuda")
def zeros(b):
    return torch.zeros((b.total_q, b.num_qo_heads, b.head_dim_vo), device="cuda")
def echo_q(b):
    return b.q.float()
def scribble(b):
    o = b.q.float()
    b.q.zero_()  # a kernel that writes into its inputs: the next call must not see it
    b.k_cache.zero_()
    return o
def boom(b):
    raise ValueError("no kernel today")
def nan_out(b):
    o = zeros(b)
    o[2, 1, 3] = float("nan")
    return o
)";

class PythonGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* env = std::getenv("ATTNSCOPE_PYTHON");
    py_ = env && *env ? env : "python3";
    const std::string probe = py_ + " -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1";
    torch_ = std::system(probe.c_str()) == 0;
    triton_ = std::system((py_ + " -c 'import triton' >/dev/null 2>&1").c_str()) == 0;
    // fa3-fwd's FlashAttention-3 where the worker's Python (with its PYTHONPATH) imports it
    fa3_ = std::system((py_ + " -c 'import fa3_fwd_interface' >/dev/null 2>&1").c_str()) == 0;
    // the engines' stand-ins on the worker's path (the worker starts after this)
    const char* pp = std::getenv("PYTHONPATH");  // kept after the stand-ins: where fa3_fwd may be installed
    setenv("PYTHONPATH", (src("tests/python/standins") + (pp && *pp ? std::string(":") + pp : "")).c_str(), 1);
    dir_ = fs::temp_directory_path() / ("attnscope_pygpu_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "g.py") << kModule;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    REQUIRE_GPU();
    if (!torch_) GTEST_SKIP() << py_ << " has no PyTorch with CUDA (set ATTNSCOPE_PYTHON)";
    allow_all_user_code(true);
    set_user_code_timeout(300);  // torch's import and torch.compile's first compiles
  }
  void TearDown() override {
    allow_all_user_code(false);
    set_user_code_timeout(kDefaultUserCodeTimeout);
  }
  static std::string id(const std::string& fn) { return "python:" + (dir_ / "g.py").string() + ":" + fn; }
  static CaseSpec fixed(std::vector<RequestSpec> reqs, bool causal = true) {
    CaseSpec c;
    c.name = "pygpu";
    c.requests = std::move(reqs);
    c.num_qo_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim_qk = c.head_dim_vo = 128;
    c.kv_cache.page_size = 16;
    c.kv_cache.allocation = PageAlloc::kShuffled;
    c.dtype = DType::kBf16;
    c.attention.causal = causal;
    validate_case(c);
    return c;
  }
  // Runs `id` on c; ok: it must meet the 2x rule (and returns 1); unsupported: 0 with the reason
  // printed; anything else fails.
  static int meets_twice_lowp(const std::string& bid, const CaseSpec& c, int reps = 0) {
    SCOPED_TRACE(bid + " on " + c.name);
    const Plan p = plan_case(c);
    const Workload w = make_workload(c, p.pages);
    RunOptions o;
    o.bench_reps = reps;
    const Result a = attnscope::testing::run_id(bid, c, p, w, o), ref = attnscope::testing::run_id("cpu.reference", c, p, w),
                 low = attnscope::testing::run_id("cpu.lowp", c, p, w);
    if (a.status == Status::kUnsupported) {
      std::cout << "  " << bid << " on " << c.name << ": unsupported: " << a.message << "\n";
      return 0;
    }
    EXPECT_TRUE(a.ok()) << a.message;
    if (!a.ok()) return 0;
    EXPECT_NE(a.message.find("inputs through CUDA IPC"), std::string::npos) << a.message;
    const DiffReport d = compare_results(c, a, ref, {bid, "cpu.reference", CompareRule::kTwiceLowp, 0, 1e-5, "cpu.lowp"}, &low);
    EXPECT_TRUE(d.verdict.pass) << d.verdict.detail;
    std::cout << "  " << bid << " on " << c.name << ": " << a.message << "\n";
    return d.verdict.pass ? 1 : 0;
  }
  static std::vector<CaseSpec> random_cases(int n, int min_dim) {
    std::vector<CaseSpec> out;
    for (uint64_t seed = 0; seed < 200 && static_cast<int>(out.size()) < n; ++seed) {
      attnscope::testing::GenLimits lim;
      lim.max_kv = 200;
      CaseSpec c = attnscope::testing::random_case(seed, lim);
      if (c.attention.alibi || c.head_dim_qk < min_dim || c.head_dim_vo < min_dim) continue;
      out.push_back(c);
    }
    return out;
  }
  static std::string py_;
  static bool torch_, triton_, fa3_;
  static fs::path dir_;
};
std::string PythonGpu::py_;
bool PythonGpu::torch_ = false, PythonGpu::triton_ = false, PythonGpu::fa3_ = false;
fs::path PythonGpu::dir_;

}  // namespace

TEST_F(PythonGpu, InputsAreTheDeviceBuffersAsTensors) {
  for (DType t : {DType::kBf16, DType::kFp16, DType::kFp32}) {
    CaseSpec c = fixed({{5, 40}, {1, 33}});
    c.dtype = t;
    const Plan p = plan_case(c);
    const Result r = attnscope::testing::run_id(id("inputs"), c, p, make_workload(c, p.pages));
    EXPECT_TRUE(r.ok()) << r.message;
    EXPECT_NE(r.message.find("CUDA events"), std::string::npos) << r.message;
  }
}

TEST_F(PythonGpu, FailuresOnTheGpuPathAreStatusesAndTheNextCallRuns) {
  const CaseSpec c = fixed({{5, 40}, {1, 33}});
  const Plan p = plan_case(c);
  const Workload w = make_workload(c, p.pages);
  const Result boom = attnscope::testing::run_id(id("boom"), c, p, w);
  EXPECT_EQ(boom.status, Status::kError);
  EXPECT_NE(boom.message.find("ValueError: no kernel today"), std::string::npos) << boom.message;
  const Result nan = attnscope::testing::run_id(id("nan_out"), c, p, w);
  EXPECT_EQ(nan.status, Status::kError);
  EXPECT_NE(nan.message.find("the first at token 2, head 1"), std::string::npos) << nan.message;
  const Result ok = attnscope::testing::run_id(id("zeros"), c, p, w);
  EXPECT_TRUE(ok.ok()) << ok.message;
}

// The hand-off's fixed cost per call: what `bench` reports beside the function's CUDA-event time.
TEST_F(PythonGpu, HandOffOverheadIsReported) {
  const CaseSpec c = fixed({{1, 4096}, {1, 4096}, {1, 4096}, {1, 4096}});
  const Plan p = plan_case(c);
  RunOptions o;
  o.bench_reps = 20;
  std::vector<double> overheads;
  for (int i = 0; i < 5; ++i) {
    const Result r = attnscope::testing::run_id(id("zeros"), c, p, Workload{}, o);
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_EQ(r.timing.reps, 20);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.message, m, std::regex("hand-off ([0-9.]+) ms"))) << r.message;
    overheads.push_back(std::stod(m[1]));
    std::cout << "  " << r.message << "\n";
  }
  std::sort(overheads.begin(), overheads.end());
  std::cout << "  hand-off overhead per call, median of 5: " << overheads[2] << " ms\n";
  RecordProperty("handoff_ms", std::to_string(overheads[2]));
}

// The worker keeps its IPC mappings while attnscope keeps its allocations (the same sizes): the next
// call opens none and reads that call's bits, even after a function wrote into its inputs; new sizes
// open new mappings.
TEST_F(PythonGpu, HandOffReusesTheWorkersMappingsAndReadsEachCallsBits) {
  auto mappings = [](const Result& r, int* reused, int* opened) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.message, m, std::regex("IPC mappings ([0-9]+) reused, ([0-9]+) opened"))) << r.message;
    *reused = std::stoi(m[1]);
    *opened = std::stoi(m[2]);
  };
  auto echo = [&](const CaseSpec& c, const std::string& fn, int* reused, int* opened) {
    const Plan p = plan_case(c);
    const Workload w = make_workload(c, p.pages);
    const Result r = attnscope::testing::run_id(id(fn), c, p, w);
    ASSERT_TRUE(r.ok()) << r.message;
    ASSERT_EQ(r.o.size(), w.q.size());
    EXPECT_TRUE(r.o == w.q) << fn << " did not return this call's Q (seed " << c.data.seed << ")";
    mappings(r, reused, opened);
  };
  const CaseSpec a = fixed({{5, 40}, {3, 33}});  // head_dim_qk == head_dim_vo: Q is a valid O
  CaseSpec b = a;
  b.data.seed = 7;  // other bits, the same sizes
  CaseSpec wide = fixed({{9, 70}, {3, 33}});
  int reused = 0, opened = 0;
  echo(a, "echo_q", &reused, &opened);
  echo(b, "echo_q", &reused, &opened);
  EXPECT_EQ(opened, 0);
  EXPECT_GE(reused, 5);  // Q, K, V, the metadata and the output allocations
  echo(a, "scribble", &reused, &opened);
  echo(a, "echo_q", &reused, &opened);
  EXPECT_EQ(opened, 0);
  echo(wide, "echo_q", &reused, &opened);
  EXPECT_EQ(reused, 0);
  EXPECT_GE(opened, 5);
  echo(b, "echo_q", &reused, &opened);  // back to the first sizes: new allocations, new mappings
  EXPECT_EQ(reused, 0);
}

TEST_F(PythonGpu, NumpyExampleOnTheGpuPath) {
  const std::string ex = "python:" + src("examples/python/numpy_attention.py") + ":attention";
  int passed = 0;
  for (const CaseSpec& c : random_cases(3, 8)) passed += meets_twice_lowp(ex, c);
  EXPECT_EQ(passed, 3);
}

TEST_F(PythonGpu, TritonExampleMeetsTheTwiceLowpRule) {
  if (!triton_) GTEST_SKIP() << py_ << " has no Triton";
  const std::string ex = "python:" + src("examples/python/triton_attention.py") + ":attention";
  int passed = 0;
  const auto cases = random_cases(attnscope::testing::gpu_cases(8, 3), 8);
  for (const CaseSpec& c : cases) passed += meets_twice_lowp(ex, c);
  passed += meets_twice_lowp(ex, fixed({{64, 300}, {1, 513}, {33, 33}}));
  EXPECT_EQ(passed, static_cast<int>(cases.size()) + 1);
}

TEST_F(PythonGpu, SdpaEachBackendMeetsTheTwiceLowpRuleWhereItRuns) {
  const auto cases = random_cases(attnscope::testing::gpu_cases(4, 2), 8);
  for (const char* bid : {"python.sdpa", "python.sdpa_flash", "python.sdpa_cudnn", "python.sdpa_efficient", "python.sdpa_math"}) {
    int passed = 0;
    // causal with q_len == kv_len, and decode: the forms the flash and cuDNN backends take
    passed += meets_twice_lowp(bid, fixed({{128, 128}, {64, 64}}));
    passed += meets_twice_lowp(bid, fixed({{1, 300}, {1, 77}}));
    for (const CaseSpec& c : cases) passed += meets_twice_lowp(bid, c);
    EXPECT_GE(passed, 1) << bid << " ran no case";
  }
}

TEST_F(PythonGpu, FlexAttentionCompiledMeetsTheTwiceLowpRule) {
  int passed = 0;
  CaseSpec capped = fixed({{40, 100}, {1, 257}, {17, 17}});
  capped.attention.window = 64;
  capped.attention.soft_cap = 30;
  const auto cases = random_cases(attnscope::testing::gpu_cases(3, 1), 16);
  for (const CaseSpec& c : cases) passed += meets_twice_lowp("python.flex_attention", c);
  passed += meets_twice_lowp("python.flex_attention", capped, 5);  // bench: warm-up (the compile), then 5 timed
  EXPECT_EQ(passed, static_cast<int>(cases.size()) + 1);
}

// A case's own mask_mod (translated to PyTorch) and score_mods of the forms the export script writes
// (soft-cap, ALiBi) in the compiled FlexAttention, under the 2x rule.
TEST_F(PythonGpu, FlexAttentionRunsTheCasesMaskModAndScoreMod) {
  std::vector<CaseSpec> cases;
  CaseSpec dilated = fixed({{64, 300}, {1, 257}, {40, 40}}, false);
  dilated.attention.mask_mod = "kv_idx <= q_idx && q_idx - kv_idx < 96 && (q_idx - kv_idx) % 2 == 0";
  cases.push_back(dilated);
  CaseSpec docs = fixed({{80, 200}, {33, 33}}, false);
  docs.attention.mask_mod = "doc(kv_idx) == doc(q_idx) && kv_idx <= q_idx";
  docs.requests[0].doc_starts = {0, 70, 150};
  cases.push_back(docs);
  CaseSpec capped = fixed({{40, 100}, {1, 257}, {17, 17}});
  capped.attention.score_mod = "30 * tanh(score / 30)";
  cases.push_back(capped);
  CaseSpec alibi = fixed({{40, 100}, {1, 257}, {17, 17}});
  alibi.attention.score_mod = "score + alibi(h) * (kv_idx - q_idx)";
  alibi.attention.mask_mod = "q_idx - kv_idx < 64 || kv_idx < 4";  // a sliding window with sink tokens
  cases.push_back(alibi);
  int passed = 0;
  for (CaseSpec& c : cases) {
    validate_case(c);
    passed += meets_twice_lowp("python.flex_attention", c);
  }
  EXPECT_EQ(passed, static_cast<int>(cases.size()));
}

// The engines' packages are too large for the test machine: stand-ins with their signatures
// (tests/python/standins, PyTorch) check that the adapters feed them the engine's metadata.
TEST_F(PythonGpu, EngineAdaptersAgainstStandIns) {
  CaseSpec win = fixed({{40, 100}, {1, 257}, {17, 17}});
  win.attention.window = 64;
  win.attention.soft_cap = 20;
  for (const char* bid : {"python.sgl_fa3", "python.vllm_fa"}) {
    EXPECT_EQ(meets_twice_lowp(bid, fixed({{64, 300}, {1, 513}, {33, 33}})), 1) << bid;
    EXPECT_EQ(meets_twice_lowp(bid, win), 1) << bid;
    CaseSpec docs = fixed({{20, 20}});
    docs.requests[0].doc_starts = {0, 8};
    validate_case(docs);
    const Plan p = plan_case(docs);
    const Result r = attnscope::testing::run_id(bid, docs, p, make_workload(docs, p.pages));
    EXPECT_EQ(r.status, Status::kUnsupported) << r.message;
  }
}

// The engines' DSA adapters (python.sgl_dsa, python.vllm_dsa) against a PyTorch stand-in of FlashMLA's
// flash_mla_sparse_fwd (tests/python/standins/attnscope_mla_standin.py), which reads only what the real
// kernel reads: the adapters' index buffers (slots in a shuffled or fragmented pool, -1 padding, vLLM's
// topk_length) must pick the tokens the references attend, within the 2x rule.
TEST_F(PythonGpu, DsaAdaptersAgainstStandIns) {
  std::vector<CaseSpec> cases;
  for (const char* name : {"deepseek-v32-dsa-decode.json", "dsa-short-context.json"})
    cases.push_back(read_case_file(src("examples/") + name).spec);
  CaseSpec few = cases[1];  // 16 heads (SGLang pads them to 64), a fragmented pool, rows shorter than top_k
  few.name = "dsa-short-16-heads";
  few.num_qo_heads = 16;
  few.kv_cache.allocation = PageAlloc::kFragmented;
  validate_case(few);
  cases.push_back(few);
  for (const char* bid : {"python.sgl_dsa", "python.vllm_dsa"}) {
    int passed = 0;
    for (const CaseSpec& c : cases) passed += meets_twice_lowp(bid, c);
    EXPECT_EQ(passed, static_cast<int>(cases.size())) << bid << " must run every case on the stand-ins";
  }
}

// ---- python.fa3: FlashAttention-3 from the fa3-fwd wheel (docs/python-backends.md, "FlashAttention-3").
// Skips, saying why, where fa3_fwd_interface does not import in the worker's Python (pip install
// --no-deps --target DIR the wheel, then PYTHONPATH=DIR).
#define REQUIRE_FA3() \
  if (!fa3_) GTEST_SKIP() << "fa3_fwd_interface does not import in " << py_ << " (pip install fa3-fwd==0.0.3; PYTHONPATH)"

// Seeded random cases FA3 takes (fa3_case_gen.h: 1-4 requests, decode and prefill, GQA / MQA / MHA, every
// head dim it has, causal or not, soft-cap, paged NHD / HND or ragged storage), under the 2x rule.
TEST_F(PythonGpu, Fa3RandomCasesMeetTheTwiceLowpRule) {
  REQUIRE_FA3();
  const int n = attnscope::testing::gpu_cases(24, 6);
  int passed = 0;
  for (int seed = 1; seed <= n; ++seed) {
    CaseSpec c = attnscope::testing::fa3_random_case(seed);
    validate_case(c);
    ASSERT_EQ(refusal("python.fa3", c), "") << c.name;
    passed += meets_twice_lowp("python.fa3", c);
  }
  EXPECT_EQ(passed, n);
}

// FA3's own plan read back from the call (num_splits from its partials, get_scheduler_metadata per
// request) beside attnscope's model for the device's SMs: printed, and equal on every field read back.
TEST_F(PythonGpu, Fa3ReadsBackItsOwnPlanBesideTheModel) {
  REQUIRE_FA3();
  CaseSpec decode = fixed({{1, 1000}, {1, 2000}, {1, 500}, {1, 3000}});
  decode.num_qo_heads = 32;
  decode.num_kv_heads = 8;
  CaseSpec prefill = fixed({{300, 900}, {64, 64}, {1, 2048}});
  CaseSpec off = decode;
  off.split.planner = Planner::kOff;
  CaseSpec pinned = decode;
  pinned.split.planner = Planner::kFixed;
  pinned.split.fixed_split_size = 16;  // 256 keys: ceil(3000 / 256) = 12 splits
  for (CaseSpec* c : {&decode, &prefill, &off, &pinned}) {
    validate_case(*c);
    const Plan p = plan_case(*c);
    const Result r = attnscope::testing::run_id("python.fa3", *c, p, make_workload(*c, p.pages));
    ASSERT_TRUE(r.ok()) << r.message;
    std::cout << r.library_plan;
    EXPECT_NE(r.library_plan.find("FA3 agrees with the model on every field read back"), std::string::npos) << r.library_plan;
    EXPECT_EQ(r.library_plan.find("get_scheduler_metadata failed"), std::string::npos) << r.library_plan;
  }
}

// Padding (pad_start): FA3 computes the rows before it over the keys before it (seqused_q / seqused_k);
// the rows past it see no key: O 0 and LSE -inf, where cpu.reference has them.
TEST_F(PythonGpu, Fa3FullyMaskedRowsArePaddingRows) {
  REQUIRE_FA3();
  for (bool causal : {true, false}) {
    CaseSpec c = fixed({{8, 40}, {1, 33}, {6, 20}}, causal);
    c.requests[0].pad_start = 36;  // rows at positions 36..39 fully masked
    c.requests[2].pad_start = 10;  // every row of request 2 (positions 14..19)
    validate_case(c);
    EXPECT_EQ(meets_twice_lowp("python.fa3", c), 1);
    const Plan p = plan_case(c);
    const Result r = attnscope::testing::run_id("python.fa3", c, p, make_workload(c, p.pages));
    ASSERT_TRUE(r.ok()) << r.message;
    ASSERT_EQ(r.lse.size(), static_cast<size_t>(c.total_q()) * c.num_qo_heads);
    for (int t : {4, 5, 6, 7, 9, 10, 11, 12, 13, 14})
      for (int hd = 0; hd < c.num_qo_heads; ++hd) {
        EXPECT_TRUE(std::isinf(r.lse[t * c.num_qo_heads + hd]) && r.lse[t * c.num_qo_heads + hd] < 0) << "token " << t;
        EXPECT_EQ(r.o[(static_cast<size_t>(t) * c.num_qo_heads + hd) * c.head_dim_vo], 0.0f) << "token " << t;
      }
  }
}

// FP8 e4m3 attention (Q, K, V in FP8; tensor and head scales as FA3's descale factors) against the
// dequantised ideal. FA3's FP8 path rounds P to e4m3 for the P.V product (scaled by 2^8 first: hopper/
// softmax.h's max_offset), so the bound is 2 x cpu.lowp's error plus P's rounding, as FlashInferFp8's
// (test_flashinfer_fp8.cpp): 2^-4 relative of sum P |v|, plus kv x e4m3's half subnormal spacing / 2^8.
TEST_F(PythonGpu, Fa3Fp8AgainstTheDequantisedIdeal) {
  REQUIRE_FA3();
  for (ScaleGranularity gr : {ScaleGranularity::kTensor, ScaleGranularity::kHead}) {
    CaseSpec c = fixed({{40, 300}, {1, 700}, {17, 17}}, gr == ScaleGranularity::kTensor);
    c.name = std::string("fa3-fp8-") + (gr == ScaleGranularity::kTensor ? "tensor" : "head");
    c.kv_cache.fp8 = Fp8Format::kE4M3;
    c.kv_cache.scales.granularity = gr;
    c.fp8_attention = Fp8AttentionSpec{};
    validate_case(c);
    const Plan p = plan_case(c);
    const Workload w = make_workload(c, p.pages);
    const Result a = attnscope::testing::run_id("python.fa3", c, p, w),
                 ref = attnscope::testing::run_id("cpu.reference", c, p, w),
                 low = attnscope::testing::run_id("cpu.lowp", c, p, w);
    ASSERT_TRUE(a.ok()) << c.name << ": " << a.message;
    std::cout << "  python.fa3 on " << c.name << ": " << a.message << "\n";
    Workload wa = w;  // sum_j P_j |v_j| / l: the reference over |V|
    double vmax = 0;
    const double smax = *std::max_element(w.v_scale.begin(), w.v_scale.end());
    for (float& x : wa.v_pool) {
      x = std::abs(x);
      if (std::isfinite(x)) vmax = std::max(vmax, x * smax);
    }
    const Result oabs = attnscope::testing::run_id("cpu.reference", c, p, wa);
    int kv_max = 0;
    for (const RequestSpec& r : c.requests) kv_max = std::max(kv_max, r.kv_len);
    double lowp_max = 0, worst_excess = -1;
    for (size_t i = 0; i < ref.o.size(); ++i)
      if (std::isfinite(ref.o[i])) lowp_max = std::max(lowp_max, std::abs(double(low.o[i]) - ref.o[i]));
    int64_t bad = 0;
    for (size_t i = 0; i < ref.o.size(); ++i) {
      const double allowed =
          std::max(2 * lowp_max, 1e-5) + std::ldexp(1.0, -4) * oabs.o[i] + kv_max * std::ldexp(1.0, -10) / 256 * vmax;
      const double e = std::abs(double(a.o[i]) - ref.o[i]);
      worst_excess = std::max(worst_excess, e - allowed);
      bad += !(e <= allowed);
    }
    EXPECT_EQ(bad, 0) << c.name << ": worst excess " << worst_excess;
    const DiffReport d = compare_results(c, a, ref, {"python.fa3", "cpu.reference", CompareRule::kMaxAbs, 0, 1.0, ""}, &low);
    EXPECT_EQ(d.lse.nonfinite_mismatch, 0);
    EXPECT_LT(d.lse.max_abs, 0.02) << c.name << ": FP8 Q.K in the wgmma's ~14-bit accumulation";
    EXPECT_NE(a.library_plan.find("e4m3"), std::string::npos) << a.library_plan;
  }
}

// On the GPU too, what the wheel compiled out is refused by name, with no call.
TEST_F(PythonGpu, Fa3RefusesWhatTheWheelCompiledOut) {
  REQUIRE_FA3();
  CaseSpec fp16 = fixed({{5, 40}});
  fp16.dtype = DType::kFp16;
  CaseSpec win = fixed({{5, 40}});
  win.attention.window = 8;
  CaseSpec docs = fixed({{20, 20}});
  docs.requests[0].doc_starts = {0, 8};
  const std::pair<CaseSpec*, const char*> want[] = {
      {&fp16, "FLASHATTENTION_DISABLE_FP16"}, {&win, "FLASHATTENTION_DISABLE_LOCAL"}, {&docs, "not prefix-LM or documents"}};
  for (const auto& [c, part] : want) {
    validate_case(*c);
    const Plan p = plan_case(*c);
    const Result r = attnscope::testing::run_id("python.fa3", *c, p, make_workload(*c, p.pages));
    EXPECT_EQ(r.status, Status::kUnsupported) << r.message;
    EXPECT_NE(r.message.find(part), std::string::npos) << r.message;
  }
}
