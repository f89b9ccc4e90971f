// flashinfer.prefill: FlashInfer's FA2 batch prefill (BatchPrefillWithPagedKVCacheDispatched), planned
// by FlashInfer's own PrefillPlan on the host, run in-process on attnscope's paged pool as it is
// (NHD or HND, any page size, the plan's page table, the device-generated inputs). The units are
// the requests, or vLLM's virtual batches of chunked local attention, run exactly as vLLM's FlashInfer
// backend runs them: causal prefill over the virtual requests with their sliced block tables.
#include <chrono>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include "attnscope/workload.h"
#include "device_result.h"
#include "device_workload.h"
#include "fi_backends.h"
#include "fi_engine_feed.h"
#include "fi_graph.h"
#include "fi_launch.cuh"
#include "fi_params.cuh"
#include "fi_runtime.h"

namespace attnscope::peers::flashinfer {

namespace {

// The launch's name and shape for error messages: FlashInfer launches grid (padded_batch_size, 1,
// num_kv_heads) with block (32, NUM_WARPS_Q, NUM_WARPS_KV): 1 x 4 warps for tile 16, 4 x 1 beyond
// (prefill.cuh get_num_warps_q / get_num_warps_kv); shared memory is FlashInfer's choice.
std::string prefill_kernel_name(const CaseSpec& c, const fi::PrefillPlanInfo& info, FiVariant v, FiMask m) {
  const unsigned wq = info.cta_tile_q > 16 ? 4 : 1;
  const dim3 grid(static_cast<unsigned>(info.padded_batch_size), 1, static_cast<unsigned>(c.num_kv_heads));
  const std::string kv = c.fp8_kv() ? std::string(" / KV ") + fp8_name(*c.kv_cache.fp8) : "";
  std::string s = "BatchPrefillWithPagedKVCacheKernel<cta_tile_q " + std::to_string(info.cta_tile_q) + ", head_dim " +
                  std::to_string(c.head_dim_qk) + ", " + dtype_name(c.dtype) + kv + ", mask " + fi_mask_name(m) + ", variant " +
                  fi_variant_name(v) + "> with " + grid_block(grid, dim3(32, wq, 4 / wq));
  if (info.split_kv) s += ", then VariableLengthMergeStates over " + std::to_string(info.total_num_rows) + " rows";
  return s;
}

// flashinfer.prefill's launch: FiLaunch's fields (fi_launch.cuh) and the prefill kernel's own (the mask,
// the query tiles, the merge). Every field the kernel reads is set by the two constructors.
template <class T, class KV>
class Launch : public FiLaunch<T, KV, PrefillParams<T, KV>> {
  using Base = FiLaunch<T, KV, PrefillParams<T, KV>>;

 public:
  Launch(const CaseSpec& c, const cuda::DeviceWorkload& w, const DeviceUnits& du, const DeviceOutputs& out, Workspaces& ws,
         const fi::PrefillPlanInfo& info, FiVariant v, FiMask m, const uint8_t* mask, const int* mask_indptr, const float* slopes,
         const float* sinks, Fp8KvScales sc)
      : Base(c, w, du, out, ws, info, v, static_cast<uint32_t>(du.qo_indptr.bytes() / sizeof(int) - 1), slopes, sc),
        info_(info),
        v_(v),
        m_(m) {
    auto& p = this->p_;
    p.q_indptr = du.qo_indptr.as<FiId>();
    p.group_size = fi::uint_fastdiv(static_cast<uint32_t>(c.group_size()));
    p.maybe_custom_mask = const_cast<uint8_t*>(mask);
    p.maybe_mask_indptr = const_cast<FiId*>(mask_indptr);
    p.maybe_sinks = const_cast<float*>(sinks);  // [units, hq] (fi_sink_rows); the sinks variant only
    char* iw = ws.int_ws.as<char>();
    p.qo_tile_indices = fi::GetPtrFromBaseOffset<FiId>(iw, info.qo_tile_indices_offset);
    if (info.split_kv) p.merge_indptr = fi::GetPtrFromBaseOffset<FiId>(iw, info.merge_indptr_offset);
    p.max_total_num_rows = static_cast<uint32_t>(info.total_num_rows);
    if (info.enable_cuda_graph) {  // padded CTAs read block_valid_mask; the merge reads total_num_rows
      p.block_valid_mask = fi::GetPtrFromBaseOffset<bool>(iw, info.block_valid_mask_offset);
      p.total_num_rows = fi::GetPtrFromBaseOffset<uint32_t>(iw, info.total_num_rows_offset);
    }
    this->name_ = prefill_kernel_name(c, info, v, m);
  }

