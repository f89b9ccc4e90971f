// cudnn.sdpa: runs cuDNN's SDPA graph on the case's device workload. The inputs are attnscope's
// own device-generated tensors (the same bits as every other backend's), K/V are read in place
// from the paged or ragged pool, O and LSE are written in place in attnscope's layouts; only the
// small index tensors (sequence lengths, ragged offsets, page table) are made for cuDNN.
#include <cuda_runtime.h>

#include <algorithm>
#include <sstream>

#include "attnscope/plan.h"
#include "attnscope/workload.h"
#include "cudnn_conventions.h"
#include "cudnn_graph.h"
#include "cudnn_indices.h"
#include "cudnn_sdpa.h"
#include "device_check.h"
#include "device_result.h"
#include "device_workload.h"
#include "gpu_timer.h"

namespace attnscope::peers::cudnn {

namespace {

using attnscope::cuda::DeviceBuffer;

class SdpaBackend final : public Backend {
 public:
  std::string id() const override { return "cudnn.sdpa"; }
  std::string describe() const override {
    return "cuDNN's fused scaled-dot-product attention (cuDNN frontend graph API): ragged Q/O/LSE through ragged offsets, "
           "the paged K/V pool through cuDNN page tables, padding and causal/window masks per sequence; uniform "
           "contiguous batches as plain dense tensors; " +
           cudnn_version_note();
  }

  std::string check(const CaseSpec& c) const override {
    // What no cuDNN graph can express comes first: it holds on every machine, so a repro case
    // says "unsupported" with the reason rather than "no device".
    if (auto why = refusal_reason(c, cudnn_runtime_version()); !why.empty()) return why;
    // a library the frontend built here cannot use (issue 47): unsupported with the versions and path
    if (!cudnn_runtime().usable) return cudnn_runtime().reason;
    return cuda::device_check();
  }

  Result run(const CaseSpec& c, const Plan& p, const Workload&, const RunOptions& opt) override {
    Result res;
    res.backend = id();
    SdpaProblem s = translate(c, p);
    const int Hq = c.num_qo_heads, dv = c.head_dim_vo, eb = dtype_bytes(c.dtype);
    const int64_t total_q = c.total_q();
    cuda::require_device_memory(
        cuda::device_workload_bytes(c, p) + total_q * Hq * (dv * eb + 4) + DeviceIndices::bytes(s) + Hq * 4,
        "cudnn.sdpa (inputs, outputs, index tensors)");
    const auto shared_w = cuda::device_workload(c, p, opt);
    const cuda::DeviceWorkload& w = *shared_w;
    DeviceBuffer o(std::max<int64_t>(total_q * Hq * dv, 1) * eb), lse(std::max<int64_t>(total_q * Hq, 1) * 4);
    // Poison both outputs: an element cuDNN does not write stays NaN (0xffff is NaN in fp16 and
    // bf16, 0xffffffff in fp32) and shows in the comparison.
    for (DeviceBuffer* b : {&o, &lse}) cuda::check(cudaMemset(b->as<void>(), 0xff, b->bytes()), "cudaMemset (poison outputs)");

    if (s.key.batch == 0) {
      // Every query is padding: nothing for cuDNN to compute, every row is fully masked.
      res.o = cuda::download_as_float(o, total_q * Hq * dv, c.dtype);
      res.lse = lse.to_host<float>(total_q * Hq);
      apply_conventions(c, s, &res.o, &res.lse);
      res.message = "every query is padding: cuDNN not called; " + s.masks;
      return res;
    }

    const auto lock = cudnn_lock();
    GraphLookup g;
    try {
      // A cuDNN that refuses the dense form runs the ragged one; one that refuses the packed GQA
      // decode view runs the plain one. Each refusal is said in the result.
      bool pack = true, dense = true;
      std::string refused;
      for (;;) {
        try {
          g = find_or_build_graph(s.key);
          break;
        } catch (const CudnnError& e) {
          if (!e.unsupported || (s.key.group == 1 && !s.key.dense)) throw;
          refused += "; " + std::string(s.key.dense ? "the dense form" : "the packed GQA decode view") + " was refused (" +
                     e.what() + ")";
          (s.key.dense ? dense : pack) = false;
          s = translate(c, p, pack, dense);
        }
      }
      s.masks += refused;
    } catch (const CudnnError& e) {
      if (!e.unsupported) throw;
      // cuDNN's own support check refused the graph: the library's reason, not a failure.
      res.status = Status::kUnsupported;
      res.message = e.what();
      return res;
    }
    DeviceIndices idx(s);                                           // after the lookup: a refused packed view re-translates `s`
    const DeviceBuffer sinks = DeviceBuffer::from(sink_logits(c));  // empty without sinks
    DeviceBuffer workspace(static_cast<size_t>(g.graph->workspace_bytes));
    Bindings b;
    b.q = w.q.as<void>();
    b.k = w.k.as<void>();
    b.v = w.v.as<void>();
    b.o = o.as<void>();
    b.lse = lse.as<float>();
    idx.bind(&b);
    b.workspace = workspace.as<void>();
    if (s.key.sinks) b.sinks = sinks.as<float>();

    g.graph->execute(b);
    cuda::check(cudaDeviceSynchronize(), "cudnn.sdpa graph execution");
    res.o = cuda::download_as_float(o, total_q * Hq * dv, c.dtype);
    res.lse = lse.to_host<float>(total_q * Hq);
    apply_conventions(c, s, &res.o, &res.lse);
    cuda::attach_host_copy(&res, opt);  // O's padding rows are written on the host

    // The graph execution only, as cuda.flash times its kernels, on the stream cuDNN runs on (the
    // default stream).
    cuda::time_launches(
        opt, [&] { g.graph->execute(b); }, [] { cuda::check(cudaDeviceSynchronize(), "cudnn.sdpa benchmark loop"); },
        &res.timing);

    res.message = graph_time_text(g) + "; " + g.graph->implementation + " SDPA, plan " +
                  (g.graph->engine.empty() ? std::string("?") : g.graph->engine) + "; shape class " + s.key.describe() + "; " +
                  s.masks;
    const std::string nan = unused_slot_note(c, res.o, res.lse, "cuDNN " + cudnn_version_text(cudnn_runtime_version()));
    if (!nan.empty()) res.message += "; " + nan;
    return res;
  }
};

}  // namespace

std::unique_ptr<Backend> make_sdpa_backend() { return std::make_unique<SdpaBackend>(); }

}  // namespace attnscope::peers::cudnn
