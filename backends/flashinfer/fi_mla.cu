// flashinfer.mla and flashinfer.mla_sm90: FlashInfer's MLA decode kernels (mla.cuh, FA2 style; and
// mla_hopper.cuh, sm_90a) on an absorbed MLA case, scheduled by FlashInfer's own MLAPlan. The case's
// absorbed Q row [W_uk^T q_nope ; q_pe] gives the kernel's q_nope and q_pe, the K pool's latent rows
// [ckv ; kpe] its ckv and kpe caches (ckv is V: the V pool is not read).
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "device_check.h"
#include "device_result.h"
#include "device_workload.h"
#include "fi_backends.h"
#include "fi_graph.h"
#include "fi_library_plan.h"
#include "fi_mla_kernels.h"
#include "fi_runtime.h"

namespace attnscope::peers::flashinfer {

namespace {

// What FlashInfer's MLA kernels compute beyond plain latent attention, refused with what they take.
std::string mla_case_refusal(const CaseSpec& c, const std::string& id) {
  const std::string takes = id + " takes absorbed MLA (/mla absorbed true) with kv_lora_rank 512 and rope_dim 64, bf16 / fp16, " +
                            "a paged or ragged cache, causal or not, and nothing else";
  if (!c.is_mla()) return "not an MLA case: " + takes + " (flashinfer.prefill / flashinfer.decode run plain attention)";
  if (!c.mla_absorbed())
    return "the non-absorbed MLA form (/mla/absorbed false) is plain attention with head dims " + std::to_string(c.head_dim_qk) +
           " / " + std::to_string(c.head_dim_vo) + ": " + takes;
  if (c.mla->kv_lora_rank != kMlaRank || c.mla->rope_dim != kMlaRope)
    return "/mla: kv_lora_rank " + std::to_string(c.mla->kv_lora_rank) + ", rope_dim " + std::to_string(c.mla->rope_dim) +
           ": FlashInfer's MLA kernels are instantiated here for head_dim_ckv 512 and head_dim_kpe 64 only";
  if (c.dtype != DType::kBf16 && c.dtype != DType::kFp16) return std::string("dtype ") + dtype_name(c.dtype) + ": " + takes;
  if (c.fp8_kv()) return "/kv_cache/dtype FP8: " + takes + " (FlashInfer's FP8 MLA path is not instantiated)";
  const AttentionSpec& a = c.attention;
  const char* what = a.window        ? "/attention/window"
                     : a.local_chunk ? "/attention/local_chunk"
                     : a.prefix_lm   ? "/attention/prefix_lm"
                     : a.soft_cap    ? "/attention/soft_cap"
                     : a.alibi       ? "/attention/alibi"
                     : a.mask_mod    ? "/attention/mask_mod"
                     : a.score_mod   ? "/attention/score_mod"
                     : a.sinks       ? "/attention/sinks"
                     : c.has_trees() ? "a speculative tree (tree_parents)"
                                     : nullptr;
  if (what) return std::string(what) + ": FlashInfer's MLA kernels have no mask or score variant beyond causal; " + takes;
  for (size_t r = 0; r < c.requests.size(); ++r) {
    const RequestSpec& q = c.requests[r];
    if (q.doc_starts.size() > 1 || q.pad_start)
      return "/requests/" + std::to_string(r) +
             ": documents or padding need a custom mask, which FlashInfer's MLA kernels have not; " + takes;
  }
  return "";
}

std::string mla_kernel_name(bool sm90, const CaseSpec& c, const MlaSchedule& s) {
  const std::string k = sm90 ? "BatchMLAPageAttentionHopperKernel" : "BatchMLAPagedAttentionKernel";
  return k + "<ckv 512, kpe 64, " + dtype_name(c.dtype) + ", " + (c.attention.causal ? "causal" : "no mask") + "> with grid (" +
         std::to_string(s.num_blks_x) + ", " + std::to_string(s.num_blks_y) + "), cooperative launch";
}

class MlaBackend final : public Backend, public GraphReplayable {
 public:
  explicit MlaBackend(bool sm90) : sm90_(sm90) {}
  std::string id() const override { return sm90_ ? "flashinfer.mla_sm90" : "flashinfer.mla"; }
  std::string describe() const override {
    return std::string("FlashInfer ") + ATTNSCOPE_FLASHINFER_PIN +
           (sm90_ ? " Hopper MLA kernel (mla_hopper.cuh)" : " MLA kernel (mla.cuh)") +
           " on the absorbed form, planned by FlashInfer's MLAPlan";
  }