  // One run: the kernel and, with split-KV, the merge; then FiLaunch::finish (`out *= v_scale` with an
  // FP8 cache). FlashInfer takes params by value, so they stay as filled.
  void operator()(bool sync) {
    const auto& k = this->kernels();
    this->finish(k.prefill(this->p_, this->tmp_v_, this->tmp_s_, static_cast<int>(info_.cta_tile_q), v_, m_, this->stream_),
                 sync);
  }

 private:
  fi::PrefillPlanInfo info_;
  FiVariant v_;
  FiMask m_;
};

class PrefillBackend final : public Backend, public GraphReplayable {
 public:
  std::string id() const override { return "flashinfer.prefill"; }
  std::string describe() const override {
    return std::string("FlashInfer ") + ATTNSCOPE_FLASHINFER_PIN +
           " FA2 batch prefill (BatchPrefillWithPagedKVCacheDispatched), planned by FlashInfer's PrefillPlan, on attnscope's "
           "paged pool; chunked local attention as vLLM's virtual batches";
  }

  std::string check(const CaseSpec& c) const override {
    if (auto why = shape_refusal(c, false); !why.empty()) return why;
    if (auto why = variant_refusal(c); !why.empty()) return why;
    const FiVariant v = choose_variant(c);
    // the mask mode depends on the plan (run() picks it); a native mode without its line falls
    // back to the custom mode, so the custom line alone is enough
    const FiMask native = c.attention.causal ? FiMask::kCausal : FiMask::kNone;
    const std::string dt = table_dtype(c);
    if (!has_prefill(c.head_dim_qk, dt, v, native) && !has_prefill(c.head_dim_qk, dt, v, FiMask::kCustom))
      return std::string("variant ") + fi_variant_name(v) + " (" + variant_text(c) + ") is not instantiated for head_dim " +
             std::to_string(c.head_dim_qk) + " " + dt + " in this build (fi_instances.def)" +
             (v == FiVariant::kSinks ? "; the cuda family and the CPU backends take sinks in other dtypes and head dims" : "");
    // the case's own refusals come first, so they read the same with or without a device
    return device_refusal();
  }

