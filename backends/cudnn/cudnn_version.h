// Which cuDNN runs against which it was built with (issue 47): the loader may find another
// libcudnn.so.9 than the one CMake linked, and the frontend compiled against newer headers
// then fails inside cuDNN. Pure host code (no cuDNN), compiled and tested in every build.
#pragma once

#include <string>

namespace attnscope::peers::cudnn {

// "9.19.0" from cuDNN's integer version (CUDNN_VERSION / cudnnGetVersion(): 91900; cuDNN 8: 8907).
std::string cudnn_version_text(int version);

struct CudnnRuntimeVerdict {
  bool usable = false;   // the frontend can run on the loaded library
  bool matches = false;  // running the version it was built with
  std::string text;      // "cuDNN 9.19.0 (PATH)" or "built with 9.19.0, running 9.14.0 (PATH)"
  std::string reason;    // when !usable: why cudnn.* report unsupported (text and the rule)
};

// built: CUDNN_VERSION of the headers; running: cudnnGetVersion() (0: none loaded); path: the
// loaded library's file. Same major and running >= built is usable: cuDNN keeps its API within a
// major, but an older library lacks what the headers (and the frontend built on them) may ask for.
CudnnRuntimeVerdict compare_cudnn_versions(int built, int running, const std::string& path);

}  // namespace attnscope::peers::cudnn
