// cuda.flash: executes the SplitPlan on the GPU (flash kernel per work item and KV head, then the
// merge of split-KV partials in chunk order), and times it with CUDA events when asked.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attnscope/item_pairs.h"
#include "attnscope/mask.h"
#include "attnscope/softmax_state.h"
#include "cuda_backends.h"
#include "device_check.h"
#include "device_result.h"
#include "flash_debug.h"
#include "flash_graph.h"
#include "flash_mla.h"
#include "flash_params.h"
#include "flash_run.h"
#include "gpu_timer.h"
#include "sm80_primitives.cuh"

namespace attnscope::cuda {

#define FLASH_INSTANCE(D, N, T) void launch_flash_d##D##_##N(const FlashParams&, int, int, int, dim3, cudaStream_t);
#include "flash_instances_built.def"  // instances/flash_instances.def as CMake filtered it
#undef FLASH_INSTANCE

FlashLauncher find_flash_launcher(int head_dim, DType dt) {
  const char* name = dt == DType::kFp16 ? "fp16" : dt == DType::kBf16 ? "bf16" : "";
#define FLASH_INSTANCE(D, N, T) \
  if (head_dim == D && std::string(name) == #N) return &launch_flash_d##D##_##N;
#include "flash_instances_built.def"  // instances/flash_instances.def as CMake filtered it
#undef FLASH_INSTANCE
  return nullptr;
}

#define FLASH_SM90_INSTANCE(D, N, T) void launch_flash_sm90_d##D##_##N(const FlashParams&, int, dim3, cudaStream_t);
#include "flash_sm90_instances_built.def"  // instances/flash_sm90_instances.def as CMake filtered it (maybe empty)
#undef FLASH_SM90_INSTANCE

FlashSm90Launcher find_flash_sm90_launcher(int head_dim, DType dt) {
  const char* name = dt == DType::kFp16 ? "fp16" : dt == DType::kBf16 ? "bf16" : "";
  (void)head_dim;
  (void)name;
#define FLASH_SM90_INSTANCE(D, N, T) \
  if (head_dim == D && std::string(name) == #N) return &launch_flash_sm90_d##D##_##N;
#include "flash_sm90_instances_built.def"
#undef FLASH_SM90_INSTANCE
  return nullptr;
}

// Two K/V stages of flash_smem_stride rows (Q is staged in the second); with split warps, the merge
// buffer reuses them. Head dim 256 (the kernel's lean form): one K/V stage and Q's own region. Plus
// kTileAlign: the kernel aligns its region itself. FP8 (no lean form): the ring of FP8 staging buffers
// (flash_fp8_stages x 2 x 64 x D bytes), after one dtype K/V stage where the CTA converts in shared
// memory (flash_fp8_in_registers), then Q's region; Q is staged in the ring.
size_t flash_smem_bytes(int head_dim, int warps_m, int warps_n, int rb, bool fp8) {
  const bool lean = head_dim >= 256 && !fp8;
  const size_t row = static_cast<size_t>(flash_smem_stride(head_dim)) * 2;
  const size_t q = flash_q_in_smem(head_dim, warps_m, warps_n, rb) ? static_cast<size_t>(warps_m * 16 * rb) * row : 0;
  const size_t ring = static_cast<size_t>(flash_fp8_stages(head_dim, warps_n)) * 2 * kKvTile * head_dim;
  const size_t dtype_tile = flash_fp8_in_registers(warps_n) ? 0 : 2 * kKvTile * row;
  const size_t stages = fp8 ? dtype_tile + ring + q : static_cast<size_t>((lean ? 1 : 2) * 2 * kKvTile) * row + q;
  const size_t merge = warps_n > 1 ? static_cast<size_t>(warps_n) * warps_m * 16 * (head_dim + 2) * 4 : 0;
  return std::max(stages, merge) + kTileAlign;
}

bool device_is_sm90() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

namespace {

// One warp per (token, head): fold the row's partials in chunk order with merge_weights, the
// same function cpu.tiled uses; write O in the dtype (fp16 or bf16 bits) and LSE in natural log.
__global__ void merge_kernel(const MergeParams p, int fp16) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.total_q * p.hq) return;
  const int64_t t = row / p.hq;
  const int h = static_cast<int>(row % p.hq);
  const int64_t first = p.merge_indptr[t];
  const int n = p.merge_indptr[t + 1] - p.merge_indptr[t];
  constexpr int kPer = 16;  // head_dim <= 512 (MLA's absorbed vo): up to 16 values per lane
  const int per = (p.d + 31) / 32;
  float acc[kPer];
  float lse = p.part_lse[first * p.hq + h];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int d = lane + 32 * i;
    acc[i] = (i < per && d < p.d) ? p.part_o[(first * p.hq + h) * p.d + d] : 0.f;
  }
  for (int c = 1; c < n; ++c) {
    const int64_t pr = first + c;
    float wa, wb, l;
    merge_weights(lse, p.part_lse[pr * p.hq + h], &wa, &wb, &l);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      if (i < per && d < p.d) acc[i] = wa * acc[i] + wb * p.part_o[(pr * p.hq + h) * p.d + d];
    }
    lse = l;
  }
  uint16_t* o = static_cast<uint16_t*>(p.o) + (t * p.hq + h) * p.d;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int d = lane + 32 * i;
    if (i < per && d < p.d) o[d] = fp16 ? f32_to_f16_bits(acc[i]) : f32_to_bf16_bits(acc[i]);
  }
  if (lane == 0) p.lse[t * p.hq + h] = lse2_to_e(lse);
}

}  // namespace

