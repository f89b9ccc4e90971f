// flashinfer.decode: FlashInfer's CUDA-core batch decode (BatchDecodeWithPagedKVCacheDispatched),
// planned by FlashInfer's DecodePlan, for batches of single-token queries on attnscope's paged pool.
// Chunked local attention runs on vLLM's virtual batches (one per request when every q_len is 1).
#include <chrono>
#include <string>
#include <type_traits>
#include <vector>

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

// FlashInfer's decode launch shape (decode.cuh): bdx = head_dim / vec_size with vec_size =
// max(16 / sizeof(dtype), head_dim / 32), bdy = the GQA group, bdz = max(128, bdx * bdy) / (bdx *
// bdy); grid (padded_batch_size, num_kv_heads).
std::string decode_kernel_name(const CaseSpec& c, const fi::DecodePlanInfo& info, FiVariant v) {
  // vec_size = max(16 / sizeof(DTypeKV), head_dim / 32): 16 one-byte FP8 elements per load
  const unsigned vec = std::max(c.fp8_kv() ? 16 : 8, c.head_dim_qk / 32), bdx = c.head_dim_qk / vec, bdy = c.group_size();
  const unsigned bdz = std::max(128u, bdx * bdy) / (bdx * bdy);
  const std::string kv = c.fp8_kv() ? std::string(" / KV ") + fp8_name(*c.kv_cache.fp8) : "";
  std::string s = "BatchDecodeWithPagedKVCacheKernel<head_dim " + std::to_string(c.head_dim_qk) + ", " + dtype_name(c.dtype) +
                  kv + ", group " + std::to_string(bdy) + ", variant " + fi_variant_name(v) + "> with " +
                  grid_block(dim3(static_cast<unsigned>(info.padded_batch_size), c.num_kv_heads), dim3(bdx, bdy, bdz));
  if (info.split_kv) s += ", then VariableLengthMergeStates";
  return s;
}

// flashinfer.decode's launch: FiLaunch's fields (fi_launch.cuh) and the decode kernel's own.
template <class T, class KV>
class Launch : public FiLaunch<T, KV, DecodeParams<T, KV>> {
  using Base = FiLaunch<T, KV, DecodeParams<T, KV>>;

 public:
  Launch(const CaseSpec& c, const cuda::DeviceWorkload& w, const DeviceUnits& du, const DeviceOutputs& out, Workspaces& ws,
         const fi::DecodePlanInfo& info, FiVariant v, uint32_t batch, const float* slopes, Fp8KvScales sc)
      : Base(c, w, du, out, ws, info, v, batch, slopes, sc), v_(v) {
    // as batch_decode.cu: the mask exists (and padded CTAs read it) only for split-KV CUDA-graph plans
    if (info.split_kv && info.enable_cuda_graph)
      this->p_.block_valid_mask = fi::GetPtrFromBaseOffset<bool>(ws.int_ws.as<char>(), info.block_valid_mask_offset);
    this->name_ = decode_kernel_name(c, info, v);
  }

  // The kernel (and its merge), then FiLaunch::finish (`out *= v_scale` with an FP8 cache).
  void operator()(bool sync) {
    const auto& k = this->kernels();
    this->finish(k.decode(this->p_, this->tmp_v_, this->tmp_s_, v_, this->stream_), sync);
  }

 private:
  FiVariant v_;
};

// DecodePlan (or its workspace size) through the instance of the case's dtype.
cudaError_t decode_plan(const CaseSpec& c, const DecodePlanArgs& a, FiVariant v, fi::DecodePlanInfo* info, size_t* fb,
                        size_t* ib) {
  return with_types(c, [&](auto t, auto kv) {
    const auto* k = kernels_for<decltype(t), decltype(kv)>(c.head_dim_qk);
    return k ? k->decode_plan(a, v, info, fb, ib) : cudaErrorNotSupported;
  });
}

class DecodeBackend final : public Backend, public GraphReplayable {
 public:
  std::string id() const override { return "flashinfer.decode"; }
  std::string describe() const override {
    return std::string("FlashInfer ") + ATTNSCOPE_FLASHINFER_PIN +
           " CUDA-core batch decode (BatchDecodeWithPagedKVCacheDispatched), planned by FlashInfer's DecodePlan, for "
           "single-token queries on attnscope's paged pool";
  }