  Result run(const CaseSpec& c, const Plan& p, const Workload&, const RunOptions& opt) override {
    Result res;
    res.backend = id();
    FiUnits u = fi_units(c, p);
    std::string fed;  // /engine vllm-flashinfer: vLLM's prefill-wrapper tensors replace the units (fi_engine_feed.h)
    if (auto why = feed_units(c, p, FiWrapper::kPrefill, &u, &fed); !why.empty()) return refused(res, why);
    if (fed.empty()) check_units_in_token_order(c, p, u);
    const std::string dt = table_dtype(c);
    const FiVariant v = choose_variant(c);
    std::string why_custom;
    FiMask m = choose_mask(c, p, &why_custom);
    std::vector<std::string> notes;
    if (m != FiMask::kCustom && !has_prefill(c.head_dim_qk, dt, v, m)) {
      notes.push_back(std::string("mask mode ") + fi_mask_name(m) + " is not instantiated with variant " + fi_variant_name(v) +
                      ": runs FlashInfer's custom-mask mode with the same mask as bits");
      m = FiMask::kCustom;
    } else if (m == FiMask::kCustom) {
      notes.push_back("custom mask: " + why_custom);
    }
    if (!has_prefill(c.head_dim_qk, dt, v, m))
      return refused(res, std::string("mask mode ") + fi_mask_name(m) + " with variant " + fi_variant_name(v) +
                              " is not instantiated for head_dim " + std::to_string(c.head_dim_qk) + " " + dt);

    // FlashInfer's plan inputs: int32 indptrs built on the host from attnscope's plan
    const SplitArgs sa = split_args(c);
    std::vector<int> qo_h = u.qo_indptr, kv_h = u.kv_indptr;
    const uint32_t B = static_cast<uint32_t>(u.qo_indptr.size() - 1);
    const int wl = v == FiVariant::kPlain ? -1 : window_left(c);
    // batch_prefill.cu passes kv_dtype_bytes = sizeof(DTypeKV): 1 for an FP8 cache
    const uint32_t kv_bytes = c.fp8_kv() ? 1u : static_cast<uint32_t>(dtype_bytes(c.dtype));
    auto plan_call = [&](bool size_only, Workspaces* ws, fi::PrefillPlanInfo* info, size_t* fb, size_t* ib) {
      if (size_only)
        return fi::PrefillPlanWorkspaceSize<FiId>(*fb, *ib, qo_h.data(), kv_h.data(), static_cast<uint32_t>(u.total_q), B,
                                                  c.num_qo_heads, c.num_kv_heads, c.head_dim_qk, c.head_dim_vo, u.page_size,
                                                  sa.enable_cuda_graph, dtype_bytes(c.dtype), wl, sa.fixed_split_size,
                                                  sa.disable_split_kv, 0, 0, nullptr, kv_bytes);
      return fi::PrefillPlan<FiId>(ws->float_ws.as<void>(), ws->float_bytes, ws->int_ws.as<void>(), ws->host, ws->int_bytes,
                                   *info, qo_h.data(), kv_h.data(), static_cast<uint32_t>(u.total_q), B, c.num_qo_heads,
                                   c.num_kv_heads, c.head_dim_qk, c.head_dim_vo, u.page_size, sa.enable_cuda_graph,
                                   dtype_bytes(c.dtype), wl, sa.fixed_split_size, sa.disable_split_kv, 0, 0, nullptr, kv_bytes);
    };
    size_t fbytes = 0, ibytes = 0;
    try {
      cuda::check(plan_call(true, nullptr, nullptr, &fbytes, &ibytes), "PrefillPlanWorkspaceSize");
    } catch (const fi::Error& e) {
      return refused(res, std::string("FlashInfer's PrefillPlan refuses the batch: ") + e.what());
    }

    std::vector<int> mask_indptr;
    const std::vector<uint8_t> mask_bits = m == FiMask::kCustom ? pack_custom_mask(c, p, &mask_indptr) : std::vector<uint8_t>{};
    const int64_t out_bytes = u.total_q * c.num_qo_heads * (c.head_dim_vo * dtype_bytes(c.dtype) + 4);
    cuda::require_device_memory(cuda::device_workload_bytes(c, p) + out_bytes + static_cast<int64_t>(fbytes + ibytes) +
                                    static_cast<int64_t>(mask_bits.size()) + 16 * static_cast<int64_t>(u.kv_indices.size() + B) +
                                    4 * static_cast<int64_t>(B) * c.num_qo_heads,
                                "flashinfer.prefill (inputs, outputs, FlashInfer's workspaces, custom mask)");
    const auto shared_w = cuda::device_workload(c, p, opt);
    const cuda::DeviceWorkload& w = *shared_w;
    const Fp8KvScales sc = fp8_kv_scales(c, w);
    const DeviceUnits du = upload_units(u);
    const DeviceOutputs out = poisoned_outputs(c, u.total_q);
    const std::vector<float> slopes = alibi_slopes(c);
    const cuda::DeviceBuffer d_slopes = cuda::DeviceBuffer::from(slopes);
    // the sinks variant's per-unit sink rows (fi_conventions.h); one element otherwise, never read
    const std::vector<float> sink_rows =
        v == FiVariant::kSinks ? fi_sink_rows(sink_logits(c), slopes, u.kv_begin, u.q_abs_first) : std::vector<float>{0.f};
    const cuda::DeviceBuffer d_sinks = cuda::DeviceBuffer::from(sink_rows);
    const cuda::DeviceBuffer d_mask = cuda::DeviceBuffer::from(mask_bits.empty() ? std::vector<uint8_t>{0} : mask_bits);
    const cuda::DeviceBuffer d_mask_indptr = cuda::DeviceBuffer::from(mask_indptr.empty() ? std::vector<int>{0} : mask_indptr);
    Workspaces ws;
    ws.alloc(fbytes, ibytes);
    // split-KV partials that the merge would read without the kernel writing them show as NaN
    cuda::check(cudaMemset(ws.float_ws.as<void>(), 0xff, ws.float_bytes), "cudaMemset (poison FlashInfer's float workspace)");

    fi::PrefillPlanInfo info;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      cuda::check(plan_call(false, &ws, &info, nullptr, nullptr), "PrefillPlan");
    } catch (const fi::Error& e) {
      return refused(res, std::string("FlashInfer's PrefillPlan refuses the batch: ") + e.what());
    }
    cuda::check(cudaDeviceSynchronize(), "PrefillPlan (copy of the plan to the int workspace)");
    const double plan_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    const int kv_chunk_tokens = *fi::GetPtrFromBaseOffset<FiId>(ws.host, info.kv_chunk_size_ptr_offset);