void launch_merge(const MergeParams& p, DType dt, cudaStream_t s) {
  const int64_t rows = p.total_q * p.hq;
  const dim3 grid(static_cast<unsigned>((rows * 32 + 127) / 128));
  merge_kernel<<<grid, 128, 0, s>>>(p, dt == DType::kFp16 ? 1 : 0);
}

FlashOutputs::FlashOutputs(int64_t total_q_, int hq_, int d_, int64_t part_rows, DType dt)
    : o(total_q_ * hq_ * d_ * dtype_bytes(dt)),
      lse(total_q_ * hq_ * 4),
      part_o(std::max<int64_t>(part_rows, 1) * hq_ * d_ * 4),
      part_lse(std::max<int64_t>(part_rows, 1) * hq_ * 4),
      total_q(total_q_),
      hq(hq_),
      d(d_) {
  for (DeviceBuffer* b : {&o, &lse, &part_o, &part_lse}) check(cudaMemset(b->as<void>(), 0xff, b->bytes()), "cudaMemset");
}

void FlashOutputs::bind(FlashParams& fp) const {
  fp.o = o.as<void>();
  fp.lse = lse.as<float>();
  fp.part_o = part_o.as<float>();
  fp.part_lse = part_lse.as<float>();
}

MergeParams FlashOutputs::merge(const DeviceBuffer& merge_indptr) const {
  return MergeParams{
      merge_indptr.as<int>(), part_o.as<float>(), part_lse.as<float>(), o.as<void>(), lse.as<float>(), total_q, hq, d};
}

void run_flash_tail(const FlashTail& t, const FlashOutputs& out, const MergeParams& mp, DType dt, int dv, const RunOptions& opt,
                    Result* res) {
  const int64_t rows = out.total_q * out.hq;
  auto once = [&](bool sync) {
    if (t.has_items) t.kernel(sync);
    if (t.split_kv) {
      launch_merge(mp, dt, nullptr);
      check_launch("merge_kernel", dim3(static_cast<unsigned>((rows * 32 + 127) / 128)), dim3(128), 0, sync);
    }
  };
  once(true);
  res->o = download_as_float(out.o, rows * out.d, dt);
  if (dv != out.d) {  // slice the padded output back to the true head dim
    std::vector<float> sliced(static_cast<size_t>(rows) * dv);
    for (int64_t r = 0; r < rows; ++r)
      for (int d = 0; d < dv; ++d) sliced[r * dv + d] = res->o[r * out.d + d];
    res->o = std::move(sliced);
  }
  res->lse = out.lse.to_host<float>(rows);
  attach_device_copy(res, out.o, dt, rows, out.d, dv, opt);
  time_launches(
      opt, [&] { once(false); }, [&] { check_launch("benchmark loop", t.grid, t.block, 0, true); }, &res->timing);
}