  std::string check(const CaseSpec& c) const override {
    for (size_t r = 0; r < c.requests.size(); ++r)
      if (c.requests[r].q_len != 1)
        return "request " + std::to_string(r) + " has q_len " + std::to_string(c.requests[r].q_len) +
               ": flashinfer.decode runs batches of single-token queries (BatchDecodeWithPagedKVCache); flashinfer.prefill "
               "runs the rest" +
               (c.engine == "vllm-flashinfer"
                    ? " (vLLM's split_decodes_and_prefills, decode_threshold 1, gives it the prefill wrapper)"
                    : "");
    if (auto why = shape_refusal(c, true); !why.empty()) return why;
    if (auto why = variant_refusal(c); !why.empty()) return why;
    if (c.split.planner == Planner::kFixed)
      return "planner fixed: FlashInfer's CUDA-core decode has no fixed split size (its wrapper raises \"fixed_split_size "
             "is only supported by tensor core decode for now.\")";
    const FiVariant v = choose_variant(c);
    if (!has_decode(c.head_dim_qk, table_dtype(c), v))
      return std::string("decode variant ") + fi_variant_name(v) + " is not instantiated for head_dim " +
             std::to_string(c.head_dim_qk) + " " + table_dtype(c) + " in this build (fi_instances.def)";
    // the decode kernel has no custom mask: the single query must see exactly the keys from the
    // window (or chunk) start to the end
    for (size_t r = 0; r < c.requests.size(); ++r) {
      const RowMask m = row_mask(c, static_cast<int>(r));
      const int qa = c.requests[r].kv_len - 1;
      int lo, hi;
      visible_range(m, qa, &lo, &hi);
      int want_lo = c.attention.window ? std::max(0, qa - *c.attention.window + 1) : 0;
      if (c.attention.local_chunk) want_lo = (qa / *c.attention.local_chunk) * *c.attention.local_chunk;
      if (hi <= lo || lo != want_lo || hi != c.requests[r].kv_len)
        return "request " + std::to_string(r) + "'s query sees keys [" + std::to_string(lo) + ", " +
               std::to_string(std::max(lo, hi)) + ") of " + std::to_string(c.requests[r].kv_len) +
               " (documents, padding): FlashInfer's decode kernel has no custom mask (flashinfer.prefill has)";
    }
    // the case's own refusals come first, so they read the same with or without a device
    return device_refusal();
  }

  Result run(const CaseSpec& c, const Plan& p, const Workload&, const RunOptions& opt) override {
    Result res;
    res.backend = id();
    FiUnits u = fi_units(c, p);
    std::string fed;  // /engine vllm-flashinfer: vLLM's decode-wrapper tensors replace the units (fi_engine_feed.h)
    if (auto why = feed_units(c, p, FiWrapper::kDecode, &u, &fed); !why.empty()) return refused(res, why);
    if (fed.empty()) check_units_in_token_order(c, p, u);
    const uint32_t B = static_cast<uint32_t>(u.qo_indptr.size() - 1);
    if (u.total_q != B) return refused(res, "flashinfer.decode needs one query per unit");
    std::string why;
    if (choose_mask(c, p, &why) == FiMask::kCustom) return refused(res, "FlashInfer's decode kernel has no custom mask: " + why);
    const FiVariant v = choose_variant(c);
    const SplitArgs sa = split_args(c);
    std::vector<int> kv_h = u.kv_indptr;

    DecodePlanArgs a;
    a.kv_indptr_h = kv_h.data();
    a.batch_size = B;
    a.num_qo_heads = c.num_qo_heads;
    a.num_kv_heads = c.num_kv_heads;
    a.page_size = u.page_size;
    a.enable_cuda_graph = sa.enable_cuda_graph;
    a.size_only = true;
    size_t fbytes = 0, ibytes = 0;
    try {
      cuda::check(decode_plan(c, a, v, nullptr, &fbytes, &ibytes), "DecodePlanWorkspaceSize");
    } catch (const fi::Error& e) {
      return refused(res, std::string("FlashInfer's DecodePlan refuses the batch: ") + e.what());
    }

    const int64_t out_bytes = u.total_q * c.num_qo_heads * (c.head_dim_vo * dtype_bytes(c.dtype) + 4);
    cuda::require_device_memory(cuda::device_workload_bytes(c, p) + out_bytes + static_cast<int64_t>(fbytes + ibytes) +
                                    16 * static_cast<int64_t>(u.kv_indices.size() + B),
                                "flashinfer.decode (inputs, outputs, FlashInfer's workspaces)");
    const auto shared_w = cuda::device_workload(c, p, opt);
    const cuda::DeviceWorkload& w = *shared_w;
    const Fp8KvScales sc = fp8_kv_scales(c, w);
    const DeviceUnits du = upload_units(u);
    const DeviceOutputs out = poisoned_outputs(c, u.total_q);
    const std::vector<float> slopes = alibi_slopes(c);
    const cuda::DeviceBuffer d_slopes = cuda::DeviceBuffer::from(slopes);
    Workspaces ws;
    ws.alloc(fbytes, ibytes);
    cuda::check(cudaMemset(ws.float_ws.as<void>(), 0xff, ws.float_bytes), "cudaMemset (poison FlashInfer's float workspace)");

    fi::DecodePlanInfo info;
    a.size_only = false;
    a.float_buffer = ws.float_ws.as<void>();
    a.float_bytes = ws.float_bytes;
    a.int_buffer = ws.int_ws.as<void>();
    a.host_buffer = ws.host;
    a.int_bytes = ws.int_bytes;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      cuda::check(decode_plan(c, a, v, &info, &fbytes, &ibytes), "DecodePlan");
    } catch (const fi::Error& e) {
      return refused(res, std::string("FlashInfer's DecodePlan refuses the batch: ") + e.what());
    }
    cuda::check(cudaDeviceSynchronize(), "DecodePlan (copy of the plan to the int workspace)");
    const double plan_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    const int kv_chunk_tokens = *fi::GetPtrFromBaseOffset<FiId>(ws.host, info.kv_chunk_size_ptr_offset);

