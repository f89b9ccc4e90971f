// flashinfer.prefill_sm90: FlashInfer's Hopper paged prefill (BatchPrefillWithPagedKVCacheDispatched
// in include/flashinfer/attention/hopper/prefill_sm90.cuh: wgmma, a TMA-loaded Q, K/V gathered
// through the page table by a cp.async producer warp group), planned by FlashInfer's own
// PrefillSM90Plan on the host, run in-process on attnscope's paged pool as it is: the
// device-generated inputs, the plan's page table and kv_indices, NHD or HND, any page size. The
// units are the requests, or vLLM's virtual batches of chunked local attention as causal requests
// with their sliced block tables (the kernel takes a CSR page table per unit).
//
// How the kernel addresses the pool (sparse_mainloop.cuh): key j of a unit is page
// kv_indices[kv_indptr + j / page_size], slot j % page_size, at page * page_stride + slot * stride_n
// + kv_head * stride_h elements; V is read with K's offsets. Keys at or past kv_len are never read
// (the last tile's loads are predicated and zero-filled), so poisoned slots do not reach the
// output. Q and O are [tokens, heads, dim] with the plan's qo_indptr; LSE is [tokens, heads], base 2.
//
// FP8 attention (/fp8_attention) runs FlashInfer's SM90 FP8 kernel on the same plan and pool:
// Q converted to FP8 bytes, K and V from the device workload's FP8 pools, the scales as its fa3 FP8
// module takes them (fp8_inputs below). An FP8 cache with 16-bit queries is refused, as FlashInfer
// routes it to fa2.
//
// Without the sm_90a units (sm90.cmake says why) this file only reports "not compiled: <why>".
#include "fi_backends.h"

#ifndef ATTNSCOPE_FI_SM90_WHY

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <flashinfer/attention/scheduler.cuh>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnscope/mask.h"
#include "device_check.h"
#include "device_result.h"
#include "device_workload.h"
#include "fi_conventions.h"
#include "fi_graph.h"
#include "fi_sm90_launch.h"
#include "gpu_timer.h"