namespace {

constexpr int kHeadDims[] = {32, 64, 96, 128, 256};
// the head dims this build compiled for a dtype (ATTNSCOPE_FLASH_HEAD_DIMS can keep fewer), for errors
std::string compiled_head_dims(DType dt) {
  std::string dims;
  for (int d : kHeadDims)
    if (find_flash_launcher(d, dt)) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  return dims.empty() ? "none" : dims;
}

// Zero-pads the innermost dimension of `rows` rows from d to dp (2-byte elements).
__global__ void pad_rows_kernel(const uint16_t* in, uint16_t* out, int64_t rows, int d, int dp) {
  const int64_t n = rows * dp;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / dp;
    const int c = static_cast<int>(i % dp);
    out[i] = c < d ? in[r * d + c] : 0;
  }
}

DeviceBuffer pad_rows(const DeviceBuffer& in, int64_t rows, int d, int dp) {
  DeviceBuffer out(std::max<int64_t>(rows, 1) * dp * 2);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((rows * dp + 255) / 256, 65535 * 4)));
  if (rows > 0) {
    pad_rows_kernel<<<grid, 256>>>(in.as<uint16_t>(), out.as<uint16_t>(), rows, d, dp);
    check_launch("pad_rows_kernel", grid, dim3(256), 0);
  }
  return out;
}

class FlashBackend final : public Backend, public GraphReplayable {
 public:
  explicit FlashBackend(bool padded) : padded_(padded), debug_(flash_debug_options()) {}
  std::string id() const override { return padded_ ? "cuda.flash_padded" : "cuda.flash"; }
  std::string describe() const override {
    return padded_ ? "cuda.flash on Q/K/V zero-padded to /kernels/pad_head_dim_to (default 64), sm_scale of the true head dim: "
                     "FlashInfer's head_dim-32 workaround"
                   : "tensor-core FlashAttention-2 style kernel executing the split plan, then the merge: wgmma on an "
                     "H100 / H200 (sm_90) for 64- and 128-row tiles at head dims 64, 128, 256, mma.sync elsewhere";
  }
  int kernel_dim(const CaseSpec& c) const { return padded_ ? c.pad_head_dim_to.value_or(64) : c.head_dim_qk; }
  std::string check(const CaseSpec& c) const override {
    if (auto why = device_check(); !why.empty()) return why;
    if (c.is_mla()) {  // the absorbed form runs its own kernel (flash_mla.cu)
      if (padded_ || !c.mla_absorbed())
        return std::string(padded_ ? "/mla: cuda.flash_padded" : "/mla/absorbed false: cuda.flash") +
               " does not run this MLA form; cuda.flash runs the absorbed form (/mla/absorbed true)";
      return flash_mla_check(c);
    }
    if (auto why = fp8_check(c); !why.empty()) return why;
    if (padded_ && kernel_dim(c) <= std::max(c.head_dim_qk, c.head_dim_vo))
      return "head_dim " + std::to_string(c.head_dim_qk) + " is not below the padded size " + std::to_string(kernel_dim(c)) +
             ": set /kernels/pad_head_dim_to above it";
    if (padded_ && !find_flash_launcher(kernel_dim(c), c.dtype))
      return "pad_head_dim_to " + std::to_string(kernel_dim(c)) + " is not one of the compiled head dims (" +
             compiled_head_dims(c.dtype) + ")";
    if (padded_ && c.dtype != DType::kFp32) return "";
    if (c.dtype == DType::kFp32) return "dtype fp32: cuda.flash runs fp16/bf16 on tensor cores (use cuda.naive for fp32)";
    if (c.head_dim_qk != c.head_dim_vo)
      return "head_dim qk " + std::to_string(c.head_dim_qk) + " != vo " + std::to_string(c.head_dim_vo) +
             ": cuda.flash needs equal head dims";
    if (!find_flash_launcher(c.head_dim_qk, c.dtype))
      return "head_dim " + std::to_string(c.head_dim_qk) + " is not one of the compiled head dims (" +
             compiled_head_dims(c.dtype) + ")";
    return "";
  }

