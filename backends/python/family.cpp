// The python family: ids python:PATH.py:FUNCTION, a function of the user's own file run by one
// persistent Python worker on the case's inputs (docs/python-backends.md). Its ids are written, not
// listed (BackendFamily::id_prefix), and its code comes with the case: it runs only with permission.
#include <cctype>
#include <filesystem>

#include "attnscope/backend.h"
#include "attnscope/library_plan.h"
#if ATTNSCOPE_FAMILY_COMPILED
#include "python_family.h"
#endif

namespace attnscope {
namespace {

constexpr const char* kPrefix = "python:";

// PATH and FUNCTION of a python: id (split at the last ':', so a PATH may hold one).
bool split_id(const std::string& id, std::string* path, std::string* fn) {
  if (id.rfind(kPrefix, 0) != 0) return false;
  const std::string rest = id.substr(std::string(kPrefix).size());
  const auto at = rest.rfind(':');
  if (at == std::string::npos) return false;
  *path = rest.substr(0, at);
  *fn = rest.substr(at + 1);
  return true;
}

std::string parse_python_id(const std::string& id) {
  std::string path, fn;
  if (!split_id(id, &path, &fn)) return "a python: backend is python:PATH.py:FUNCTION";
  if (path.size() < 4 || path.compare(path.size() - 3, 3, ".py") != 0) return "PATH must name a .py file";
  bool ident = !fn.empty() && !std::isdigit(static_cast<unsigned char>(fn[0]));
  for (char ch : fn) ident = ident && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
  return ident ? "" : "FUNCTION must be a Python identifier";
}

// The file as the worker opens it and the permission names it: absolute (relative ids are taken
// from the current directory).
std::string python_file(const std::string& id) {
  std::string path, fn;
  if (!split_id(id, &path, &fn)) return "";
  return std::filesystem::absolute(path).lexically_normal().string();
}

}  // namespace

BackendFamily python_family() {
  BackendFamily f;
  f.name = "python";
  f.id_prefix = kPrefix;
  f.parse_id = parse_python_id;
  f.user_code_file = python_file;
  f.pattern = {.id = "python:PATH.py:FUNCTION",
               .summary =
                   "FUNCTION of your PATH.py on the case's inputs, in attnscope's Python worker: PyTorch tensors on "
                   "the GPU (CUDA IPC) where PyTorch has CUDA, else NumPy arrays",
               .takes =
                   "every dtype (values in float32 arrays), head dim, built-in mask (as each query row's key range, "
                   "beside causal, window_left and soft_cap), paged or ragged storage; not ALiBi, a mask_mod or "
                   "score_mod, sinks, trees, MLA nor FP8; runs only with --allow-python"};
  // the named adapters: attnscope's own Python in the worker. With PyTorch on a CUDA device they run on
  // the device inputs (CUDA IPC); elsewhere python.sdpa / python.flex_attention run on CPU tensors in fp64.
  const std::string masks =
      "every dtype, head dim, built-in mask (each query row's key range), paged or ragged storage; not ALiBi, a mask_mod "
      "or score_mod, sinks, trees, MLA nor FP8; needs PyTorch (\"PyTorch not importable\" otherwise)";
  const std::string sdpa_gpu = "; on the GPU the batch's requests one SDPA call each, K / V gathered from the pages";
  f.backends = {
      {.id = "python.sdpa",
       .summary = "PyTorch's scaled_dot_product_attention, PyTorch choosing its backend: on the GPU inputs (CUDA IPC) where "
                  "PyTorch has CUDA, else CPU tensors in fp64",
       .takes = masks + "; no soft-cap" + sdpa_gpu},
  };
  for (const char* b : {"flash", "cudnn", "efficient", "math"})
    f.backends.push_back({.id = std::string("python.sdpa_") + b,
                          .summary = std::string("PyTorch's scaled_dot_product_attention pinned to its ") + b +
                                     " backend (sdpa_kernel), on the GPU inputs; needs PyTorch with CUDA",
                          .takes = masks + "; no soft-cap" + sdpa_gpu + "; a backend that cannot take the case's mask says so"});
  f.backends.push_back(
      {.id = "python.flex_attention",
       .summary = "PyTorch's flex_attention: compiled (torch.compile) on the GPU inputs with the case's mask as its mask_mod "
                  "(a case's mask_mod translated to PyTorch) and its BlockMask, soft-cap and ALiBi as its score_mod; eager "
                  "on CPU tensors in fp64 without CUDA",
       .takes = "every dtype, head dim, built-in mask, mask_mod (as PyTorch code), soft-cap, ALiBi and a score_mod of those "
                "forms, paged or ragged storage; not sinks, trees, MLA nor FP8; needs PyTorch (\"PyTorch not importable\" "
                "otherwise)",
       .mask_mod = Expressions::kFull,
       .score_mod = Expressions::kLowered});
  const std::string engine_takes =
      "bf16 / fp16, paged NHD storage, causal or sliding-window masks (bottom-right) or none, soft-cap; needs its package "
      "(\"not installed: <module>\" otherwise) and PyTorch with CUDA";
  f.backends.push_back({.id = "python.sgl_fa3",
                        .summary = "SGLang's FlashAttention-3 build (sgl_kernel.flash_attn.flash_attn_with_kvcache) fed as "
                                   "SGLang's FlashAttentionBackend feeds it (page_table, cache_seqlens, cu_seqlens_q), on "
                                   "the GPU inputs",
                        .takes = engine_takes});
  f.backends.push_back({.id = "python.vllm_fa",
                        .summary = "vLLM's FlashAttention build (vllm.vllm_flash_attn.flash_attn_varlen_func) fed as vLLM's "
                                   "FlashAttentionImpl feeds it (block_table, seqused_k, cu_seqlens_q), on the GPU inputs",
                        .takes = engine_takes});
  // the engines' DeepSeek sparse attention kernels on the index buffer each engine builds (worker_dsa.py;
  // the buffer is attnscope's model of it, model/src/engine_metadata_dsa.cpp)
  const std::string dsa_takes =
      "DeepSeek sparse attention (/sparse) over absorbed MLA: bf16, head dims 576 / 512, one latent head, a paged NHD "
      "pool of 64-token pages, causal; not fp16 / fp32, FP8, soft-cap nor ALiBi; needs its package (\"not installed: "
      "<package>\" otherwise) and PyTorch with CUDA; O only (no LSE)";
  f.backends.push_back({.id = "python.sgl_dsa",
                        .summary = "SGLang's sparse MLA kernel (sgl_kernel.flash_mla.flash_mla_sparse_fwd) fed as its nsa "
                                   "backend's _forward_flashmla_sparse feeds it: the top-k translated through page_table_1 "
                                   "into token slots, query heads padded to 64 / 128, on the GPU inputs",
                        .takes = dsa_takes + "; top_k 2048 and a head count dividing 64 or a multiple of it",
                        .mla = kMlaAbsorbed,
                        .sparse = SparseRun::kPlan});
  f.backends.push_back({.id = "python.vllm_dsa",
                        .summary = "vLLM's sparse MLA kernel (flash_mla_sparse_fwd of vllm.v1.attention.ops.flashmla) fed "
                                   "as FLASHMLA_SPARSE's _forward_bf16_kv feeds it: the top-k converted into global slots "
                                   "with their valid counts, query heads padded to a multiple of 64 / 128, on the GPU inputs",
                        .takes = dsa_takes,
                        .mla = kMlaAbsorbed,
                        .sparse = SparseRun::kPlan});
  // FlashAttention-3 from the fa3-fwd wheel, forward only (docs/python-backends.md, "FlashAttention-3")
  f.backends.push_back(
      {.id = "python.fa3",
       .summary = "FlashAttention-3 (fa3-fwd 0.0.3's fa3_fwd_interface.flash_attn_varlen_func) on the GPU inputs, K / V "
                  "gathered from the pages into one varlen buffer (this build has no paged KV); FA3's own num_splits and "
                  "scheduler metadata read back beside attnscope's model of them",
       .takes = "bf16, or FP8 e4m3 with /fp8_attention (Q, K, V in e4m3; tensor or head scales as FA3's descale "
                "factors), head dims up to 256 (multiples of 8; 16 in FP8), GQA, causal (bottom-right) or no mask, "
                "padding (seqused_q / seqused_k), soft-cap, paged or ragged storage; not fp16, sliding windows or "
                "local chunks (compiled out of the wheel), ALiBi, prefix-LM, documents, mask_mod / score_mod, sinks, "
                "trees nor MLA; needs fa3_fwd (\"not installed: fa3_fwd\" otherwise) and PyTorch with CUDA",
       .library_plan = true,
       .fp8_kv_scales = fp8_bit(ScaleGranularity::kTensor) | fp8_bit(ScaleGranularity::kHead),
       .fp8_attention = true,
       .lse_base = LseBase::kE});  // FA3's softmax_lse is natural log (its softmax.h: max * scale * ln 2 + log(sum))
  // attnscope's model of FA3's split decision, for `plan`; FA3's own is read back when the call runs
  f.library_plan = [](const CaseSpec& c, const std::vector<WorkUnit>&, LibraryPlans* out) {
    bool asked = false;
    for (const auto& id : c.backends) asked = asked || id == "python.fa3";
    if (!asked) return;
    out->fa3.asked = true;
    out->fa3.source = "python.fa3 reads FA3's own choice back from the call (run)";
    out->fa3.model = model_fa3_plan(fa3_plan_inputs(c, c.split.num_sms));
  };
  f.compiled = ATTNSCOPE_FAMILY_COMPILED;
#if ATTNSCOPE_FAMILY_COMPILED
  f.note = "Python backends through attnscope's worker (PyTorch tensors over CUDA IPC where PyTorch has CUDA, else NumPy)";
  f.make = [](const std::string& id) -> std::unique_ptr<Backend> {
    if (id.rfind("python.", 0) == 0) return python::make_python_backend(id, "", id.substr(7));  // a named adapter
    const auto at = id.rfind(':');
    return python::make_python_backend(id, python_file(id), id.substr(at + 1));
  };
#else
  f.note = ATTNSCOPE_FAMILY_WHY;
#endif
  return f;
}

}  // namespace attnscope