    const uint8_t* mask_ptr = m == FiMask::kCustom ? d_mask.as<uint8_t>() : nullptr;
    const int* mask_indptr_ptr = m == FiMask::kCustom ? d_mask_indptr.as<int>() : nullptr;
    // one launch checked synchronously, the outputs, then the timed launches (kernels only)
    auto go = [&](auto t, auto kv) {
      Launch<decltype(t), decltype(kv)> launch(c, w, du, out, ws, info, v, m, mask_ptr, mask_indptr_ptr, d_slopes.as<float>(),
                                               d_sinks.as<float>(), sc);
      launch(true);
      download_outputs(c, u, slopes, out, &res);
      cuda::attach_device_copy(&res, out.o, c.dtype, u.total_q * c.num_qo_heads, c.head_dim_vo, c.head_dim_vo, opt);
      const auto once = [&] { launch(false); };
      time_launches(opt, once, &res.timing);
    };
    try {
      with_types(c, go);
    } catch (const fi::Error& e) {
      // FlashInfer refused at launch (shared memory of the tile, an invalid kernel configuration)
      return refused(res, std::string("FlashInfer refuses the launch: ") + e.what());
    }

    // kv_chunk_size is meaningful only with split-KV (disable_split_kv stores INT64_MAX * page_size
    // into the int32 slot; the kernel then never reads it)
    std::string msg = "FlashInfer PrefillPlan: cta_tile_q " + std::to_string(info.cta_tile_q) + ", split_kv " +
                      (info.split_kv ? "yes, kv chunk " + std::to_string(kv_chunk_tokens) + " tokens" : std::string("no")) +
                      ", grid " + std::to_string(info.padded_batch_size) + " x " + std::to_string(c.num_kv_heads) +
                      " CTAs; mask " + fi_mask_name(m) + ", variant " + fi_variant_name(v) + "; plan " +
                      std::to_string(static_cast<int>(plan_us)) + " us on the host";
    if (!sa.note.empty()) notes.push_back(sa.note);
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess && sms != c.split.num_sms)
      notes.push_back("FlashInfer planned for device 0's " + std::to_string(sms) + " SMs (/split/num_sms " +
                      std::to_string(c.split.num_sms) + " is the input of attnscope's model of the planner)");
    if (info.split_kv && !partials_note(c).empty()) notes.push_back(partials_note(c));
    if (v == FiVariant::kAlibi && !c.attention.alibi) notes.push_back("window without ALiBi: the ALiBi variant with zero slopes");
    if (v == FiVariant::kSinks)
      notes.push_back(
          std::string("sinks: attnscope's SinkAttention variant folds each head's sink into the row's (m, d) ") +
          (info.split_kv ? "of its first KV chunk's partial only, so the merge counts it once" : "after the KV loop (no split)") +
          (c.attention.window || c.attention.alibi ? "" : "; its window and ALiBi switched off"));
    if (c.fp8_kv()) notes.push_back(fp8_note(c, sc));
    for (const auto& n : notes) msg += "; " + n;
    res.message = fed.empty() ? msg : fed + "; " + msg;
    return res;
  }

