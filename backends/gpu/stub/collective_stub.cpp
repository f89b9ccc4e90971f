// Built without CUDA or without NCCL (backends/gpu/CMakeLists.txt): the gather across GPUs says why not.
#include "attnscope/collective.h"

namespace attnscope {

std::string gather_unavailable(int) { return ATTNSCOPE_COLLECTIVE_WHY; }

GatheredPartials gather_partials(const std::vector<RankPartial>&, int64_t, int, bool, int) {
  GatheredPartials g;
  g.message = ATTNSCOPE_COLLECTIVE_WHY;
  g.library = g.message;
  g.status = status_of_reason(g.message);
  return g;
}

}  // namespace attnscope