namespace attnscope::peers::flashinfer {

// ---- the built table: the lines of fi_sm90_instances.def that sm90.cmake kept -------------------

// One function per built line, fi_sm90_d<D>_<dtype>_<variant>_<mask>_<window>(), defined by the
// generated unit of its head dim.
#define FI_SM90(D, N, V, M, W) Sm90Instance fi_sm90_d##D##_##N##_##V##_##M##_##W();
#include "fi_sm90_instances_built.def"
#undef FI_SM90

const std::vector<Sm90Instance>& sm90_instances() {
  static const std::vector<Sm90Instance> table = {
#define FI_SM90(D, N, V, M, W) fi_sm90_d##D##_##N##_##V##_##M##_##W(),
#include "fi_sm90_instances_built.def"
#undef FI_SM90
  };
  return table;
}

const Sm90Instance* find_sm90(int head_dim, DType dt, FiVariant v, FiMask m, bool window, std::optional<Fp8Format> fp8) {
  for (const Sm90Instance& i : sm90_instances())
    if (i.head_dim == head_dim && i.dtype == dt && i.variant == v && i.mask == m && i.window == window && i.fp8 == fp8) return &i;
  return nullptr;
}

namespace {

// "bf16" or "fp8_e4m3 Q/K/V, bf16 O" for messages.
std::string types_text(DType dt, std::optional<Fp8Format> fp8) {
  return fp8 ? std::string(fp8_name(*fp8)) + " Q/K/V, " + dtype_name(dt) + " O" : std::string(dtype_name(dt));
}

}  // namespace

std::string sm90_instances_text() {
  std::string s;
  for (const Sm90Instance& i : sm90_instances())
    s += (s.empty() ? "" : ", ") + std::to_string(i.head_dim) + " " + types_text(i.dtype, i.fp8) + " " +
         fi_variant_name(i.variant) + " " + fi_mask_name(i.mask) + (i.window ? " window" : "");
  return s.empty() ? "none" : s;
}

// ---- the backend ---------------------------------------------------------------------------------

namespace {

namespace fi = ::flashinfer;

constexpr const char* kId = "flashinfer.prefill_sm90";

// window_left that leaves every key inside the window: the window instantiation then runs exactly
// the no-window loop (get_swa_begin_kv_tile_idx is 0, get_swa_end_kv_tile_idx is -1, the left-mask
// comparison never fires), used where only the window instantiation of a variant is compiled.
constexpr int kUnboundedWindowLeft = 1 << 30;

// PrefillSM90Plan's query tile: 192 rows for head_dim_vo 64, else 128 (it must equal the kernel's CTA_Q).
int plan_tile(int head_dim_vo) { return head_dim_vo == 64 ? 192 : 128; }

std::string mask_feature_reason(const CaseSpec& c) {
  // Masks FlashInfer's native modes do not express: decided exactly with choose_mask (the same test
  // flashinfer.prefill uses to pick its custom mode), only when the case has such a feature at all.
  bool maybe_custom = c.attention.prefix_lm;
  for (const RequestSpec& r : c.requests) maybe_custom = maybe_custom || r.doc_starts.size() > 1 || r.pad_start.has_value();
  if (!maybe_custom) return "";
  std::string why;
  FiMask m;
  if (c.attention.local_chunk) {
    try {
      m = choose_mask(c, make_plan(c), &why);  // the virtual batches are needed (a rare combination)
    } catch (const CaseError& e) {
      return e.what();  // an invalid case says so here too, as the runner's validation would
    }
  } else {
    // the units are the requests: choose_mask reads only units and masks
    Plan p;
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
      p.units.push_back(WorkUnit{r, 0, c.requests[r].q_len, 0, c.requests[r].kv_len});
      p.masks.push_back(row_mask(c, r));
    }
    m = choose_mask(c, p, &why);
  }
  if (m != FiMask::kCustom) return "";
  return "needs a custom mask (" + why +
         "): FlashInfer's SM90 kernels have none (BatchPrefillWithPagedKVCacheDispatched returns cudaErrorNotSupported for "
         "MaskMode::kCustom, \"Not supported yet\"; FlashInfer's Python picks fa2 whenever a custom mask is given, "
         "is_fa3_backend_supported)";
}

// Which compiled instance runs the case, with which window_left.
struct Choice {
  const Sm90Instance* inst = nullptr;
  int window_left = -1;
  std::string note;     // how it runs when not the exact FlashInfer dispatch
  std::string refusal;  // no instance
};

Choice choose(const CaseSpec& c) {
  Choice ch;
  const FiVariant v = c.attention.soft_cap ? FiVariant::kSoftcap : FiVariant::kPlain;
  const FiMask m = c.attention.causal ? FiMask::kCausal : FiMask::kNone;
  const bool w = c.attention.window.has_value();
  const int d = c.head_dim_qk;
  // FP8 attention runs the FP8 kernel, in the cache's format
  const std::optional<Fp8Format> f8 = c.fp8_attention ? c.kv_cache.fp8 : std::nullopt;
  if ((ch.inst = find_sm90(d, c.dtype, v, m, w, f8))) {
    ch.window_left = w ? window_left(c) : -1;  // FlashInfer: use_sliding_window = window_left != -1
    return ch;
  }
  if (!w && (ch.inst = find_sm90(d, c.dtype, v, m, true, f8))) {
    ch.window_left = kUnboundedWindowLeft;
    ch.note = std::string("no window: runs the ") + fi_variant_name(v) +
              " sliding-window instantiation with window_left 2^30 (no key is left of it: the same arithmetic as FlashInfer's "
              "no-window kernel, which this build does not instantiate)";
    return ch;
  }
  ch.refusal = "head_dim " + std::to_string(d) + " " + types_text(c.dtype, f8) + ", variant " + fi_variant_name(v) + ", mask " +
               fi_mask_name(m) + (w ? ", sliding window" : "") +
               " is not instantiated in this build (fi_sm90_instances.def: " + sm90_instances_text() + ")";
  return ch;
}

// Empty when device 0 runs sm_90a code, else why not.
std::string sm90_device_refusal() {
  if (auto why = cuda::device_check(); !why.empty()) return why;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    cudaGetLastError();
    return "no CUDA device: cudaGetDeviceProperties failed";
  }
  if (prop.major == 9 && prop.minor == 0) return "";
  return std::string("device 0 (") + prop.name + ") is sm_" + std::to_string(prop.major * 10 + prop.minor) +
         ": flashinfer.prefill_sm90 is compiled for sm_90a (wgmma, TMA, setmaxnreg), which runs on compute capability 9.0 "
         "only (FlashInfer selects its fa3 backend only where is_sm90a_supported)";
}

