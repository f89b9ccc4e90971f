// The cudnn family entry: its ids, the cuDNN and frontend versions, the factory.
#include "attnscope/backend.h"
#include "cudnn_graph.h"
#include "cudnn_sdpa.h"

namespace attnscope {

BackendFamily cudnn_family() {
  BackendFamily f;
  f.name = "cudnn";
  f.ids = {"cudnn.sdpa"};
  f.compiled = true;
  f.note = peers::cudnn::cudnn_version_note();
  f.make = [](const std::string&) -> std::unique_ptr<Backend> { return peers::cudnn::make_sdpa_backend(); };
  return f;
}

}  // namespace attnscope
