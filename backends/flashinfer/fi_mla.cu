// flashinfer.mla and flashinfer.mla_sm90: FlashInfer's MLA decode kernels (mla.cuh, FA2 style; and
// mla_hopper.cuh, sm_90a) on an absorbed MLA case, scheduled by FlashInfer's own MLAPlan. The case's
// absorbed Q row [W_uk^T q_nope ; q_pe] gives the kernel's q_nope and q_pe, the K pool's latent rows
// [ckv ; kpe] its ckv and kpe caches (ckv is V: the V pool is not read).
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_backends.h"
#include "device_workload.h"
#include "fi_backends.h"
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

class MlaBackend final : public Backend {
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
    const cuda::DeviceWorkload w = cuda::make_device_workload(c, p);
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

 private:
  static void* fi_offset(char* base, int64_t off) { return base + off; }
  bool sm90_;
};

}  // namespace

std::unique_ptr<Backend> make_mla_backend(bool sm90) { return std::make_unique<MlaBackend>(sm90); }

}  // namespace attnscope::peers::flashinfer
