// The built-versus-running comparison of cudnn_version.h: plain integers and text.
#include "cudnn_version.h"

namespace attnscope::peers::cudnn {

namespace {

// cuDNN 9 numbers versions MAJOR * 10000 + MINOR * 100 + PATCH; cuDNN 8 used MAJOR * 1000.
int major_of(int v) { return v >= 10000 ? v / 10000 : v / 1000; }

}  // namespace

std::string cudnn_version_text(int v) {
  if (v <= 0) return "unknown";
  const int minor = v >= 10000 ? (v / 100) % 100 : (v % 1000) / 100;
  return std::to_string(major_of(v)) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
}

CudnnRuntimeVerdict compare_cudnn_versions(int built, int running, const std::string& path) {
  CudnnRuntimeVerdict r;
  const std::string where = " (" + (path.empty() ? std::string("path unknown") : path) + ")";
  const std::string b = cudnn_version_text(built), n = cudnn_version_text(running);
  r.matches = running == built;
  r.text = r.matches ? "cuDNN " + n + where : "cuDNN built with " + b + ", running " + n + where;
  if (running <= 0) {
    r.reason = "no cuDNN library answered cudnnGetVersion() (built with " + b + ")";
  } else if (major_of(running) != major_of(built)) {
    r.reason = r.text + ": a different major version, whose API the frontend built here cannot use";
  } else if (running < built) {
    r.reason = r.text + ": older than the headers the cuDNN frontend was compiled against";
  } else {
    r.usable = true;
    return r;
  }
  r.reason += "; rebuild against the library that runs (-DATTNSCOPE_CUDNN_ROOT=DIR) or run the one it was built with";
  return r;
}

}  // namespace attnscope::peers::cudnn