    // one launch checked synchronously, the outputs, then the timed launches (kernels only)
    auto go = [&](auto t, auto kv) {
      Launch<decltype(t), decltype(kv)> launch(c, w, du, out, ws, info, v, B, d_slopes.as<float>(), sc);
      launch(true);
      download_outputs(c, u, slopes, out, &res);
      cuda::attach_device_copy(&res, out.o, c.dtype, u.total_q * c.num_qo_heads, c.head_dim_vo, c.head_dim_vo, opt);
      const auto once = [&] { launch(false); };
      time_launches(opt, once, &res.timing);
    };
    try {
      with_types(c, go);
    } catch (const fi::Error& e) {
      return refused(res, std::string("FlashInfer refuses the launch: ") + e.what());
    }

    std::string msg = "FlashInfer DecodePlan: split_kv " +
                      (info.split_kv ? "yes, kv chunk " + std::to_string(kv_chunk_tokens) + " tokens" : std::string("no")) +
                      ", grid " + std::to_string(info.padded_batch_size) + " x " + std::to_string(c.num_kv_heads) +
                      " CTAs; variant " + fi_variant_name(v) + "; plan " + std::to_string(static_cast<int>(plan_us)) +
                      " us on the host";
    if (sa.disable_split_kv)
      msg +=
          "; planner off: FlashInfer's CUDA-core decode plan has no disable_split_kv (its wrapper passes it to the "
          "tensor-core path only), so FlashInfer chose the split itself";
    if (!sa.note.empty()) msg += "; " + sa.note;
    if (info.split_kv && !partials_note(c).empty()) msg += "; " + partials_note(c);
    if (v == FiVariant::kAlibi && !c.attention.alibi) msg += "; window without ALiBi: the ALiBi variant with zero slopes";
    if (c.fp8_kv()) msg += "; " + fp8_note(c, sc);
    res.message = fed.empty() ? msg : fed + "; " + msg;
    return res;
  }

  GraphReplayReport capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad) override;
};