  std::string check(const CaseSpec& c) const override {
    if (auto why = mla_case_refusal(c, id()); !why.empty()) return why;
    if (sm90_) {
      if (auto why = mla_sm90_not_built(); !why.empty()) return "not compiled: " + why;
      if (auto why = cuda::device_check(); !why.empty()) return why;
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "no CUDA device: cudaGetDeviceProperties failed";
      if (prop.major != 9 || prop.minor != 0)
        return std::string("device 0 (") + prop.name + ") is sm_" + std::to_string(prop.major * 10 + prop.minor) +
               ": FlashInfer's Hopper MLA kernel is built for sm_90a only (flashinfer.mla runs on sm_80 and newer)";
      return "";
    }
    return device_refusal();
  }

  Result run(const CaseSpec& c, const Plan& p, const Workload&, const RunOptions& opt) override {
    Result res;
    res.backend = id();
    if (auto why = mla_case_refusal(c, id()); !why.empty()) return refused(res, why);
    const FiUnits u = fi_units(c, p);
    check_units_in_token_order(c, p, u);
    const DeviceProfile prof = flashinfer_planner_device(c.split.num_sms);
    const MlaPlanInputs in = mla_plan_inputs(c, p.units, prof.sm_count);
    if (auto m = model_mla_plan(in); !m.refusal.empty()) return refused(res, "attnscope does not call MLAPlan: " + m.refusal);

    const size_t fbytes = mla_float_workspace_bytes(in, dtype_bytes(c.dtype)), ibytes = mla_int_workspace_bytes(in);
    const int64_t out_bytes = u.total_q * c.num_qo_heads * (c.head_dim_vo * dtype_bytes(c.dtype) + 4);
    cuda::require_device_memory(cuda::device_workload_bytes(c, p) + out_bytes + static_cast<int64_t>(fbytes + ibytes) +
                                    16 * static_cast<int64_t>(u.kv_indices.size() + u.qo_indptr.size()),
                                id() + " (inputs, outputs, FlashInfer's workspaces)");
    const auto shared_w = cuda::device_workload(c, p, opt);
    const cuda::DeviceWorkload& w = *shared_w;
    const DeviceUnits du = upload_units(u);
    const DeviceOutputs out = poisoned_outputs(c, u.total_q);
    Workspaces ws;
    ws.alloc(fbytes, ibytes);
    cuda::check(cudaMemset(ws.float_ws.as<void>(), 0xff, ws.float_bytes), "cudaMemset (poison FlashInfer's float workspace)");

    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int64_t> info;
    size_t staged = 0;
    try {
      info =
          mla_plan_call(prof, {ws.float_ws.as<void>(), ws.float_bytes, ws.int_ws.as<void>(), ws.host, ws.int_bytes}, in, &staged);
    } catch (const std::runtime_error& e) {
      return refused(res, e.what());
    }
    // as FlashInfer's MLA wrapper: the staged part of the page-locked buffer goes to the int workspace
    cuda::check(cudaMemcpy(ws.int_ws.as<void>(), ws.host, staged, cudaMemcpyHostToDevice), "MLAPlan (copy of the plan)");
    const double plan_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    const MlaSchedule sched = read_mla_schedule(info, ws.host, in.num_sm);

    MlaLaunchArgs a;
    a.q = w.q.as<void>();
    a.kv = w.k.as<void>();
    a.o = out.o.as<void>();
    a.lse = out.lse.as<float>();
    a.partial_o = fi_offset(ws.float_ws.as<char>(), info[kPartialO]);
    a.partial_lse = reinterpret_cast<float*>(fi_offset(ws.float_ws.as<char>(), info[kPartialLse]));
    a.kv_indices = du.kv_indices.as<int32_t>();
    a.int_ws = ws.int_ws.as<void>();
    a.info = info.data();
    a.num_heads = c.num_qo_heads;
    a.page_size = u.page_size;
    a.sm_scale = static_cast<float>(c.sm_scale_or_default());
    const bool causal = c.attention.causal;
    const std::string name = mla_kernel_name(sm90_, c, sched);
    auto launch = [&](bool sync) {
      const cudaError_t st = sm90_ ? launch_mla_sm90(a, causal, c.dtype, nullptr) : launch_mla_fa2(a, causal, c.dtype, nullptr);
      check_fi_launch(st, name, sync);
    };
    try {
      launch(true);
      download_outputs(c, u, alibi_slopes(c), out, &res);
      cuda::attach_device_copy(&res, out.o, c.dtype, u.total_q * c.num_qo_heads, c.head_dim_vo, c.head_dim_vo, opt);
      time_launches(
          opt, [&] { launch(false); }, &res.timing);
    } catch (const std::domain_error& e) {  // FlashInfer's FLASHINFER_ERROR, from the kernel units
      return refused(res, std::string("FlashInfer refuses the launch: ") + e.what());
    }

    const MlaPlanModel m = model_mla_plan(in);
    int splits = 0;
    for (const MlaWork& x : sched.works) splits += x.partial_indptr >= 0;
    res.message = "FlashInfer MLAPlan (" + prof.source + "): " + std::to_string(sched.works.size()) + " work items on " +
                  std::to_string(sched.num_blks_y) + " clusters of " + std::to_string(sched.num_blks_x) + " CTA" +
                  (sched.num_blks_x > 1 ? "s" : "") + ", kv_len_limit " + std::to_string(m.kv_len_limit) + ", " +
                  std::to_string(splits) + " split pieces, " + std::to_string(m.merge_ctas) + " merge CTAs; " + name + "; plan " +
                  std::to_string(static_cast<int>(plan_us)) + " us on the host";
    if (c.split.planner != Planner::kFlashInfer || c.split.fixed_tile_q)
      res.message += "; /split has no MLAPlan argument: FlashInfer schedules on its own";
    if (splits > 0) res.message += "; FlashInfer keeps the split partials in the dtype";
    return res;
  }

