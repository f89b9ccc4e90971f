// cudnn.sdpa_fp8: cuDNN's FP8 SDPA forward (the frontend's sdpa_fp8 node) on the case's FP8
// attention inputs: Q, K and V as FP8 bytes with per-tensor descale factors (the case's scales),
// P quantised to FP8 inside the kernel with scale_s, O written in the case dtype where cuDNN allows
// it and otherwise in FP8 with scale_o, dequantised here. Q and K/V are the device workload's bytes,
// K/V read in place (paged through page tables, or ragged), as cudnn.sdpa reads the dtype pool.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attnscope/plan.h"
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

// P = exp(s - running max) lies in [0, 1]: scale_s maps 1 to 448 (E4M3's largest finite, also
// inside E5M2's range), the value the frontend's FP8 current-scaling sample uses.
constexpr float kScaleS = 448.0f;

// The device workload holds Q's FP8 values in the dtype (exact): their FP8 bytes, bit for bit.
__global__ void q_to_fp8_bytes(const uint16_t* q, int64_t n, DType dt, Fp8Format f, uint8_t* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float x = dt == DType::kFp16 ? f16_bits_to_f32(q[i]) : bf16_bits_to_f32(q[i]);
    out[i] = f32_to_fp8_bits(f, x);
  }
}

int grid_for(int64_t n) { return static_cast<int>(std::clamp<int64_t>((n + 255) / 256, 1, 65535)); }

class SdpaFp8Backend final : public Backend {
 public:
  std::string id() const override { return "cudnn.sdpa_fp8"; }
  std::string describe() const override {
    return "cuDNN's FP8 scaled-dot-product attention (cuDNN frontend sdpa_fp8, composite graph): Q, K, V as FP8 "
           "bytes with per-tensor descale factors, P quantised to FP8 in the kernel (scale_s 448), O in FP8 with scale_o "
           "1 / v_scale where cuDNN cannot write the case dtype (Hopper), dequantised by attnscope; causal bands "
           "top-left only (Hopper); " +
           cudnn_version_note();
  }

  std::string check(const CaseSpec& c) const override {
    if (auto why = fp8_refusal_reason(c); !why.empty()) return why;
    if (auto why = refusal_reason(c, cudnn_runtime_version()); !why.empty()) return why;
    // a library the frontend built here cannot use (issue 47): unsupported with the versions and path
    if (!cudnn_runtime().usable) return cudnn_runtime().reason;
    return cuda::device_check();
  }

  Result run(const CaseSpec& c, const Plan& p, const Workload&, const RunOptions& opt) override;
};

// The graph of the case, trying the forms cuDNN may refuse in turn: O in the case dtype, then in
// FP8; the dense form, then ragged; the packed GQA decode view, then the plain one. Each refusal is
// said in `notes`; the last one is thrown. A bottom-right band is refused at once: no other form
// changes the band.
GraphLookup build_with_fallbacks(const CaseSpec& c, const Plan& p, SdpaProblem* s, std::string* notes) {
  TranslateOptions o;
  o.prefer_top_left = true;
  bool o_fp8 = false;
  for (;;) {
    *s = translate(c, p, o);
    s->key.fp8 = *c.kv_cache.fp8;
    s->key.o_fp8 = o_fp8;
    try {
      return find_or_build_graph(s->key);
    } catch (const CudnnError& e) {
      if (!e.unsupported) throw;
      std::string what;
      // The band's alignment is the usual cause on Hopper, where cuDNN's words name only the
      // architecture: say which band the graph asked for.
      const bool bottom_right = (s->key.causal || s->key.window) && !s->key.top_left;
      if (bottom_right)
        throw CudnnError(
            "a bottom-right causal / window band (a sequence with q_len != kv_len; top-left equals it only "
            "where q_len == kv_len): " +
                std::string(e.what()),
            true);
      if (!o_fp8) {
        o_fp8 = true;
        what = std::string("O in ") + dtype_name(c.dtype);
      } else if (s->key.dense) {
        o.dense_when_uniform = false;
        what = "the dense form";
      } else if (s->key.group > 1) {
        o.pack_gqa_decode = false;
        what = "the packed GQA decode view";
      } else {
        throw CudnnError(std::string(e.what()) + *notes, true);
      }
      *notes += "; " + what + " was refused (" + e.what() + ")";
    }
  }
}

