// The python family: ids python:PATH.py:FUNCTION, a function of the user's own file run by one
// persistent Python worker on the case's inputs (docs/python-backends.md). Its ids are written, not
// listed (BackendFamily::id_prefix), and its code comes with the case: it runs only with permission.
#include <cctype>
#include <filesystem>

#include "attnscope/backend.h"
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
  f.pattern.id = "python:PATH.py:FUNCTION";
  f.pattern.summary = "FUNCTION of your PATH.py on the case's inputs as NumPy arrays, in attnscope's Python worker";
  f.pattern.takes =
      "every dtype (values in float32 arrays), head dim, built-in mask (as each query row's key range, beside causal, "
      "window_left and soft_cap), paged or ragged storage; not ALiBi, a mask_mod or score_mod, sinks, trees, MLA nor FP8; "
      "runs only with --allow-python";
  // the named adapters: attnscope's own Python, on the case's inputs as CPU tensors in this landing
  const std::string masks =
      "every dtype, head dim, built-in mask (each query row's key range as a mask), paged or ragged storage; not ALiBi, a "
      "mask_mod or score_mod, sinks, trees, MLA nor FP8; needs PyTorch (\"PyTorch not importable\" otherwise)";
  f.backends = {
      {"python.sdpa",
       "PyTorch's scaled_dot_product_attention on CPU tensors (fp64) in attnscope's Python worker; the GPU path with a "
       "chosen SDPA backend is not yet",
       masks + "; no soft-cap"},
      {"python.flex_attention",
       "PyTorch's flex_attention (eager, CPU tensors in fp64) with the mask and soft-cap as its score_mod; compiled on the "
       "GPU is not yet",
       masks + "; soft-cap"},
  };
  f.compiled = ATTNSCOPE_FAMILY_COMPILED;
#if ATTNSCOPE_FAMILY_COMPILED
  f.note = "Python backends through attnscope's worker (NumPy arrays; PyTorch tensors over CUDA IPC not yet)";
  f.make = [](const std::string& id) -> std::unique_ptr<Backend> {
    if (id == "python.sdpa") return python::make_python_backend(id, "", "sdpa");
    if (id == "python.flex_attention") return python::make_python_backend(id, "", "flex_attention");
    const auto at = id.rfind(':');
    return python::make_python_backend(id, python_file(id), id.substr(at + 1));
  };
#else
  f.note = ATTNSCOPE_FAMILY_WHY;
#endif
  return f;
}

}  // namespace attnscope