// The page-locked host buffer PrefillSM90Plan writes the plan into before copying it to the device.
struct PinnedBuffer {
  void* p = nullptr;
  explicit PinnedBuffer(size_t bytes) {
    cuda::check(cudaMallocHost(&p, bytes), "cudaMallocHost (FlashInfer's page-locked int workspace)");
  }
  ~PinnedBuffer() {
    if (p) cudaFreeHost(p);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

// PrefillSM90Plan has no workspace-size function: its int workspace holds seven arrays of
// max_total_num_works ints and work_indptr ([num_SMs + 1]), each 16-byte aligned. The bound
// (ceil(rows / tile) + units - 1) x heads is its own CUDA-graph size, which covers every plan.
size_t sm90_int_workspace_bytes(int64_t total_rows, int64_t units, int heads, int tile, int sms) {
  const auto round16 = [](int64_t b) { return static_cast<size_t>((b + 15) / 16 * 16); };
  const int64_t works = ((total_rows + tile - 1) / tile + units - 1) * heads;
  return 7 * round16(4 * std::max<int64_t>(works, 1)) + round16(4 * (static_cast<int64_t>(sms) + 1)) + 16;
}

// FlashInfer's SM90 plan buffers: the device int workspace, the page-locked host buffer the plan is
// written into before its cudaMemcpyAsync (alive until the copy is synced), and a float workspace
// the plan never uses (no split-KV).
struct Sm90Workspace {
  size_t bytes;
  cuda::DeviceBuffer int_ws, float_ws;
  PinnedBuffer host;
  explicit Sm90Workspace(size_t b) : bytes(b), int_ws(b), float_ws(16), host(b) {}
};

// PrefillSM90Plan of the units (qo_indptr rows, kv_indptr pages, kv_len tokens) into ws, on the
// default stream, synced so the plan is on the device. Throws FlashInfer's error when it refuses.
void sm90_plan(const CaseSpec& c, const FiUnits& u, const std::vector<int>& kv_len, bool cuda_graph, Sm90Workspace& ws,
               fi::PrefillPlanSM90Info* info) {
  std::vector<int> qo = u.qo_indptr, kv = u.kv_indptr, kl = kv_len;
  cuda::check(fi::PrefillSM90Plan<int32_t>(ws.float_ws.as<void>(), ws.float_ws.bytes(), ws.int_ws.as<void>(), ws.host.p, ws.bytes,
                                           *info, qo.data(), kv.data(), kl.data(), static_cast<uint32_t>(u.total_q),
                                           static_cast<uint32_t>(kl.size()), static_cast<uint32_t>(c.num_qo_heads),
                                           static_cast<uint32_t>(c.num_kv_heads), static_cast<uint32_t>(c.head_dim_qk),
                                           static_cast<uint32_t>(c.head_dim_vo), static_cast<uint32_t>(u.page_size),
                                           c.attention.causal, cuda_graph, static_cast<uint32_t>(dtype_bytes(c.dtype)),
                                           /*stream=*/nullptr),
              "PrefillSM90Plan");
  cuda::check(cudaDeviceSynchronize(), "PrefillSM90Plan (copy of the plan to the int workspace)");
}

// Every Sm90Args field but the buffers (Q, K, V, O, LSE, kv_indices): the case's shape, the pool's
// strides, the instance's window and the scales.
Sm90Args shape_args(const CaseSpec& c, int page_size, int window_left_used) {
  Sm90Args a;
  const int64_t Hq = c.num_qo_heads, D = c.head_dim_vo;
  a.q_stride_n = Hq * c.head_dim_qk;  // Q and O are [tokens, heads, dim], contiguous
  a.q_stride_h = c.head_dim_qk;
  a.o_stride_n = Hq * D;
  a.o_stride_h = D;
  // attnscope's pool (kv_offset in workload.h) as FlashInfer's binding reads a paged cache's strides
  const int64_t ps = page_size, Hk = c.num_kv_heads;
  a.kv_page_stride = ps * Hk * D;
  a.kv_stride_n = c.kv_cache.layout == KvLayout::kNHD ? Hk * D : D;
  a.kv_stride_h = c.kv_cache.layout == KvLayout::kNHD ? D : ps * D;
  a.num_qo_heads = c.num_qo_heads;
  a.num_kv_heads = c.num_kv_heads;
  a.page_size = page_size;
  a.window_left = window_left_used;
  a.sm_scale = c.sm_scale_or_default();  // double, as FlashInfer's Python passes it
  a.logits_soft_cap = c.attention.soft_cap.value_or(0.0);
  return a;
}

// The plan's per-work arrays at its offsets into the int workspace.
void point_at_plan(Sm90Args* a, const Sm90Workspace& ws, const fi::PrefillPlanSM90Info& info) {
  char* iw = ws.int_ws.as<char>();
  a->qo_tile_indices = fi::GetPtrFromBaseOffset<int32_t>(iw, info.qo_tile_indices_offset);
  a->qo_indptr = fi::GetPtrFromBaseOffset<int32_t>(iw, info.qo_indptr_offset);
  a->kv_indptr = fi::GetPtrFromBaseOffset<int32_t>(iw, info.kv_indptr_offset);
  a->qo_lens = fi::GetPtrFromBaseOffset<int32_t>(iw, info.qo_len_offset);
  a->kv_lens = fi::GetPtrFromBaseOffset<int32_t>(iw, info.kv_len_offset);
  a->head_indices = fi::GetPtrFromBaseOffset<int32_t>(iw, info.head_indices_offset);
  a->work_indptr = fi::GetPtrFromBaseOffset<int32_t>(iw, info.work_indptr_offset);
  a->batch_indices = fi::GetPtrFromBaseOffset<int32_t>(iw, info.batch_indices_offset);
}

// The Q TMA descriptor is encoded on the host at launch; cute asserts (and, under NDEBUG, silently
// builds a broken descriptor) unless Q is 16-byte aligned with 16-byte strides and has a row.
std::string tma_refusal(const CaseSpec& c, const Sm90Args& a) {
  const uintptr_t q_addr = reinterpret_cast<uintptr_t>(a.q);
  const int64_t qb = c.fp8_attention ? 1 : dtype_bytes(c.dtype);  // Q's element bytes
  if (a.nnz_qo >= 1 && q_addr % 16 == 0 && (a.q_stride_n * qb) % 16 == 0 && (a.q_stride_h * qb) % 16 == 0) return "";
  return "Q at " + std::to_string(q_addr) + " with strides " + std::to_string(a.q_stride_n) + " / " +
         std::to_string(a.q_stride_h) + " elements does not meet TMA's 16-byte alignment";
}

std::string same_schedule_refusal(int64_t rows, int units, int tile) {
  return "FlashInfer's PrefillSM90Plan chose same_schedule_for_all_heads (over 4096 work tiles per head: " +
         std::to_string((rows + tile - 1) / tile + units - 1) +
         "), whose BatchPrefillTileScheduler kernels are not instantiated in this build (fi_sm90_instances.def instantiates the "
         "persistent scheduler only)";
}

std::string kernel_name(const CaseSpec& c, const Sm90Instance& k, int window_left_used, int sms) {
  const dim3 grid(static_cast<unsigned>(sms)), block(static_cast<unsigned>(k.threads));
  return std::string(k.fp8 ? "FP8PrefillWithKVCacheKernel<FP8SparseCollectiveMainloop"
                           : "PrefillWithKVCacheKernel<SparseCollectiveMainloop") +
         ", CTA_Q " + std::to_string(k.cta_q) + ", CTA_KV " + std::to_string(k.cta_kv) + ", head_dim " +
         std::to_string(k.head_dim) + ", " + types_text(k.dtype, k.fp8) + ", mask " + fi_mask_name(k.mask) +
         (k.window ? ", sliding window (window_left " + std::to_string(window_left_used) + ")" : "") + ", " +
         (k.fp8                              ? "DefaultFP8Attention"
          : k.variant == FiVariant::kSoftcap ? "LogitsSoftCap"
                                             : "StandardAttention") +
         ", BatchPrefillPersistentTileScheduler> (" + std::to_string(c.num_qo_heads) + " qo / " + std::to_string(c.num_kv_heads) +
         " kv heads) with " + cuda::shape(grid, block, k.smem_bytes);
}

// A FlashInfer status, a pending launch error or (sync) a fault, as an error naming the kernel.
void check_sm90_launch(cudaError_t st, const std::string& what, bool sync) {
  cudaError_t e = st;
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e == cudaSuccess && sync) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) throw cuda::CudaError("kernel " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// FP8 (docs/conventions.md section 10). FlashInfer's SM90 FP8 kernel takes Q, K and V in one FP8
// type (batch_prefill_fp8_sm90.cu: static_assert(std::is_same_v<DTypeQ, DTypeKV>)) and a 16-bit
// output; the registry has already refused token scales and FP8 attention elsewhere (descriptor).
std::string fp8_refusal(const CaseSpec& c) {
  if (!c.fp8_kv()) return "";
  if (!c.fp8_attention)
    return std::string("an ") + fp8_name(*c.kv_cache.fp8) +
           " KV cache with 16-bit queries: FlashInfer's SM90 kernels take an FP8 cache only with FP8 queries (FP8 attention, "
           "/fp8_attention: batch_prefill_fp8_sm90.cu static_assert(is_same_v<DTypeQ, DTypeKV>)); its Python runs this case "
           "on fa2 (is_fa3_backend_supported: \"FA3 FP8 KV cache currently requires FP8 query\"), as flashinfer.prefill does";
  if (c.dtype != DType::kBf16)
    return std::string("FP8 attention with a ") + dtype_name(c.dtype) +
           " output is not instantiated in this build (flashinfer.prefill_sm90's FP8 kernel writes bf16, fi_sm90_instances.def)";
  if (c.attention.soft_cap)
    return "soft-cap with FP8 attention: FlashInfer's FP8 kernel has one variant, DefaultFP8Attention (hopper/variants.cuh), "
           "without a logits transform";
  return "";
}

// Q bytes from the dtype copy: the values are FP8 values already (exact), so the conversion is exact.
template <class T, class F8>
__global__ void to_fp8_kernel(const T* in, F8* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = F8(static_cast<float>(in[i]));
}

// The FP8 kernel's inputs beside the pools: Q as FP8 bytes and the scales as FlashInfer's fa3 FP8
// module takes them from its Python (prefill.py _split_scale_param): tensor granularity as floats
// (scale_*_scalar), head granularity as per-head float tensors (maybe_scale_*; Q's one scale
// repeated over the qo heads, FlashInfer's scale_q being per qo head).
struct Fp8Inputs {
  cuda::DeviceBuffer q, q_scale;
  double qs = 1.0, ks = 1.0, vs = 1.0;
  bool per_head = false;
  std::string note;
  // k / v: the device workload's per-head scales ([num_kv_heads] floats) when per_head
  void set(Sm90Args* a, const cuda::DeviceWorkload& w) const {
    a->q_scale_scalar = qs;
    a->k_scale_scalar = ks;
    a->v_scale_scalar = vs;
    if (!per_head) return;
    a->q_scale = q_scale.as<float>();
    a->k_scale = w.k_scale.as<float>();
    a->v_scale = w.v_scale.as<float>();
  }
};

Fp8Inputs fp8_inputs(const CaseSpec& c, const cuda::DeviceWorkload& w, int64_t total_q) {
  Fp8Inputs f;
  if (!c.fp8_attention) return f;
  const int64_t n = total_q * c.num_qo_heads * c.head_dim_qk;
  f.q.alloc(std::max<int64_t>(n, 16));
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 4096)));
  if (*c.kv_cache.fp8 == Fp8Format::kE4M3)
    to_fp8_kernel<<<blocks, 256>>>(w.q.as<nv_bfloat16>(), f.q.as<__nv_fp8_e4m3>(), n);
  else
    to_fp8_kernel<<<blocks, 256>>>(w.q.as<nv_bfloat16>(), f.q.as<__nv_fp8_e5m2>(), n);
  cuda::check(cudaGetLastError(), "Q to FP8 bytes");
  f.per_head = w.granularity == ScaleGranularity::kHead;
  f.qs = w.q_scale;
  if (!f.per_head) {
    f.ks = w.k_scale.to_host<float>(1)[0];
    f.vs = w.v_scale.to_host<float>(1)[0];
  } else {
    // FlashInfer's scale_q is per qo head: attnscope's one Q scale on every head
    f.q_scale = cuda::DeviceBuffer::from(std::vector<float>(c.num_qo_heads, w.q_scale));
  }
  f.note = std::string("FP8 attention: Q, K, V ") + fp8_name(*c.kv_cache.fp8) +
           " bytes through BatchFP8PrefillWithPagedKVCacheDispatched (DefaultFP8Attention: P scaled by the format's max and "
           "quantised to FP8 for the P.V wgmma), scales " +
           (f.per_head ? "per head as maybe_scale_q / _k / _v tensors" : "as scale_q / _k / _v scalars") +
           " applied in the kernel";
  return f;
}