// Captured at the bucket with DecodePlan's CUDA-graph planning (padded_batch_size fixed by the bucket
// alone), re-planned for the padded real batch into the same workspace, replayed (fi_graph.h).
GraphReplayReport DecodeBackend::capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad) {
  GraphReplayReport r;
  if (auto why = graph_refusal(c, p, pad, kFa2GraphCaps); !why.empty()) {
    r.not_captured = why;
    return r;
  }
  const FiVariant v = choose_variant(c);
  if (v == FiVariant::kSinks) {  // check() refuses it first; the decode Launch has no sink rows
    r.not_captured = "attention sinks: FlashInfer's decode kernel has no sinks variant (flashinfer.prefill has)";
    return r;
  }
  const FiUnits cap = graph_units(pad.capture, p.pages.page_size), rep = graph_units(pad.entries, p.pages.page_size);
  auto plan = [&](const FiUnits& u, Workspaces* ws, fi::DecodePlanInfo* info, size_t* fb, size_t* ib) {
    std::vector<int> kv = u.kv_indptr;
    DecodePlanArgs a;
    a.kv_indptr_h = kv.data();
    a.batch_size = static_cast<uint32_t>(pad.bucket);
    a.num_qo_heads = c.num_qo_heads;
    a.num_kv_heads = c.num_kv_heads;
    a.page_size = u.page_size;
    a.enable_cuda_graph = true;
    a.size_only = ws == nullptr;
    if (ws) {
      a.float_buffer = ws->float_ws.as<void>();
      a.float_bytes = ws->float_bytes;
      a.int_buffer = ws->int_ws.as<void>();
      a.host_buffer = ws->host;
      a.int_bytes = ws->int_bytes;
    }
    cuda::check(decode_plan(c, a, v, info, fb, ib), "DecodePlan (CUDA graph)");
    if (ws) cuda::check(cudaDeviceSynchronize(), "DecodePlan (copy of the plan to the int workspace)");
  };
  auto grid = [&](const fi::DecodePlanInfo& i, const Workspaces& ws, size_t fb, size_t ib) {
    GraphGrid g;
    g.entries = pad.bucket;
    g.padded_batch = static_cast<int>(i.padded_batch_size);
    g.kv_heads = c.num_kv_heads;
    g.split_kv = i.split_kv;
    g.kv_chunk_tokens = *fi::GetPtrFromBaseOffset<FiId>(ws.host, i.kv_chunk_size_ptr_offset);
    g.float_ws = static_cast<int64_t>(fb);
    g.int_ws = static_cast<int64_t>(ib);
    return g;
  };
  size_t fb = 0, ib = 0, rfb = 0, rib = 0;
  plan(cap, nullptr, nullptr, &fb, &ib);
  const cuda::DeviceWorkload w = cuda::make_device_workload(c, p);
  const std::vector<float> slopes = alibi_slopes(c);
  const cuda::DeviceBuffer d_slopes = cuda::DeviceBuffer::from(slopes);
  // FP8: the case's tensor scales as floats fixed at capture, as the engines pass them (SGLang's
  // layer.k_scale_float / v_scale_float, vLLM's layer._k_scale_float / _v_scale_float: docs/conventions.md
  // section 17): k_scale folded into the captured sm_scale, `out *= v_scale` captured after the kernel
  const Fp8KvScales sc = fp8_kv_scales(c, w);
  GraphIo io(c, w, pad, cap, rep);
  Workspaces ws;
  ws.alloc(fb, ib);  // the engine's workspace: what the captured plan needs
  io.upload(cap);
  fi::DecodePlanInfo ci, ri;
  plan(cap, &ws, &ci, &fb, &ib);
  r.captured_grid = grid(ci, ws, fb, ib);
  r.captured = true;
  with_types(c, [&](auto t, auto kv) {
    Launch<decltype(t), decltype(kv)> launch(c, w, io.du, io.out, ws, ci, v, static_cast<uint32_t>(pad.bucket),
                                             d_slopes.as<float>(), sc);
    launch.graph_io(io.q.as<void>(), io.stream);
    io.capture([&] { launch(false); });
    return 0;
  });
  io.upload(rep);
  try {
    plan(rep, nullptr, nullptr, &rfb, &rib);  // what the real batch's plan needs, then the plan into the captured workspace
    plan(rep, &ws, &ri, &fb, &ib);
  } catch (const std::exception& e) {
    r.checks.push_back(
        {"fits the captured grid", false, false, std::string("does not fit: DecodePlan for the real batch: ") + e.what()});
    return r;
  }
  r.replay_grid = grid(ri, ws, rfb, rib);
  r.checks.push_back(fit_check(r.captured_grid, r.replay_grid, ci.ToVector() == ri.ToVector()));
  if (!r.checks.back().pass) return r;  // replaying would read past what was captured: not replayed
  replay_and_check(c, w, pad, rep, io, graph_time_reps_, &r);
  return r;
}

}  // namespace

std::unique_ptr<Backend> make_decode_backend() { return std::make_unique<DecodeBackend>(); }

}  // namespace attnscope::peers::flashinfer
