// python.sgl_dsa and python.vllm_dsa (backends/python/worker_dsa.py): what attnscope refuses before the
// worker (check()), and, where the engine's package is missing (CI, this project's machines), the worker's
// "not installed: <package>", unsupported and never an error. The adapters' calls run on the GPU against stand-ins
// (test_python_gpu.cpp).
#include <gtest/gtest.h>

#include <cstdlib>

#include "attnscope/registry.h"
#include "attnscope/workload.h"
#include "cli_run.h"
#include "shell.h"

using namespace attnscope;
using attnscope::testing::cli;
using attnscope::testing::numpy_python;
using attnscope::testing::src;

namespace {

bool imports(const std::string& py, const std::string& module) {
  return std::system((py + " -c 'import " + module + "' >/dev/null 2>&1").c_str()) == 0;
}

// What both kernels take: absorbed MLA with DeepSeek's dims, bf16, 64-token pages, top_k 2048 (the
// indexer's, fp64, small), 16 query heads (a divisor of SGLang's padding to 64).
CaseSpec dsa_case() {
  CaseSpec c;
  c.name = "dsa-python";
  c.mla = MlaSpec{};
  c.num_qo_heads = 16;
  c.num_kv_heads = 1;
  c.head_dim_qk = 576;
  c.head_dim_vo = 512;
  c.dtype = DType::kBf16;
  c.kv_cache.page_size = 64;
  c.attention.causal = true;
  c.requests = {{1, 100}, {2, 70}};
  SparseSpec s;
  s.index_heads = 4;
  s.index_head_dim = 16;
  s.scoring = SparseScoring::kFp64;
  c.sparse = s;
  c.backends = {"cpu.reference"};
  validate_case(c);
  return c;
}

}  // namespace

TEST(PythonDsa, RefusesByNameWhatTheEnginesKernelCannotTake) {
  const CaseSpec c = dsa_case();
  for (const char* id : {"python.sgl_dsa", "python.vllm_dsa"}) {
    SCOPED_TRACE(id);
    auto refused = [&](const CaseSpec& x, const std::string& part) {
      const std::string w = refusal(id, x);
      EXPECT_NE(w.find(part), std::string::npos) << "wanted \"" << part << "\" in: " << w;
    };
    EXPECT_EQ(refusal(id, c), "");
    CaseSpec x = c;
    x.sparse.reset();
    validate_case(x);
    refused(x, "runs DeepSeek sparse attention only (/sparse)");
    x = c;
    x.dtype = DType::kFp16;
    refused(x, "FlashMLA's sparse kernel takes bf16 (/dtype is fp16)");
    x = c;
    x.kv_cache.page_size = 16;
    refused(x, "64-token");
    x = c;
    x.kv_cache.layout = KvLayout::kHND;
    refused(x, "paged NHD pool");
    x = c;
    x.attention.soft_cap = 30;
    refused(x, "no soft-cap");
    x = c;
    x.mla->absorbed = false;
    x.num_kv_heads = x.num_qo_heads;
    x.head_dim_qk = x.mla->qk_dim();
    x.head_dim_vo = x.mla->vo_dim();
    validate_case(x);
    refused(x, "does not take MLA's non-absorbed form");
  }
  // SGLang's top-k kernels are built for 2048 and its padding asserts the head count divides 64 / 128;
  // vLLM pads to a multiple and takes any top_k its kernel takes
  CaseSpec x = c;
  x.sparse->top_k = 256;
  validate_case(x);
  EXPECT_NE(refusal("python.sgl_dsa", x).find("built for top_k 2048 (/sparse/top_k is 256)"), std::string::npos);
  EXPECT_EQ(refusal("python.vllm_dsa", x), "");
  x = c;
  x.num_qo_heads = 48;
  validate_case(x);
  EXPECT_NE(refusal("python.sgl_dsa", x).find("asserts that 48 divides it"), std::string::npos) << refusal("python.sgl_dsa", x);
  EXPECT_EQ(refusal("python.vllm_dsa", x), "");
  const BackendInfo* info = backend_info("python.vllm_dsa");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->sparse, SparseRun::kPlan);
  EXPECT_EQ(info->mla, kMlaAbsorbed);
}

// Without sglang / vllm (CI, this project's machines): unsupported, "not installed: <package>", never an
// error; the engine's index buffer was built for the call first (model/src/engine_metadata_dsa.cpp).
TEST(PythonDsa, SaysNotInstalledWithoutTheEnginesPackage) {
  const std::string py = numpy_python();
  if (py.empty()) GTEST_SKIP() << "no Python with NumPy here";
  setenv("ATTNSCOPE_PYTHON", py.c_str(), 1);
  const CaseSpec c = dsa_case();
  const Plan p = plan_case(c);
  const Workload w = make_workload(c, p.pages);
  for (const auto& [id, module, said] : {std::tuple<const char*, const char*, const char*>{
                                             "python.sgl_dsa", "sgl_kernel.flash_mla", "not installed: sgl_kernel ("},
                                         {"python.vllm_dsa", "vllm", "not installed: vllm ("}}) {
    SCOPED_TRACE(id);
    if (imports(py, module)) continue;  // installed: the adapter goes on to want CUDA, not this test's subject
    auto b = make_backend(id);
    const Result r = run_backend(*b, c, p, w, RunOptions{});
    EXPECT_EQ(r.status, Status::kUnsupported) << r.message;
    EXPECT_EQ(r.message.rfind(said, 0), 0u) << r.message;
  }
}

// The CLI on the DSA example: both adapters listed as unsupported with their package named.
TEST(PythonDsa, TheCliNamesTheMissingPackages) {
  const std::string py = numpy_python();
  if (py.empty()) GTEST_SKIP() << "no Python with NumPy here";
  if (imports(py, "sgl_kernel") || imports(py, "vllm")) GTEST_SKIP() << "an engine's package imports in " << py;
  setenv("ATTNSCOPE_PYTHON", py.c_str(), 1);
  const auto o = cli("run " + src("examples/dsa-short-context.json") + " --backends python.sgl_dsa,python.vllm_dsa");
  EXPECT_NE(o.out.find("not installed: sgl_kernel (sgl_kernel.flash_mla.flash_mla_sparse_fwd"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("not installed: vllm ("), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find(" error "), std::string::npos) << o.out;
}