class PrefillSm90Backend final : public Backend, public GraphReplayable {
 public:
  std::string id() const override { return kId; }
  std::string describe() const override {
    return std::string("FlashInfer ") + ATTNSCOPE_FLASHINFER_PIN +
           " Hopper paged prefill (BatchPrefillWithPagedKVCacheDispatched, prefill_sm90.cuh: wgmma, TMA, warp-specialised), "
           "planned by FlashInfer's PrefillSM90Plan, on attnscope's paged pool; chunked local attention as vLLM's virtual "
           "batches";
  }

  // The case's own refusals first (they read the same with or without a device), then the device.
  std::string check(const CaseSpec& c) const override {
    if (c.dtype == DType::kFp32)
      return "dtype fp32: FlashInfer's SM90 prefill computes with wgmma on 16-bit (or fp8) operands; there is no fp32 "
             "instantiation (its fa3 modules take fp16, bf16 or fp8 queries)";
    if (c.head_dim_qk != c.head_dim_vo)
      return "head_dim qk " + std::to_string(c.head_dim_qk) + " != vo " + std::to_string(c.head_dim_vo) +
             ": FlashInfer's SM90 paged prefill needs equal head dims (SparseCollectiveMainloop: static_assert(HEAD_DIM_QK == "
             "HEAD_DIM_VO); BatchPrefillWithPagedKVCacheDispatched returns cudaErrorNotSupported otherwise)";
    const int d = c.head_dim_qk;
    if (d != 64 && d != 128 && d != 256)
      return "head_dim " + std::to_string(d) +
             ": FlashInfer's SM90 prefill exists for head dims 64, 128 and 256 only (prefill_sm90.cuh: static_assert(HEAD_DIM_VO "
             "== 64 || HEAD_DIM_VO == 128 || HEAD_DIM_VO == 256); its Python falls back to fa2, "
             "is_fa3_prefill_head_dim_supported)";
    if (c.attention.alibi)
      return "ALiBi: FlashInfer's SM90 variants (StandardAttention, LogitsSoftCap) have no positional bias; its Python does not "
             "pick fa3 for pos_encoding_mode ALiBi (is_fa3_backend_supported)";
    if (auto why = mask_feature_reason(c); !why.empty()) return why;
    if (auto why = fp8_refusal(c); !why.empty()) return why;
    if (const Choice ch = choose(c); !ch.refusal.empty()) return ch.refusal;
    return sm90_device_refusal();
  }

