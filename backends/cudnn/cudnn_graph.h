// The cuDNN SDPA graph of one shape class (GraphKey), built and planned once and kept in a
// process-wide cache, and the shared cuDNN handle. Building a graph (validation, heuristics, plan
// compilation) takes hundreds of milliseconds or more; executing it takes microseconds, so the
// GUI's re-run after every edit must not rebuild unless the edit changed the shape class. Only
// cudnn_graph.cpp includes the cuDNN frontend; this header exposes plain types.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "cudnn_conventions.h"
#include "cudnn_version.h"

namespace attnscope::peers::cudnn {

// A failed cuDNN or CUDA call, named by its operation ("cudnn_frontend build_plans: ...").
// `unsupported` marks cuDNN's refusal of the graph itself (its support check, or no engine for
// it): the run then reports "unsupported" with cuDNN's reason rather than an error.
struct CudnnError : std::runtime_error {
  CudnnError(const std::string& what, bool unsupported_) : std::runtime_error(what), unsupported(unsupported_) {}
  bool unsupported;
};

// Device pointers of one execution. Q, K, V, O and LSE are attnscope's own buffers; the rest are
// the index tensors of SdpaProblem, uploaded for this run.
struct Bindings {
  const void* q = nullptr;          // [total_q, Hq, d_qk], the case dtype (FP8 attention: FP8 bytes)
  const void* k = nullptr;          // the K pool (paged container or ragged tokens)
  const void* v = nullptr;          // the V pool
  void* o = nullptr;                // [total_q, Hq, d_v], the case dtype
  float* lse = nullptr;             // [total_q, Hq], natural log (cuDNN's Stats)
  const int32_t* seq_q = nullptr;   // [B]
  const int32_t* seq_kv = nullptr;  // [B]
  const int32_t* q_offsets = nullptr;
  const int32_t* o_offsets = nullptr;
  const int32_t* stats_offsets = nullptr;
  const int32_t* k_offsets = nullptr;   // ragged storage only
  const int32_t* v_offsets = nullptr;   // ragged storage only
  const int32_t* page_table = nullptr;  // paged only (the same table serves K and V)
  void* workspace = nullptr;            // SdpaGraph::workspace_bytes
  const float* sinks = nullptr;         // GraphKey::sinks only: [Hq] fp32 sink logits
  // FP8 attention only (GraphKey::fp8): float scalars on the device.
  const float* descale_q = nullptr;
  const float* descale_k = nullptr;
  const float* descale_v = nullptr;
  const float* descale_s = nullptr;
  const float* scale_s = nullptr;
  const float* scale_o = nullptr;
  float* amax_s = nullptr;  // outputs: the largest |P| and |O| (before their scales)
  float* amax_o = nullptr;
};

// A built and planned graph. Immutable once built; executions run under cudnn_lock().
class SdpaGraph {
 public:
  virtual ~SdpaGraph() = default;
  // Enqueues the graph on the default stream. Throws CudnnError naming the operation.
  virtual void execute(const Bindings& b) const = 0;
  int64_t workspace_bytes = 0;
  double build_ms = 0;         // host time of validation, heuristics and plan building
  std::string implementation;  // the frontend's SDPA node: "composite" or "unified"
  std::string engine;          // the execution plan cuDNN chose (its engine and knobs)
};

struct GraphLookup {
  std::shared_ptr<const SdpaGraph> graph;
  bool cached = false;   // found in the cache (no build)
  double lookup_ms = 0;  // host time of this lookup, the build included on a miss
};

// Serializes every use of the shared cuDNN handle and of the cache (a cuDNN handle must not be
// used from two threads at once). Hold it across find_or_build_graph() and every execute().
std::unique_lock<std::mutex> cudnn_lock();

// The graph of `key` from the cache, built on a miss (the least recently used graph is dropped
// beyond a few). Caller holds cudnn_lock(). Throws CudnnError.
GraphLookup find_or_build_graph(const GraphKey& key);

// cudnnGetVersion() of the loaded library (no device needed), e.g. 91900.
int cudnn_runtime_version();

// The file of the loaded libcudnn (dladdr on cudnnGetVersion, links resolved); "" if unknown.
std::string cudnn_library_path();

// CUDNN_VERSION against the loaded library, computed once: the backends refuse with its reason
// when the frontend cannot use the library that runs.
const CudnnRuntimeVerdict& cudnn_runtime();

// "cuDNN 9.19.0 (PATH), cuDNN frontend 1.32.0 (pin)", or "cuDNN built with X, running Y (PATH), ...":
// the family's note.
std::string cudnn_version_note();

}  // namespace attnscope::peers::cudnn
