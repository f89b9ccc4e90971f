// The index tensors of one cuDNN SDPA run on the device, shared by cudnn.sdpa and cudnn.sdpa_fp8.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include "cuda_util.h"
#include "cudnn_conventions.h"
#include "cudnn_graph.h"

namespace attnscope::peers::cudnn {

struct DeviceIndices {
  attnscope::cuda::DeviceBuffer seq_q, seq_kv, q_offsets, o_offsets, stats_offsets, k_offsets, v_offsets, page_table;
  explicit DeviceIndices(const SdpaProblem& s)
      : seq_q(cuda::DeviceBuffer::from(s.seq_q)),
        seq_kv(cuda::DeviceBuffer::from(s.seq_kv)),
        q_offsets(cuda::DeviceBuffer::from(s.q_offsets)),
        o_offsets(cuda::DeviceBuffer::from(s.o_offsets)),
        stats_offsets(cuda::DeviceBuffer::from(s.stats_offsets)),
        k_offsets(cuda::DeviceBuffer::from(s.k_offsets)),
        v_offsets(cuda::DeviceBuffer::from(s.v_offsets)),
        page_table(cuda::DeviceBuffer::from(s.page_table)) {}
  static int64_t bytes(const SdpaProblem& s) {
    return 4 * static_cast<int64_t>(s.seq_q.size() + s.seq_kv.size() + s.q_offsets.size() + s.o_offsets.size() +
                                    s.stats_offsets.size() + s.k_offsets.size() + s.v_offsets.size() + s.page_table.size());
  }
  // Fills the index pointers of `b`.
  void bind(Bindings* b) const {
    b->seq_q = seq_q.as<int32_t>();
    b->seq_kv = seq_kv.as<int32_t>();
    b->q_offsets = q_offsets.as<int32_t>();
    b->o_offsets = o_offsets.as<int32_t>();
    b->stats_offsets = stats_offsets.as<int32_t>();
    b->k_offsets = k_offsets.as<int32_t>();
    b->v_offsets = v_offsets.as<int32_t>();
    b->page_table = page_table.as<int32_t>();
  }
};

inline std::string fixed_digits(double x, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << x;
  return s.str();
}

// The graph's build time beside the run: on a miss the whole build, on a hit the lookup.
inline std::string graph_time_text(const GraphLookup& g) {
  return g.cached ? "graph cached: " + fixed_digits(g.lookup_ms, 3) + " ms (built in " + fixed_digits(g.graph->build_ms, 1) +
                        " ms for this shape class)"
                  : "graph built in " + fixed_digits(g.graph->build_ms, 1) + " ms";
}

}  // namespace attnscope::peers::cudnn