  Result run(const CaseSpec& c, const Plan& p, const Workload&, const RunOptions& opt) override {
    Result res;
    res.backend = id();
    const FiUnits u = fi_units(c, p);
    const std::vector<int64_t> first = unit_first_tokens(c, p);
    for (size_t i = 0; i < first.size(); ++i)
      if (first[i] != u.qo_indptr[i])
        throw std::runtime_error("unit " + std::to_string(i) + " starts at token " + std::to_string(first[i]) + ", not " +
                                 std::to_string(u.qo_indptr[i]) + ": the plan's units are not contiguous in token order");
    std::string why_custom;
    if (choose_mask(c, p, &why_custom) == FiMask::kCustom) return refused(res, "needs a custom mask: " + why_custom);
    const Choice ch = choose(c);
    if (!ch.inst) return refused(res, ch.refusal);
    const Sm90Instance& k = *ch.inst;
    const int B = static_cast<int>(p.units.size()), Hq = c.num_qo_heads, D = c.head_dim_vo;
    const int tile = plan_tile(D);
    if (tile != k.cta_q)
      return refused(res, "PrefillSM90Plan tiles queries by " + std::to_string(tile) + " rows but the kernel's CTA_Q is " +
                              std::to_string(k.cta_q) + ": FlashInfer's plan and kernel disagree for head_dim " +
                              std::to_string(D));
    int sms = 0;
    cuda::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute (SM count)");

    // FlashInfer's plan: qo_indptr (rows), kv_indptr (pages) and kv_len (tokens) per unit, int32
    std::vector<int> kv_len_h;
    for (const WorkUnit& w : p.units) kv_len_h.push_back(w.kv_len);
    const size_t int_bytes = sm90_int_workspace_bytes(u.total_q, B, Hq, tile, sms);
    const int64_t eb = dtype_bytes(c.dtype);
    cuda::require_device_memory(cuda::device_workload_bytes(c, p) + u.total_q * Hq * (D * eb + 4) +
                                    static_cast<int64_t>(int_bytes) + 4 * static_cast<int64_t>(u.kv_indices.size() + 1),
                                "flashinfer.prefill_sm90 (inputs, outputs, FlashInfer's int workspace)");
    Sm90Workspace ws(int_bytes);
    fi::PrefillPlanSM90Info info;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      sm90_plan(c, u, kv_len_h, c.split.cuda_graph, ws, &info);
    } catch (const fi::Error& e) {
      return refused(res, std::string("FlashInfer's PrefillSM90Plan refuses the batch: ") + e.what());
    }
    const double plan_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (info.same_schedule_for_all_heads) return refused(res, same_schedule_refusal(u.total_q, B, tile));
    const int* work_indptr_h = fi::GetPtrFromBaseOffset<int>(ws.host.p, info.work_indptr_offset);
    int most = 0, least = INT32_MAX;
    for (int i = 0; i < sms; ++i) {
      most = std::max(most, work_indptr_h[i + 1] - work_indptr_h[i]);
      least = std::min(least, work_indptr_h[i + 1] - work_indptr_h[i]);
    }
    const int works = work_indptr_h[sms];