  GraphReplayReport capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad) override;

 private:
  static std::string variant_text(const CaseSpec& c) {
    std::string s;
    if (c.attention.window) s += "window";
    if (c.attention.soft_cap) s += std::string(s.empty() ? "" : ", ") + "soft-cap";
    if (c.attention.alibi) s += std::string(s.empty() ? "" : ", ") + "ALiBi";
    if (c.has_sinks()) s += std::string(s.empty() ? "" : ", ") + "sinks";
    return s.empty() ? "no logits transform" : s;
  }
};

// The CTAs a fixed-split plan needs for `u` (PrefillSplitQOKVIndptr's new_batch_size): query tiles x
// KV chunks per entry; 0 without a fixed split (the plan then sizes its own chunks to the grid).
int fixed_split_ctas(const FiUnits& u, int group, int tile, int fixed_pages) {
  if (fixed_pages <= 0 || tile <= 0) return 0;
  int n = 0;
  for (size_t i = 0; i + 1 < u.qo_indptr.size(); ++i) {
    const int rows = (u.qo_indptr[i + 1] - u.qo_indptr[i]) * group, pages = std::max(u.kv_indptr[i + 1] - u.kv_indptr[i], 1);
    n += ((rows + tile - 1) / tile) * ((pages + fixed_pages - 1) / fixed_pages);
  }
  return n;
}