  // What the FP8 kernels (FlashMode::kPlainFp8) do not take; the descriptor (family.cpp) already refuses
  // per-token scales and FP8 attention.
  std::string fp8_check(const CaseSpec& c) const {
    if (!c.fp8_kv()) return "";
    if (padded_) return "an FP8 KV cache: cuda.flash_padded pads dtype pools only (cuda.flash reads the FP8 bytes)";
    if (c.kv_cache.scales.granularity == ScaleGranularity::kToken || c.fp8_attention)
      return "an FP8 KV cache with per-tensor or per-head scales only, and no FP8 attention";
    if (!flash_fp8_head_dim(c.head_dim_qk) || c.head_dim_qk != c.head_dim_vo)
      return "head_dim " + std::to_string(c.head_dim_qk) +
             " with an FP8 KV cache: cuda.flash's FP8 kernels are built for 64, 128, 256";
    if (c.attention.soft_cap || c.attention.alibi || c.attention.score_mod || c.attention.mask_mod || c.has_trees())
      return "an FP8 KV cache with soft_cap, alibi, score_mod, mask_mod or tree_parents: cuda.flash's FP8 kernel takes the "
             "plain logit and the built-in masks";
    return "";
  }

  GraphReplayReport capture_replay(const CaseSpec& c, const Plan& p, const CudaGraphPad& pad) override {
    if (!padded_) return flash_capture_replay(c, p, pad, debug_, graph_time_reps_);  // flash_graph.cu
    GraphReplayReport r;
    r.not_captured = "cuda.flash_padded (engines capture cuda.flash; the padded head dim is a workaround's A/B)";
    return r;
  }