    const auto shared_w = cuda::device_workload(c, p, opt);
    const cuda::DeviceWorkload& w = *shared_w;
    const Fp8Inputs f8 = fp8_inputs(c, w, u.total_q);
    const cuda::DeviceBuffer d_indices = cuda::DeviceBuffer::from(u.kv_indices.empty() ? std::vector<int>{0} : u.kv_indices);
    cuda::DeviceBuffer o(u.total_q * Hq * D * eb), lse(u.total_q * Hq * 4);
    // poison: an element the kernel does not write stays NaN (0xffff is NaN in fp16 and bf16)
    for (cuda::DeviceBuffer* b : {&o, &lse}) cuda::check(cudaMemset(b->as<void>(), 0xff, b->bytes()), "cudaMemset (poison)");

    Sm90Args a = shape_args(c, u.page_size, ch.window_left);
    a.q = c.fp8_attention ? f8.q.as<void>() : w.q.as<void>();
    a.k = c.fp8_attention ? w.k8.as<void>() : w.k.as<void>();
    a.v = c.fp8_attention ? w.v8.as<void>() : w.v.as<void>();
    f8.set(&a, w);
    a.o = o.as<void>();
    a.lse = lse.as<float>();
    a.kv_indices = d_indices.as<int32_t>();
    point_at_plan(&a, ws, info);
    a.nnz_qo = u.total_q;
    if (auto why = tma_refusal(c, a); !why.empty()) return refused(res, why);

