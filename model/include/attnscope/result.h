// What a backend returns, and which rows a sampled run computes: the data every floor above the
// model reads (comparisons, reports, the GUI), with no knowledge of who produced it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/case_spec.h"

namespace attnscope {

// kNoDevice: compiled, but no usable CUDA device here (a GPU backend on a CPU-only machine).
enum class Status { kOk, kUnsupported, kNotCompiled, kNoDevice, kError, kCancelled };
const char* status_name(Status s);
// The status a check() reason stands for: "not compiled..." -> kNotCompiled, "no CUDA device..."
// -> kNoDevice, anything else -> kUnsupported.
Status status_of_reason(const std::string& why);

struct Timing {
  double host_ms = 0;    // wall time of run() on the host
  double device_ms = 0;  // median kernel time with CUDA events (GPU backends), else 0
  double device_ms_min = 0, device_ms_max = 0;
  int reps = 0;
  double overhead_ms = 0;  // a hand-off's fixed cost around the timed call (python: backends' worker), 0 = none
};

// /cuda_graph (docs/conventions.md, "CUDA-graph replay"): a backend's launch captured at the bucket
// size and replayed for the padded real batch. A grid as FlashInfer's plan gives it.
struct GraphGrid {
  int entries = 0;       // batch entries planned (the bucket)
  int padded_batch = 0;  // plan's padded_batch_size: CTAs along x (the grid is padded_batch x kv_heads)
  int kv_heads = 0;      // CTAs along y
  int new_batch = 0;     // CTAs the batch needs (tiles x KV chunks); 0 when the plan does not say
  bool split_kv = false;
  int cta_tile_q = 0;  // prefill only
  int kv_chunk_tokens = 0;
  int64_t float_ws = 0, int_ws = 0;  // workspace bytes the plan uses
  bool operator==(const GraphGrid&) const = default;
};
struct GraphCheck {
  std::string what;  // "real rows", "padded rows", "fits the captured grid"
  bool pass = false;
  bool skipped = false;  // could not be checked here (detail says why): neither pass nor fail
  std::string detail;    // the numbers that decided it
};
struct GraphReplayReport {
  bool captured = false;
  std::string not_captured;  // why not ("" when captured); the backend's eager run stands alone
  std::string engine;        // "sglang" / "vllm": whose padding
  int bucket = 0, live = 0;
  GraphGrid captured_grid, replay_grid;
  std::vector<GraphCheck> checks;
  std::vector<std::string> notes;
  // Why a fixed split's promise of the eager run's bits does not hold for this replay ("" = it holds):
  // the session then checks the real rows by the twice_lowp rule
  std::string bits_differ_why;
  // Timed runs only: the median of replay_reps graph launches (CUDA events), beside the eager run's
  // median launch (Timing::device_ms of the same backend); a measurement, not a check
  double replay_ms = 0, eager_ms = 0;
  int replay_reps = 0;
  // The replay's real rows ([total_q, ...], as Result::o / lse), compared by the session against the
  // eager run; emptied once the checks are made.
  std::vector<float> o, lse;
  bool failed() const {
    for (const auto& k : checks)
      if (!k.pass && !k.skipped) return true;
    return false;
  }
};

// O and LSE as a GPU backend left them on its device (backends/gpu/device_result.h), so a comparison
// of two results on one device runs there and only its summaries cross. Opaque here: the model has
// no CUDA. The copy may be dropped at any time (device memory is bounded); the host vectors stay.
struct DeviceResultCopy {
  virtual ~DeviceResultCopy() = default;
};

// A partitioned run (/parallel, partition.h): each partition's partial and every merge of them.
struct PartitionPart {
  std::string label;            // "rank 1", "level 0: shared prefix"
  Status status = Status::kOk;  // the backend's status on this partition's sub-case
  std::string message;
  std::vector<float> o, lse;  // rows of the whole case: [total_q, heads, dv], [total_q, heads] (natural
                              // log); O = 0, LSE = -inf where the partition holds no key of the row
  std::vector<int64_t> keys;  // [requests] keys of each request in this partition
  Timing timing;
  int device = -1;  // the GPU it ran on (-1: the host, or one GPU for every rank)
};
struct MergeRun {
  std::string id;  // "attnscope" (the merge this result holds), "attnscope.cuda", "flashinfer.merge_states", ...
  Status status = Status::kOk;
  std::string message;        // why not run, or what it read ("partials' LSE read in base 2")
  std::vector<float> o, lse;  // as Result::o / lse; emptied once compared
  double device_ms = 0;       // its kernel, CUDA events (0 on the host)
  std::string vs_attnscope;   // "bit-identical", or the first difference and the largest
};
struct PartitionReport {
  std::string kind;                  // "context" or "cascade"
  LseBase native = LseBase::kE;      // the backend's own LSE base (its descriptor)
  LseBase read = LseBase::kE;        // the base the merge read the partials' LSE in
  std::vector<PartitionPart> parts;  // in merge order
  std::vector<MergeRun> merges;
  // Where the ranks ran and how their partials met: "virtual: ranks one after another on one GPU",
  // "nccl: ranks on GPUs 0-1, partials gathered to GPU 0"; and the collective's time (0: none)
  std::string collective;
  double collective_ms = 0;
  double merge_ms = 0;  // attnscope's merge of the partials, host
  int gpus = 1;         // GPUs the partitions ran on at once (1: one after another)
  // The step's critical path of kernel time: the busiest GPU's partitions (CUDA events, their sum when
  // virtual), to which a step adds collective_ms and a merge's device_ms
  double kernels_ms = 0;
};

struct Result {
  std::string backend;
  Status status = Status::kOk;
  std::string message;             // reason when not ok; notes otherwise (e.g. "sampled 8 rows/request")
  std::vector<float> o;            // [total_q, qo_heads, head_dim_vo], values in the case dtype
  std::vector<float> lse;          // [total_q, qo_heads], natural log; -inf for a fully masked row
  std::vector<uint8_t> row_valid;  // [total_q], 1 = computed; empty = every row computed
  Timing timing;
  std::optional<GraphReplayReport> graph;  // cases with /cuda_graph only
  std::string block_mask;  // python.flex_attention: FlexAttention's BlockMask (the worker's summary, JSON), else ""
  // A library's own plan read back from the call beside attnscope's model of it, as text lines with the
  // differing fields marked (python.fa3: FA3's num_splits and scheduler metadata), else ""
  std::string library_plan;
  std::shared_ptr<const DeviceResultCopy> device;    // o and lse on the device too, where the run kept them
  std::shared_ptr<const PartitionReport> partition;  // a partitioned run (/parallel): o and lse are the merge
  bool ok() const { return status == Status::kOk; }
  bool row_ok(int64_t t) const { return row_valid.empty() || row_valid[t] != 0; }
};

// Query rows of a request computed under sampling: n evenly spaced rows, first and last included.
std::vector<int> sampled_rows(int q_len, int n);
// [total_q] row mask for a case under sampling (all ones without sampling).
std::vector<uint8_t> row_selection(const CaseSpec& c, std::optional<int> sample_rows);

}  // namespace attnscope