  Result run(const CaseSpec& c, const Plan& p, const Workload&, const RunOptions& opt) override {
    if (c.mla_absorbed() && !padded_) return run_flash_mla(c, p, opt, debug_.heavy_first, debug_.sm90 && device_is_sm90());
    Result res;
    res.backend = id();
    const SplitPlan& sp = p.split;
    const int D = kernel_dim(c), Hq = c.num_qo_heads, Hk = c.num_kv_heads;
    const int64_t total_q = c.total_q();
    const int64_t part_rows = sp.split_kv ? sp.o_indptr.back() : 0;
    const int eb = dtype_bytes(c.dtype);
    const int64_t need = device_workload_bytes(c, p) + total_q * Hq * (D * eb + 4) + part_rows * Hq * (D + 1) * 4 +
                         static_cast<int64_t>(sp.items.size()) * sizeof(WorkItem);
    require_device_memory(need, "cuda.flash (inputs, outputs, split-KV partials)");
    std::shared_ptr<const DeviceWorkload> shared_w;
    if (padded_) {  // the FlashInfer workaround: zero-pad Q, K, V to D; sm_scale stays 1/sqrt(true head dim)
      auto own = std::make_shared<DeviceWorkload>(make_device_workload(c, p));
      own->q = pad_rows(own->q, own->q_elems / c.head_dim_qk, c.head_dim_qk, D);
      own->k = pad_rows(own->k, own->k_elems / c.head_dim_qk, c.head_dim_qk, D);
      own->v = pad_rows(own->v, own->v_elems / c.head_dim_vo, c.head_dim_vo, D);
      shared_w = std::move(own);
    } else {
      shared_w = device_workload(c, p, opt);
    }
    const DeviceWorkload& w = *shared_w;

    const std::vector<int64_t> unit_tok = unit_first_tokens(c, p);
    std::vector<float> slopes(Hq);
    for (int h = 0; h < Hq; ++h) slopes[h] = static_cast<float>(alibi_slope(h, Hq));
    DeviceBuffer d_items = DeviceBuffer::from(sp.items), d_units = DeviceBuffer::from(p.units),
                 d_tok = DeviceBuffer::from(unit_tok), d_chunks = DeviceBuffer::from(sp.unit_chunks),
                 d_oind = DeviceBuffer::from(sp.o_indptr), d_mind = DeviceBuffer::from(sp.merge_indptr),
                 d_slopes = DeviceBuffer::from(slopes);
    // sinks in base 2, one float product each as cpu.tiled takes them
    std::vector<float> sink2;
    for (float x : sink_logits(c)) sink2.push_back(x * static_cast<float>(kLog2e));
    DeviceBuffer d_sink2 = sink2.empty() ? DeviceBuffer() : DeviceBuffer::from(sink2);
    DeviceBuffer d_tile_ind, d_tiles, d_tile_full;  // a mask_mod's non-empty tiles per item, and which are full
    if (!sp.item_tile_indptr.empty()) {
      d_tile_ind = DeviceBuffer::from(sp.item_tile_indptr);
      d_tiles = DeviceBuffer::from(sp.item_tiles.empty() ? std::vector<int>{0} : sp.item_tiles);
      d_tile_full = DeviceBuffer::from(sp.item_tile_full.empty() ? std::vector<unsigned char>{0} : sp.item_tile_full);
    }
    const FlashOutputs out(total_q, Hq, D, part_rows, c.dtype);

    FlashParams fp{};
    fp.view = w.view;
    fp.q = w.q.as<void>();
    fp.k = w.k.as<void>();
    fp.v = w.v.as<void>();
    fp.items = d_items.as<WorkItem>();
    fp.units = d_units.as<WorkUnit>();
    fp.unit_tok = d_tok.as<int64_t>();
    fp.unit_chunks = d_chunks.as<int>();
    fp.o_indptr = d_oind.as<int>();
    fp.slopes = d_slopes.as<float>();
    fp.num_items = sp.num_items;
    // The plan lists a unit's query tiles from the first; under a causal mask the last see the most
    // keys, so they start first and the short ones fill the tail of the grid (FlashAttention-3's
    // longest-first order). The order of launch changes no item, tile or sum.
    fp.heavy_first = debug_.heavy_first ? 1 : 0;
    fp.hq = Hq;
    fp.hk = Hk;
    fp.group = c.group_size();
    fp.sm_scale = static_cast<float>(c.sm_scale_or_default());
    fp.scale_log2 = fp.sm_scale * static_cast<float>(kLog2e);
    // a score_mod of the soft-cap / ALiBi forms runs as those parameters; any other is interpreted
    const auto lowered = p.score_mod ? lower_score_mod(*p.score_mod) : std::nullopt;
    fp.soft_cap = static_cast<float>((lowered ? lowered->soft_cap : c.attention.soft_cap).value_or(0.0));
    fp.alibi = (lowered ? lowered->alibi : c.attention.alibi) ? 1 : 0;
    DeviceScoreMod sm;
    if (p.score_mod && !lowered) {
      sm = upload_score_mod(c, *p.score_mod);
      fp.score_ops = sm.ops.as<ExprOp>();
      fp.score_n = sm.n;
      fp.score_envs = sm.envs.as<ExprEnv>();
    }
    fp.mask_bits = p.mask_store ? 1 : 0;
    fp.item_tile_indptr = sp.item_tile_indptr.empty() ? nullptr : d_tile_ind.as<int>();
    fp.item_tiles = sp.item_tile_indptr.empty() ? nullptr : d_tiles.as<int>();
    fp.item_tile_full = sp.item_tile_indptr.empty() ? nullptr : d_tile_full.as<unsigned char>();
    if (c.fp8_kv()) {  // the stored bytes and their scales (DeviceWorkload, filled by make_device_workload)
      if (w.k8.bytes() == 0 || w.k_scale.bytes() == 0) throw CudaError("cuda.flash: the device workload holds no FP8 bytes");
      fp.fp8 = *c.kv_cache.fp8 == Fp8Format::kE5M2 ? 2 : 1;
      fp.k = w.k8.as<void>();
      fp.v = w.v8.as<void>();
      fp.k_scale = w.k_scale.as<float>();
      fp.v_scale = w.v_scale.as<float>();
      fp.scale_stride = c.kv_cache.scales.granularity == ScaleGranularity::kHead ? 1 : 0;
    }
    fp.sink2 = sink2.empty() ? nullptr : d_sink2.as<float>();
    fp.split = sp.split_kv ? 1 : 0;
    fp.round_partials = c.split.partials == PartialPrecision::kDtype ? 1 : 0;
    out.bind(fp);

    const FlashLauncher launch = find_flash_launcher(D, c.dtype);
    const FlashMode mode = flash_mode(fp);
    int warps = 0, warps_n = 0, rb = 0;
    flash_geometry(sp.cta_tile_q, D, sp.kv_warp_split, mode, debug_.rb, &warps, &warps_n, &rb);
    // the Hopper kernel where it fits (flash_sm90_fits), is built and the device is sm_90
    const FlashSm90Launcher sm90 =
        flash_sm90_fits(sp.cta_tile_q, sp.kv_warp_split, D, mode) && debug_.sm90 ? find_flash_sm90_launcher(D, c.dtype) : nullptr;
    const bool hopper = sm90 && device_is_sm90();
    // Head dim 256 on the Hopper kernel: two 64-row items per CTA where the plan has neighbours with the
    // same keys (the bit-less variants: a mask_mod's per-item tile lists stay one per CTA). A 64-row
    // CTA loads 64 KB of K / V per 64 keys for 64 rows; a pair serves 128 rows with it.
    std::vector<int2> pair_xy;
    if (hopper && D == 256 && sp.cta_tile_q == 64 && sp.item_tile_indptr.empty() && flash_mode_bitless(mode) && debug_.pairs)
      for (const ItemPair& pr : pair_items(sp.items)) pair_xy.push_back(make_int2(pr.a, pr.b));
    const bool paired = !pair_xy.empty() && pair_xy.size() < sp.items.size();
    if (fp.heavy_first) std::reverse(pair_xy.begin(), pair_xy.end());
    DeviceBuffer d_pairs = paired ? DeviceBuffer::from(pair_xy) : DeviceBuffer{};
    fp.pairs = paired ? d_pairs.as<int2>() : nullptr;
    // The mma.sync decode layout (16-row tiles with key-split warps) launches an item's KV heads side by
    // side, grid (hk, 1, items): in the NHD layout they read the same tokens' rows (one 2 KB run at head
    // dim 128 and 8 KV heads), which then share their L2 lines. Elsewhere the items are innermost, so a
    // unit's neighbouring query tiles, which read the same K / V, run together.
    fp.heads_inner = !hopper && warps_n > 1 && debug_.heads_inner ? 1 : 0;
    const unsigned n_x = static_cast<unsigned>(paired ? pair_xy.size() : std::max(sp.padded_items, 1));
    const dim3 grid = fp.heads_inner ? dim3(static_cast<unsigned>(Hk), 1, n_x) : dim3(n_x, 1, static_cast<unsigned>(Hk));
    const dim3 block(hopper ? (paired ? 256 : sp.cta_tile_q * 2) : warps * warps_n * 32);
    const size_t smem = hopper ? flash_sm90_smem_bytes(D, paired ? 128 : sp.cta_tile_q)
                               : flash_smem_bytes(D, warps, warps_n, rb, mode == FlashMode::kPlainFp8);
    const std::string kname =
        hopper ? "flash_sm90_kernel<" + std::to_string(D) + ", " + dtype_name(c.dtype) + ", " +
                     (paired ? "2 warpgroups, two 64-row items per CTA" : std::to_string(sp.cta_tile_q / 64) + " warpgroups") +
                     "> (wgmma)"
               : "flash_kernel<" + std::to_string(D) + ", " + dtype_name(c.dtype) + ", " + std::to_string(warps) + "x" +
                     std::to_string(warps_n) + " warps, " + std::to_string(rb) + " row blocks" +
                     (c.fp8_kv() ? std::string(", ") + fp8_name(*c.kv_cache.fp8) + " K / V" : "") + "> (mma.sync)";
    res.message = "kernel " + kname;
    FlashTail tail;
    tail.kernel = [&](bool sync) {
      if (hopper)
        sm90(fp, sp.cta_tile_q, grid, nullptr);
      else
        launch(fp, warps, warps_n, rb, grid, nullptr);
      check_launch(kname.c_str(), grid, block, smem, sync);
    };
    tail.has_items = sp.num_items > 0;
    tail.split_kv = sp.split_kv;
    tail.grid = grid;
    tail.block = block;
    run_flash_tail(tail, out, out.merge(d_mind), c.dtype, c.head_dim_vo, opt, &res);
    return res;
  }

