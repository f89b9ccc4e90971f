// CUDA-graph capture and replay for flashinfer.decode and flashinfer.prefill (graph_replay.h): the
// fixed buffers a captured graph reads, the capture on a non-default stream, the replay, the fit of
// the real batch's plan in the captured one and the padded-row check. Each backend's file plans and
// launches; this file owns everything around it.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "attnscope/graph_replay.h"
#include "fi_runtime.h"

namespace attnscope::cuda {
struct DeviceWorkload;
}

namespace attnscope::peers::flashinfer {

// What a backend's capture carries beyond the plain launch (default: nothing, every such case refused).
// flashinfer.decode / flashinfer.prefill (FA2) pass kFa2: the FP8 launch with the case's tensor scales and
// its `out *= v_scale` in the same graph; the prefill sinks variant's per-head rows; ALiBi, whose kernel
// positions are relative to each entry (qo_idx within qo_indptr's rows, kv_idx within kv_indptr's pages).
struct GraphCaps {
  bool fp8_kv = false, sinks = false, alibi = false;
};
inline constexpr GraphCaps kFa2GraphCaps{true, true, true};

// Why the FlashInfer backends do not capture this case ("" = they do): what the padded batch does
// not model (chunked local attention beyond decode, custom masks, sinks with ALiBi's per-unit origin)
// and what the backend's capture does not carry (`caps`).
std::string graph_refusal(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad, GraphCaps caps = {});

// A padded batch as FlashInfer's CSR (the entries' pages), with each entry's ALiBi origins (its
// first query's position, its first key: chunk_begin) for the LSE shift of download_outputs; the kernel
// reads none of them.
FiUnits graph_units(const std::vector<GraphPadEntry>& entries, int page_size);

// The buffers a captured graph is bound to: metadata with room for the capture's and the replay's
// batch, Q and O of bucket x tokens_per_entry rows (Q's live rows copied from the workload, the
// padded rows zero), and the capture stream.
class GraphIo {
 public:
  GraphIo(const CaseSpec& c, const cuda::DeviceWorkload& w, const CudaGraphPad& pad, const FiUnits& cap, const FiUnits& rep);
  ~GraphIo();
  GraphIo(const GraphIo&) = delete;
  GraphIo& operator=(const GraphIo&) = delete;
  void upload(const FiUnits& u);  // the metadata of `u` into the same buffers (what an engine's replay does)
  // Records `launch` (which must launch on `stream`) into a graph and instantiates it.
  void capture(const std::function<void()>& launch);
  void poison();                   // O and LSE all 0xff (NaN)
  void replay();                   // cudaGraphLaunch on the stream, then a sync
  double replay_median_ms(int n);  // n more replays, each timed with CUDA events: their median
  DeviceUnits du;
  cuda::DeviceBuffer q;
  DeviceOutputs out;
  cudaStream_t stream = nullptr;

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// "fits the captured grid": the replay plan equal to the captured one in every field the captured
// launch baked in (grid, split, tile, workspace offsets), else what differs with the numbers.
GraphCheck fit_check(const GraphGrid& cap, const GraphGrid& rep, bool same_offsets);

// The verdict when the planner refuses the real batch: fit_check's differences (the grid it would
// want against the captured one), then the planner's reason.
GraphCheck refused_fit(const GraphGrid& cap, const GraphGrid& want, const std::string& planner_refuses);

// After the replay: the padded rows against what the engine expects (pad.expect) and the real rows
// into r->o / lse for the session's comparison with the eager run. An entry reading one key is
// checked against that key's V as the kernel reads it (pad_one_key_row: the FP8 bytes dequantised,
// v_scale applied; a sink of the prefill's sinks variant weighs it, SGLang's kAnything made exact).
void graph_outputs(const CaseSpec& c, const cuda::DeviceWorkload& w, const CudaGraphPad& pad, const FiUnits& rep,
                   const GraphIo& io, GraphReplayReport* r);

// Once the real batch's plan fits: O and LSE poisoned, the graph replayed, its rows checked
// (graph_outputs), and with time_reps > 0 the median of that many more replays (the timed run's).
void replay_and_check(const CaseSpec& c, const cuda::DeviceWorkload& w, const CudaGraphPad& pad, const FiUnits& rep, GraphIo& io,
                      int time_reps, GraphReplayReport* r);

}  // namespace attnscope::peers::flashinfer