    const std::string name = kernel_name(c, k, ch.window_left, sms);
    auto once = [&](bool sync) { check_sm90_launch(k.launch(a, nullptr), name, sync); };
    once(true);
    res.o = cuda::download_as_float(o, u.total_q * Hq * D, c.dtype);
    res.lse = lse.to_host<float>(static_cast<size_t>(u.total_q * Hq));
    for (float& l : res.lse) l = lse2_to_natural(l);
    cuda::attach_device_copy(&res, o, c.dtype, u.total_q * Hq, D, D, opt);

    // kernel launches only (the plan is made once, before)
    cuda::time_launches(
        opt, [&] { once(false); }, [] { cuda::check(cudaDeviceSynchronize(), "benchmark loop of flashinfer.prefill_sm90"); },
        &res.timing);

    std::string msg = "FlashInfer PrefillSM90Plan: cta_tile_q " + std::to_string(tile) + ", " + std::to_string(works) +
                      " work tiles (q tile x qo head) over " + std::to_string(sms) + " persistent CTAs (" +
                      std::to_string(least) + " to " + std::to_string(most) + " each), no split-KV; kernel CTA_Q x CTA_KV " +
                      std::to_string(k.cta_q) + " x " + std::to_string(k.cta_kv) + ", mask " + fi_mask_name(k.mask) +
                      ", variant " + fi_variant_name(k.variant) +
                      (k.window ? ", window_left " + std::to_string(ch.window_left) : std::string()) + "; plan " +
                      std::to_string(static_cast<int>(plan_us)) + " us on the host";
    if (c.fp8_attention) msg += "; " + f8.note;
    for (const std::string& n : notes(c, ch, sms)) msg += "; " + n;
    res.message = msg;
    return res;
  }

  GraphReplayReport capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad) override;

 private:
  // What the case asks for that this backend runs differently, or that does not apply to it.
  static std::vector<std::string> notes(const CaseSpec& c, const Choice& ch, int sms) {
    std::vector<std::string> n;
    if (!ch.note.empty()) n.push_back(ch.note);
    if (c.split.planner != Planner::kFlashInfer || c.split.fixed_tile_q)
      n.push_back(std::string("/split/planner ") + planner_name(c.split.planner) +
                  (c.split.fixed_tile_q ? " and /split/fixed_tile_q" : "") +
                  " do not apply: PrefillSM90Plan has no split-KV and no tile argument (it balances whole q tiles over the SMs)");
    if (c.split.cuda_graph) n.push_back("cuda_graph: PrefillSM90Plan sizes its arrays for replays (the same work tiles)");
    if (sms != c.split.num_sms)
      n.push_back("FlashInfer planned for device 0's " + std::to_string(sms) + " SMs (/split/num_sms " +
                  std::to_string(c.split.num_sms) + " is the input of attnscope's model of the FA2 planner)");
    return n;
  }
};

// The kv length (tokens) of every padded entry: PrefillSM90Plan's kv_len_arr.
std::vector<int> entry_kv_lens(const std::vector<GraphPadEntry>& entries) {
  std::vector<int> v;
  for (const GraphPadEntry& e : entries) v.push_back(e.seq_len);
  return v;
}

// The persistent grid (one CTA per SM, no split-KV) and the int workspace a CUDA-graph plan of
// `rows` query rows over the bucket's entries lays out.
GraphGrid sm90_grid(const CaseSpec& c, const CudaGraphPad& pad, int sms, int tile, int64_t rows) {
  GraphGrid g;
  g.entries = pad.bucket;
  g.padded_batch = sms;
  g.kv_heads = 1;  // the grid is one-dimensional: the work tiles carry their heads
  g.cta_tile_q = tile;
  g.int_ws = static_cast<int64_t>(sm90_int_workspace_bytes(rows, pad.bucket, c.num_qo_heads, tile, sms));
  return g;
}

