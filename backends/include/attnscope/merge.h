// Merges of partial (O, LSE) rows (/parallel, model/include/attnscope/partition.h): attnscope's own on
// the host and on the device, and the libraries' own merge kernels, each a Merger a family lists
// (BackendFamily::mergers). The app asks the registry (run_merges); no family is named above this floor.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attnscope/partition.h"
#include "attnscope/result.h"

namespace attnscope {

// Partials already on one GPU (a collective's gathered buffers, backends/gpu/device_partials.h): opaque
// here, the app has no CUDA. A device merger on that GPU reads them there instead of uploading `parts`.
struct DevicePartials {
  virtual ~DevicePartials() = default;
  virtual int device() const = 0;
};

// The partials of one partitioned run, as merge_partials takes them (host rows of the whole case).
struct MergeInput {
  std::vector<PartialRows> parts;  // in merge order
  int64_t rows = 0;                // total_q * qo_heads
  int qo_heads = 0;                // the rows' heads (0: not known); a library merge is given [total_q, qo_heads]
  int dv = 0;                      // head_dim_vo
  DType dtype = DType::kBf16;
  LseBase native = LseBase::kE;  // the partials' backend's own base
  LseBase read = LseBase::kE;    // the base the merge reads them in
  int device = 0;                // the GPU a device merge runs on
  // Optional: the same partials, in the same order, already on a GPU (on_device->device(): then `device`)
  std::shared_ptr<const DevicePartials> on_device;
};

struct Merger {
  std::string id;       // "attnscope", "cuda.merge", "flashinfer.merge_states", ...
  std::string summary;  // one line: what it runs, and in which base it reads LSE
  bool gpu = false;
  // Never throws: an error or a refusal is MergeRun::status with its message. Fills o, lse, device_ms.
  std::function<MergeRun(const MergeInput&)> run;
};

// Every merger of this build: attnscope's host merge first, then each compiled family's, in family order.
std::vector<Merger> mergers();
// Runs each merger on `in` and fills vs_attnscope against the first (the host merge, the result's own).
// Never throws: a merger's exception is its run's status kError with the message.
std::vector<MergeRun> run_merges(const MergeInput& in);
// "bit-identical", or how a's O and LSE differ from ref's: "max |diff| 0.0024 (O), first at row 17 d 3;
// LSE max |diff| 1.2e-06, first at row 17" (rows of dv values).
std::string merge_versus(const MergeRun& a, const MergeRun& ref, int dv);

}  // namespace attnscope