Result SdpaFp8Backend::run(const CaseSpec& c, const Plan& p, const Workload&, const RunOptions& opt) {
  Result res;
  res.backend = id();
  const Fp8Format fmt = *c.kv_cache.fp8;
  const int Hq = c.num_qo_heads, dqk = c.head_dim_qk, dv = c.head_dim_vo, eb = dtype_bytes(c.dtype);
  const int64_t total_q = c.total_q();
  SdpaProblem s = translate(c, p, TranslateOptions{});
  std::string notes;
  if (s.key.batch == 0) {
    // Every query is padding: nothing for cuDNN to compute, every row is fully masked.
    res.o.assign(total_q * Hq * dv, 0.0f);
    res.lse.assign(total_q * Hq, 0.0f);
    apply_conventions(c, s, &res.o, &res.lse);
    res.message = "every query is padding: cuDNN not called; " + s.masks;
    return res;
  }
  const auto lock = cudnn_lock();
  GraphLookup g;
  try {
    g = build_with_fallbacks(c, p, &s, &notes);
  } catch (const CudnnError& e) {
    if (!e.unsupported) throw;
    // cuDNN's own support check refused every form: the library's reason, not a failure.
    res.status = Status::kUnsupported;
    res.message = e.what();
    return res;
  }
  const bool o_fp8 = s.key.o_fp8;
  cuda::require_device_memory(cuda::device_workload_bytes(c, p) + total_q * Hq * (dqk + dv * (o_fp8 ? 1 : eb) + 4) +
                                  DeviceIndices::bytes(s) + g.graph->workspace_bytes,
                              "cudnn.sdpa_fp8 (inputs, FP8 Q, outputs, index tensors, workspace)");
  const auto shared_w = cuda::device_workload(c, p, opt);
  const cuda::DeviceWorkload& w = *shared_w;
  if (!w.fp8 || w.k8.bytes() == 0 || w.k_scale.bytes() < sizeof(float))
    throw std::logic_error("cudnn.sdpa_fp8: the device workload holds no FP8 cache bytes or scales");

  // Q's FP8 bytes.
  const int64_t q_elems = total_q * Hq * dqk;
  DeviceBuffer q8(std::max<int64_t>(q_elems, 1));
  q_to_fp8_bytes<<<grid_for(q_elems), 256>>>(w.q.as<uint16_t>(), q_elems, c.dtype, fmt, q8.as<uint8_t>());
  cuda::check(cudaGetLastError(), "cudnn.sdpa_fp8 Q to FP8 bytes");

  // The factors: descale_* are the case's scales (value = stored * scale); P is stored as P * 448
  // and read back with 1 / 448; O, a convex combination of V rows (|O| <= v_scale * FP8 max), is
  // stored as O / v_scale, the range of V's own bytes.
  const float q_scale = w.q_scale;
  const float k_scale = w.k_scale.to_host<float>(1)[0], v_scale = w.v_scale.to_host<float>(1)[0];
  const float scale_o = 1.0f / v_scale;
  DeviceBuffer factors = DeviceBuffer::from(std::vector<float>{q_scale, k_scale, v_scale, 1.0f / kScaleS, kScaleS, scale_o});
  DeviceBuffer amax(2 * sizeof(float));
  DeviceBuffer o(std::max<int64_t>(total_q * Hq * dv, 1) * (o_fp8 ? 1 : eb)), lse(std::max<int64_t>(total_q * Hq, 1) * 4);
  // Poison: an element cuDNN does not write stays NaN (0xff is NaN in E4M3 and E5M2, 0xffff in
  // fp16 and bf16, 0xffffffff in fp32) and shows in the comparison.
  for (DeviceBuffer* b : {&o, &lse}) cuda::check(cudaMemset(b->as<void>(), 0xff, b->bytes()), "cudaMemset (poison outputs)");

  DeviceIndices idx(s);
  DeviceBuffer workspace(static_cast<size_t>(g.graph->workspace_bytes));
  Bindings b;
  b.q = q8.as<void>();
  b.k = w.k8.as<void>();
  b.v = w.v8.as<void>();
  b.o = o.as<void>();
  b.lse = lse.as<float>();
  idx.bind(&b);
  b.workspace = workspace.as<void>();
  const float* f = factors.as<float>();
  b.descale_q = f;
  b.descale_k = f + 1;
  b.descale_v = f + 2;
  b.descale_s = f + 3;
  b.scale_s = f + 4;
  b.scale_o = f + 5;
  b.amax_s = amax.as<float>();
  b.amax_o = amax.as<float>() + 1;

  g.graph->execute(b);
  cuda::check(cudaDeviceSynchronize(), "cudnn.sdpa_fp8 graph execution");
  const int64_t o_elems = total_q * Hq * dv;
  if (o_fp8) {
    // O = stored / scale_o, rounded to the case dtype as an eager dequantisation writes it.
    const auto bytes = o.to_host<uint8_t>(o_elems);
    res.o.resize(o_elems);
    for (int64_t i = 0; i < o_elems; ++i) res.o[i] = round_to(c.dtype, fp8_bits_to_f32(fmt, bytes[i]) * v_scale);
  } else {
    res.o = cuda::download_as_float(o, o_elems, c.dtype);
  }
  res.lse = lse.to_host<float>(total_q * Hq);
  apply_conventions(c, s, &res.o, &res.lse);
  cuda::attach_host_copy(&res, opt);  // O's padding rows (and an FP8 O's scale) are applied on the host
  const auto amaxes = amax.to_host<float>(2);

  // The graph execution only, as cudnn.sdpa times it (Q's bytes are the case's input).
  cuda::time_launches(
      opt, [&] { g.graph->execute(b); }, [] { cuda::check(cudaDeviceSynchronize(), "cudnn.sdpa_fp8 benchmark loop"); },
      &res.timing);

  res.message = graph_time_text(g) + "; " + g.graph->implementation + " FP8 SDPA, plan " +
                (g.graph->engine.empty() ? std::string("?") : g.graph->engine) + "; shape class " + s.key.describe() +
                "; descale q/k/v " + std::to_string(q_scale) + " / " + std::to_string(k_scale) + " / " + std::to_string(v_scale) +
                ", P as FP8 with scale_s 448" +
                (o_fp8 ? ", O as " + std::string(fp8_name(fmt)) + " with scale_o 1/v_scale, dequantised to " +
                             dtype_name(c.dtype) + " by attnscope"
                       : ", O in " + std::string(dtype_name(c.dtype))) +
                "; cuDNN's Amax_S " + fixed_digits(amaxes[0], 4) + ", Amax_O " + fixed_digits(amaxes[1], 4) + "; " + s.masks +
                notes;
  const std::string nan = unused_slot_note(c, res.o, res.lse, "cuDNN " + cudnn_version_text(cudnn_runtime_version()));
  if (!nan.empty()) res.message += "; " + nan;
  return res;
}

}  // namespace

std::unique_ptr<Backend> make_sdpa_fp8_backend() { return std::make_unique<SdpaFp8Backend>(); }

}  // namespace attnscope::peers::cudnn