  // SGLang's flashinfer_mla decode under CUDA graphs (the definition below the class)
  GraphReplayReport capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad) override;

 private:
  static void* fi_offset(char* base, int64_t off) { return base + off; }
  bool sm90_;
};

// The capture of flashinfer.mla / mla_sm90 as SGLang's flashinfer_mla backend runs it under CUDA graphs
// (python/sglang/srt/layers/attention/flashinfer_mla_backend.py @ 004d79cff9efa71aedfa007e0f66d80768a44619:
// BatchMLAPagedAttentionWrapper(use_cuda_graph=True) planned at the bucket, re-planned into the same
// buffers before each replay). MLAPlan has no CUDA-graph flag: the grid (cluster size x SMs / cluster
// size) and the workspace offsets depend on the SM count and the heads alone, so the padded batch's
// plan keeps the captured launch; its work lists are data in the int workspace.
std::string mla_graph_refusal(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad, const std::string& id) {
  if (auto why = mla_case_refusal(c, id); !why.empty()) return why;
  if (pad.engine != GraphEngine::kSglang || pad.tokens_per_entry != 1)
    return "only SGLang's absorbed MLA decode (q_len 1) is modelled under CUDA graphs";
  return graph_refusal(c, p, pad);
}

// MLAPlan's inputs for a padded batch: one query each, kv_len the entry's seq_len (0 for padding).
MlaPlanInputs graph_mla_inputs(const CaseSpec& c, const std::vector<GraphPadEntry>& entries, const FiUnits& u, int num_sm) {
  MlaPlanInputs in;
  in.qo_indptr = u.qo_indptr;
  in.kv_indptr = u.kv_indptr;
  for (const GraphPadEntry& e : entries) in.kv_len.push_back(e.seq_len);
  in.num_heads = c.num_qo_heads;
  in.head_dim_o = c.head_dim_vo;
  in.causal = c.attention.causal;
  in.num_sm = num_sm;
  return in;
}

// One MLAPlan of a padded batch: MLAPlanInfo, the schedule it staged, the grid for the report.
struct MlaGraphPlan {
  std::vector<int64_t> info;
  int works = 0, merge_ctas = 0;
  GraphGrid grid;
};

// The captured launch baked in the grid and the offsets (MLAPlanInfo); the work lists and merge
// ranges are read from the int workspace at each replay, within FlashInfer's fixed-size arrays.
GraphCheck mla_fit_check(const MlaGraphPlan& cap, const MlaGraphPlan& rep, int num_sm) {
  GraphCheck k;
  k.what = "fits the captured grid";
  std::string d;
  auto differs = [&](const std::string& what, int64_t a, int64_t b) {
    if (a != b) d += (d.empty() ? "" : "; ") + what + " captured " + std::to_string(a) + ", replay plan " + std::to_string(b);
  };
  differs("num_blks_x (CTAs per cluster)", cap.info[kBlksX], rep.info[kBlksX]);
  differs("num_blks_y (clusters)", cap.info[kBlksY], rep.info[kBlksY]);
  if (d.empty() && cap.info != rep.info) d = "MLAPlanInfo's workspace offsets moved (the captured launch reads the old ones)";
  if (rep.works > kMlaMaxWorks)
    d += (d.empty() ? "" : "; ") + std::to_string(rep.works) + " work items, FlashInfer's arrays hold " +
         std::to_string(kMlaMaxWorks);
  if (rep.merge_ctas > num_sm)
    d += (d.empty() ? "" : "; ") + std::to_string(rep.merge_ctas) + " merge CTAs for " + std::to_string(num_sm) + " SMs";
  k.pass = d.empty();
  k.detail = k.pass ? "replay plan = captured launch (grid and MLAPlanInfo offsets): " + graph_grid_text(rep.grid) + "; " +
                          std::to_string(rep.works) + " work items (<= " + std::to_string(kMlaMaxWorks) + ") and " +
                          std::to_string(rep.merge_ctas) + " merge CTAs read from the int workspace"
                    : "does not fit: " + d;
  return k;
}

GraphReplayReport MlaBackend::capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad) {
  GraphReplayReport r;
  if (auto why = mla_graph_refusal(c, p, pad, id()); !why.empty()) {
    r.not_captured = why;
    return r;
  }
  const int ps = p.pages.page_size;
  const FiUnits cap = graph_units(pad.capture, ps), rep = graph_units(pad.entries, ps);
  const DeviceProfile prof = flashinfer_planner_device(c.split.num_sms);
  const MlaPlanInputs cin = graph_mla_inputs(c, pad.capture, cap, prof.sm_count);
  const MlaPlanInputs rin = graph_mla_inputs(c, pad.entries, rep, prof.sm_count);
  for (const MlaPlanInputs* in : {&cin, &rin})
    if (auto m = model_mla_plan(*in); !m.refusal.empty()) {
      r.not_captured = "attnscope does not call MLAPlan on the padded batch: " + m.refusal;
      return r;
    }
  const int db = static_cast<int>(dtype_bytes(c.dtype));
  const cuda::DeviceWorkload w = cuda::make_device_workload(c, p);
  GraphIo io(c, w, pad, cap, rep);
  Workspaces ws;  // the engine's one workspace, sized for any plan of the bucket (the same for both batches)
  ws.alloc(std::max(mla_float_workspace_bytes(cin, db), mla_float_workspace_bytes(rin, db)),
           std::max(mla_int_workspace_bytes(cin), mla_int_workspace_bytes(rin)));
  cuda::check(cudaMemset(ws.float_ws.as<void>(), 0xff, ws.float_bytes), "cudaMemset (poison FlashInfer's float workspace)");
  const MlaPlanBuffers buf{ws.float_ws.as<void>(), ws.float_bytes, ws.int_ws.as<void>(), ws.host, ws.int_bytes};
  // MLAPlan into the workspace, its staged part copied to the device as the wrapper's plan() does
  auto plan = [&](const MlaPlanInputs& in) {
    MlaGraphPlan g;
    size_t staged = 0;
    g.info = mla_plan_call(prof, buf, in, &staged);
    cuda::check(cudaMemcpy(ws.int_ws.as<void>(), ws.host, staged, cudaMemcpyHostToDevice), "MLAPlan (copy of the plan)");
    cuda::check(cudaDeviceSynchronize(), "MLAPlan (copy of the plan)");
    const MlaSchedule s = read_mla_schedule(g.info, ws.host, in.num_sm);
    g.works = static_cast<int>(s.works.size());
    for (int e : s.merge_packed_end) g.merge_ctas += e > 0;
    g.grid.entries = pad.bucket;
    g.grid.padded_batch = static_cast<int>(s.num_blks_y);
    g.grid.kv_heads = static_cast<int>(s.num_blks_x);
    for (const MlaWork& x : s.works) g.grid.split_kv = g.grid.split_kv || x.partial_indptr >= 0;
    g.grid.kv_chunk_tokens = model_mla_plan(in).kv_len_limit;
    g.grid.float_ws = g.info[kPartialLse] + 2 * s.num_blks_y * 64 * s.num_blks_x * 4;
    g.grid.int_ws = static_cast<int64_t>(staged);
    return g;
  };
  io.upload(cap);
  MlaGraphPlan cp;
  try {
    cp = plan(cin);
  } catch (const std::runtime_error& e) {
    r.not_captured = std::string("the bucket's plan: ") + e.what();
    return r;
  }
  r.captured_grid = cp.grid;
  r.captured = true;
  MlaLaunchArgs a;
  a.q = io.q.as<void>();
  a.kv = w.k.as<void>();
  a.o = io.out.o.as<void>();
  a.lse = io.out.lse.as<float>();
  a.partial_o = fi_offset(ws.float_ws.as<char>(), cp.info[kPartialO]);
  a.partial_lse = static_cast<float*>(fi_offset(ws.float_ws.as<char>(), cp.info[kPartialLse]));
  a.kv_indices = io.du.kv_indices.as<int32_t>();
  a.int_ws = ws.int_ws.as<void>();
  a.info = cp.info.data();
  a.num_heads = c.num_qo_heads;
  a.page_size = ps;
  a.sm_scale = static_cast<float>(c.sm_scale_or_default());
  const std::string name =
      std::string(sm90_ ? "BatchMLAPageAttentionHopperKernel" : "BatchMLAPagedAttentionKernel") + " (CUDA graph)";
  auto launch = [&](bool sync) {
    const bool causal = c.attention.causal;
    const cudaError_t st = sm90_ ? launch_mla_sm90(a, causal, c.dtype, io.stream) : launch_mla_fa2(a, causal, c.dtype, io.stream);
    check_fi_launch(st, name, sync);
  };
  launch(true);  // uncaptured first (the kernel's attributes are set outside the capture)
  io.capture([&] { launch(false); });
  io.upload(rep);
  MlaGraphPlan rp;
  try {
    rp = plan(rin);
  } catch (const std::runtime_error& e) {
    r.checks.push_back(
        {"fits the captured grid", false, false, std::string("does not fit: MLAPlan for the real batch: ") + e.what()});
    return r;
  }
  r.replay_grid = rp.grid;
  r.checks.push_back(mla_fit_check(cp, rp, prof.sm_count));
  if (!r.checks.back().pass) return r;  // replaying would read a plan the captured launch does not address
  replay_and_check(c, w, pad, rep, io, graph_time_reps_, &r);
  r.notes.push_back(
      "zero-key padding adds no keys, so MLAPlan's kv_len_limit and each live request's split pieces are the eager "
      "plan's (the work items land on other clusters): the same pieces, merged in the same order");
  return r;
}

}  // namespace

std::unique_ptr<Backend> make_mla_backend(bool sm90) { return std::make_unique<MlaBackend>(sm90); }

}  // namespace attnscope::peers::flashinfer