// Captured at the bucket with PrefillSM90Plan's CUDA-graph sizing (its work arrays sized for
// ceil(rows / tile) + bucket - 1 tiles per head, the grid one CTA per SM), re-planned for the padded
// real batch into the same int workspace, replayed (fi_graph.h). Real rows: the plan never splits KV,
// so a row is computed by one CTA over all its keys in the eager order whatever the schedule: the
// session's fixed-split bit check holds for it (bits_differ_why stays empty), else the twice_lowp rule.
GraphReplayReport PrefillSm90Backend::capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad) {
  GraphReplayReport r;
  if (auto why = graph_refusal(c, p, pad); !why.empty()) {
    r.not_captured = why;
    return r;
  }
  const Choice ch = choose(c);
  if (!ch.inst) {
    r.not_captured = ch.refusal;
    return r;
  }
  const Sm90Instance& k = *ch.inst;
  const int tile = plan_tile(c.head_dim_vo);
  if (tile != k.cta_q) {
    r.not_captured =
        "PrefillSM90Plan's query tile " + std::to_string(tile) + " is not the kernel's CTA_Q " + std::to_string(k.cta_q);
    return r;
  }
  int sms = 0;
  cuda::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute (SM count)");
  const FiUnits cap = graph_units(pad.capture, p.pages.page_size), rep = graph_units(pad.entries, p.pages.page_size);
  const int64_t rows = static_cast<int64_t>(pad.bucket) * pad.tokens_per_entry;
  r.captured_grid = sm90_grid(c, pad, sms, tile, cap.total_q);

  const cuda::DeviceWorkload w = cuda::make_device_workload(c, p);
  GraphIo io(c, w, pad, cap, rep);
  Sm90Workspace ws(static_cast<size_t>(r.captured_grid.int_ws));  // the engine's workspace: what the captured plan needs
  io.upload(cap);
  fi::PrefillPlanSM90Info ci, ri;
  sm90_plan(c, cap, entry_kv_lens(pad.capture), true, ws, &ci);
  if (ci.same_schedule_for_all_heads) {
    r.not_captured = same_schedule_refusal(cap.total_q, pad.bucket, tile);
    return r;
  }
  Sm90Args a = shape_args(c, p.pages.page_size, ch.window_left);
  a.q = io.q.as<void>();
  a.k = w.k.as<void>();
  a.v = w.v.as<void>();
  a.o = io.out.o.as<void>();
  a.lse = io.out.lse.as<float>();
  a.kv_indices = io.du.kv_indices.as<int32_t>();
  a.nnz_qo = rows;  // the TMA descriptor, baked into the graph, spans the bucket's rows
  point_at_plan(&a, ws, ci);
  if (auto why = tma_refusal(c, a); !why.empty()) {
    r.not_captured = why;
    return r;
  }
  const std::string name = kernel_name(c, k, ch.window_left, sms);
  // once uncaptured: the module loads and the shared-memory attribute is set outside the capture
  check_sm90_launch(k.launch(a, io.stream), name + " (before the capture)", true);
  r.captured = true;
  io.capture([&] { check_sm90_launch(k.launch(a, io.stream), name, false); });

  io.upload(rep);
  GraphGrid want = sm90_grid(c, pad, sms, tile, rep.total_q);
  try {
    if (want.int_ws > r.captured_grid.int_ws) throw std::runtime_error("its work arrays outgrow the captured int workspace");
    sm90_plan(c, rep, entry_kv_lens(pad.entries), true, ws, &ri);  // into the captured workspace
  } catch (const std::exception& e) {
    r.replay_grid = want;
    r.checks.push_back(
        refused_fit(r.captured_grid, want, std::string("PrefillSM90Plan for the real batch refuses: ") + e.what()));
    return r;
  }
  r.replay_grid = want;
  r.checks.push_back(fit_check(r.captured_grid, r.replay_grid, ci.ToVector() == ri.ToVector()));
  if (!r.checks.back().pass) return r;  // the captured launch would read the plan at offsets it no longer has
  replay_and_check(c, w, pad, rep, io, graph_time_reps_, &r);
  return r;
}

}  // namespace

std::unique_ptr<Backend> make_prefill_sm90_backend() { return std::make_unique<PrefillSm90Backend>(); }

}  // namespace attnscope::peers::flashinfer

#else  // ATTNSCOPE_FI_SM90_WHY: the sm_90a units are not part of this build

namespace attnscope::peers::flashinfer {

std::unique_ptr<Backend> make_prefill_sm90_backend() {
  return make_not_compiled_backend("flashinfer.prefill_sm90", ATTNSCOPE_FI_SM90_WHY);
}

}  // namespace attnscope::peers::flashinfer

#endif