 private:
  bool padded_;
  FlashDebugOptions debug_;  // developer-only A/B switches (flash_debug.h), read when the backend is made
};

}  // namespace

std::unique_ptr<Backend> make_flash_backend(bool padded) { return std::make_unique<FlashBackend>(padded); }

namespace {
// 64 threads, thread t converts codes 4 t .. 4 t + 3 as one register: lo = (4 t, 4 t + 2), hi = (4 t + 1, 4 t + 3)
template <class T, bool kE5m2>
__global__ void fp8_split_every_code(uint16_t* out) {
  const uint32_t t = threadIdx.x, c = 4 * t;
  const uint32_t r = c | (c + 1) << 8 | (c + 2) << 16 | (c + 3) << 24;
  uint32_t lo = 0, hi = 0;
  fp8x4_split<T, kE5m2>(r, lo, hi);
  out[c] = static_cast<uint16_t>(lo), out[c + 2] = static_cast<uint16_t>(lo >> 16);
  out[c + 1] = static_cast<uint16_t>(hi), out[c + 3] = static_cast<uint16_t>(hi >> 16);
}
}  // namespace

std::vector<uint16_t> fp8_register_conversion_of_every_code(Fp8Format f, DType dt) {
  if (dt != DType::kFp16 && dt != DType::kBf16) throw CudaError("fp8 register conversion: fp16 or bf16 only");
  DeviceBuffer d(256 * sizeof(uint16_t));
  auto* out = d.as<uint16_t>();
  const bool e5m2 = f == Fp8Format::kE5M2;
  if (dt == DType::kBf16)
    e5m2 ? fp8_split_every_code<__nv_bfloat16, true><<<1, 64>>>(out) : fp8_split_every_code<__nv_bfloat16, false><<<1, 64>>>(out);
  else
    e5m2 ? fp8_split_every_code<__half, true><<<1, 64>>>(out) : fp8_split_every_code<__half, false><<<1, 64>>>(out);
  check(cudaGetLastError(), "fp8_split_every_code");
  std::vector<uint16_t> h(256);
  check(cudaMemcpy(h.data(), out, 256 * sizeof(uint16_t), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return h;
}

}  // namespace attnscope::cuda