// Captured at the bucket with PrefillPlan's CUDA-graph planning, re-planned for the padded real batch
// into the same workspace (what an engine's replay does), replayed (fi_graph.h).
GraphReplayReport PrefillBackend::capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad) {
  GraphReplayReport r;
  if (auto why = graph_refusal(c, p, pad, kFa2GraphCaps); !why.empty()) {
    r.not_captured = why;
    return r;
  }
  const FiVariant v = choose_variant(c);
  const FiMask m = choose_mask(c, p);
  if (!has_prefill(c.head_dim_qk, table_dtype(c), v, m)) {
    r.not_captured = std::string("mask mode ") + fi_mask_name(m) + " is not instantiated with variant " + fi_variant_name(v);
    return r;
  }
  const SplitArgs sa = split_args(c);
  const int wl = v == FiVariant::kPlain ? -1 : window_left(c);
  const uint32_t B = static_cast<uint32_t>(pad.bucket), eb = static_cast<uint32_t>(dtype_bytes(c.dtype));
  const uint32_t kv_bytes = c.fp8_kv() ? 1u : eb;  // batch_prefill.cu: sizeof(DTypeKV)
  const FiUnits cap = graph_units(pad.capture, p.pages.page_size), rep = graph_units(pad.entries, p.pages.page_size);
  auto plan = [&](const FiUnits& u, Workspaces* ws, fi::PrefillPlanInfo* info, size_t* fb, size_t* ib) {
    std::vector<int> qo = u.qo_indptr, kv = u.kv_indptr;
    const uint32_t rows = static_cast<uint32_t>(u.total_q);
    if (!ws) {
      cuda::check(fi::PrefillPlanWorkspaceSize<FiId>(*fb, *ib, qo.data(), kv.data(), rows, B, c.num_qo_heads, c.num_kv_heads,
                                                     c.head_dim_qk, c.head_dim_vo, u.page_size, true, eb, wl, sa.fixed_split_size,
                                                     sa.disable_split_kv, 0, 0, nullptr, kv_bytes),
                  "PrefillPlanWorkspaceSize (CUDA graph)");
      return;
    }
    cuda::check(
        fi::PrefillPlan<FiId>(ws->float_ws.as<void>(), ws->float_bytes, ws->int_ws.as<void>(), ws->host, ws->int_bytes, *info,
                              qo.data(), kv.data(), rows, B, c.num_qo_heads, c.num_kv_heads, c.head_dim_qk, c.head_dim_vo,
                              u.page_size, true, eb, wl, sa.fixed_split_size, sa.disable_split_kv, 0, 0, nullptr, kv_bytes),
        "PrefillPlan (CUDA graph)");
    cuda::check(cudaDeviceSynchronize(), "PrefillPlan (copy of the plan to the int workspace)");
  };
  auto grid = [&](const FiUnits& u, const fi::PrefillPlanInfo& i, const Workspaces& ws) {
    GraphGrid g;
    g.entries = pad.bucket;
    g.padded_batch = static_cast<int>(i.padded_batch_size);
    g.kv_heads = c.num_kv_heads;
    g.split_kv = i.split_kv;
    g.cta_tile_q = static_cast<int>(i.cta_tile_q);
    g.kv_chunk_tokens = i.split_kv ? *fi::GetPtrFromBaseOffset<FiId>(ws.host, i.kv_chunk_size_ptr_offset) : 0;
    g.new_batch = fixed_split_ctas(u, c.group_size(), g.cta_tile_q, sa.fixed_split_size);
    return g;
  };
  size_t fb = 0, ib = 0;
  plan(cap, nullptr, nullptr, &fb, &ib);
  const cuda::DeviceWorkload w = cuda::make_device_workload(c, p);
  const std::vector<float> slopes = alibi_slopes(c);
  const cuda::DeviceBuffer d_slopes = cuda::DeviceBuffer::from(slopes);
  // the sinks variant's [bucket, hq] rows, filled once for the capture: without ALiBi (graph_refusal)
  // every row is the head's sink, whatever batch the replay uploads (gpt-oss's per-head sinks tensor)
  const cuda::DeviceBuffer d_sinks = cuda::DeviceBuffer::from(
      v == FiVariant::kSinks ? fi_sink_rows(sink_logits(c), slopes, cap.kv_begin, cap.q_abs_first) : std::vector<float>{0.f});
  // FP8: the tensor scales as floats fixed at capture (fi_decode.cu's capture says which engine code)
  const Fp8KvScales sc = fp8_kv_scales(c, w);
  GraphIo io(c, w, pad, cap, rep);
  Workspaces ws;
  ws.alloc(fb, ib);  // the engine's workspace: what the captured plan needs
  io.upload(cap);
  fi::PrefillPlanInfo ci, ri;
  plan(cap, &ws, &ci, &fb, &ib);
  r.captured_grid = grid(cap, ci, ws);
  r.captured_grid.float_ws = static_cast<int64_t>(fb);
  r.captured_grid.int_ws = static_cast<int64_t>(ib);
  r.captured = true;
  with_types(c, [&](auto t, auto kv) {
    Launch<decltype(t), decltype(kv)> launch(c, w, io.du, io.out, ws, ci, v, m, nullptr, nullptr, d_slopes.as<float>(),
                                             d_sinks.as<float>(), sc);
    launch.graph_io(io.q.as<void>(), io.stream);
    io.capture([&] { launch(false); });
    return 0;
  });
  io.upload(rep);
  size_t rfb = 0, rib = 0;
  GraphGrid want = r.captured_grid;
  want.new_batch = fixed_split_ctas(rep, c.group_size(), r.captured_grid.cta_tile_q, sa.fixed_split_size);
  if (sa.fixed_split_size > 0)  // PrefillSplitQOKVIndptr: a fixed split turns split-KV on when any entry has two chunks
    for (size_t i = 0; i + 1 < rep.kv_indptr.size(); ++i)
      want.split_kv = want.split_kv || rep.kv_indptr[i + 1] - rep.kv_indptr[i] > sa.fixed_split_size;
  want.float_ws = want.int_ws = 0;
  try {
    plan(rep, nullptr, nullptr, &rfb, &rib);  // what the real batch's plan needs, then the plan into the captured workspace
    want.float_ws = static_cast<int64_t>(rfb);
    want.int_ws = static_cast<int64_t>(rib);
    plan(rep, &ws, &ri, &fb, &ib);
  } catch (const std::exception& e) {
    r.replay_grid = want;
    r.checks.push_back(refused_fit(r.captured_grid, want, std::string("PrefillPlan for the real batch refuses: ") + e.what()));
    return r;
  }
  r.replay_grid = grid(rep, ri, ws);
  r.replay_grid.float_ws = want.float_ws;
  r.replay_grid.int_ws = want.int_ws;
  r.checks.push_back(fit_check(r.captured_grid, r.replay_grid, ci.ToVector() == ri.ToVector()));
  if (!r.checks.back().pass) return r;  // replaying would launch the captured grid on a plan it does not hold
  replay_and_check(c, w, pad, rep, io, graph_time_reps_, &r);
  return r;
}

}  // namespace

std::unique_ptr<Backend> make_prefill_backend() { return std::make_unique<PrefillBackend>(); }

}  // namespace attnscope::peers::flashinfer
