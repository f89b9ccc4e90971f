// Parameters of the cuda.flash kernels (one CTA per work item and KV head) and the merge kernel.
#pragma once

#include <cuda_runtime.h>

#include "attnscope/block_map.h"
#include "attnscope/expr_program.h"
#include "attnscope/split_plan.h"
#include "device_workload.h"

namespace attnscope::cuda {

struct FlashParams {
  DevicePlanView view;
  const void* q;  // [total_q, hq, D] dtype
  const void* k;  // paged pool, dtype
  const void* v;
  const WorkItem* items;    // [num_items]
  const WorkUnit* units;    // [units]
  const int64_t* unit_tok;  // [units] first output token of each unit
  const int* unit_chunks;   // [units]
  const int* o_indptr;      // [units + 1] first partial row of each unit
  const float* slopes;      // [hq] ALiBi
  int num_items;            // grid x may be padded (CUDA graph): CTAs past this do nothing
  int heavy_first;          // 1: CTA x runs item num_items - 1 - x (flash.cu: the plan's last items, a
                            // causal batch's longest, start first)
  int heads_inner;          // 1: grid (hk, 1, items), the KV head in x and the item in z (the mma.sync
                            // decode layout: a request's KV heads run side by side); 0: (items, 1, hk)
  int hq, hk, group;
  float sm_scale, soft_cap;  // soft_cap 0 = off
  float scale_log2;          // sm_scale * log2(e), both as float (the plain kernels fold it into exp2's fma)
  int alibi;
  int mask_bits;  // a mask_mod: the rows' RowMask bits are tested
  // a score_mod that is not soft-cap / ALiBi: its program and per-request variables (nullptr: none)
  const ExprOp* score_ops;
  int score_n;
  const ExprEnv* score_envs;  // [requests]; doc_starts set in the kernel from the device mask
  // a mask_mod's non-empty KV tiles of each item (first keys, from the block map): the kernel visits
  // only these; nullptr = every tile of the item's visible range
  const int* item_tile_indptr;  // [num_items + 1]
  const int* item_tiles;
  const unsigned char* item_tile_full;  // per listed tile, 1: every row sees every key (no bit test)
  // a paired Hopper launch (pair_items): CTA x runs items pairs[x].x and pairs[x].y (-1: none), one
  // per warpgroup, sharing their K / V tiles; nullptr: one item per CTA (blockIdx.x)
  const int2* pairs;
  // An FP8 KV cache (FlashMode::kPlainFp8; docs/conventions.md section 10): k / v point to the stored
  // bytes, k_scale / v_scale to the scales, index kvh * scale_stride (0: one per tensor, 1: per KV head)
  int fp8;  // 0: K / V in the dtype, 1: fp8_e4m3 bytes, 2: fp8_e5m2 bytes
  const float* k_scale;
  const float* v_scale;
  int scale_stride;
  // attention sinks (docs/conventions.md section 12): [hq] each qo head's sink logit in base 2, which
  // starts its rows' state (m = sink, d = 1) unsplit or in their first KV chunk (start_rows); nullptr: none
  const float* sink2;
  // MLA absorbed decode (flash_mla_kernel.cuh): CTA x runs items mla_items[x * n + s], n = slots per CTA,
  // each of mla_item_blocks 16-row blocks (-1: an empty slot); the items of a CTA share their keys
  const int* mla_items;
  int mla_item_blocks;
  int split;           // 1: write partials (fp32 buffer) for the merge kernel
  int round_partials;  // partials rounded to the dtype (FlashInfer)
  void* o;             // [total_q, hq, D] dtype (split == 0)
  float* lse;          // [total_q, hq] natural log (split == 0)
  float* part_o;       // [partial rows, hq, D] (split == 1)
  float* part_lse;     // [partial rows, hq] base 2 (split == 1)

  // The item CTA x (< num_items) runs: the launch order is the kernel's choice, the items are the plan's.
  __host__ __device__ int item_of_cta(unsigned x) const {
    return heavy_first ? num_items - 1 - static_cast<int>(x) : static_cast<int>(x);
  }
#ifdef __CUDACC__
  // this CTA's index along the items (grid x, or z with heads_inner)
  __device__ unsigned item_cta() const { return heads_inner ? blockIdx.z : blockIdx.x; }
#endif
};

struct MergeParams {
  const int* merge_indptr;  // [total_q + 1]
  const float* part_o;
  const float* part_lse;
  void* o;
  float* lse;
  int64_t total_q;
  int hq, d;
};

// The kernel variants of cuda.flash, each its own instantiation so that no variant carries another's
// code in the hot loop. flash_mode() is the one place that picks a launch's variant.
enum class FlashMode : int {
  kPlain,         // logit = q.k, its scale folded into exp2's fma
  kPlainBits,     // kPlain with a mask_mod's bits (two words per row per tile)
  kCapAlibi,      // soft-cap and / or ALiBi
  kScoreMod,      // a score_mod that is neither, interpreted per element (expr_program.h); bits when present
  kCapAlibiBits,  // kCapAlibi with a mask_mod's bits
  kPlainFp8,      // kPlain reading an FP8 K / V cache (bytes converted to the dtype in shared memory)
};

// The variant's properties, named once: the logit is q.k (its scale still pending, FlashCta::exp_scale);
// rows carry a mask_mod's bit rows; rows carry the ALiBi terms and the soft-cap; no bits at all (the
// only variants compiled for FlashAttention-2's two-row-block layout and the paired Hopper kernel).
constexpr bool flash_mode_plain_logit(FlashMode m) {
  return m == FlashMode::kPlain || m == FlashMode::kPlainBits || m == FlashMode::kPlainFp8;
}
constexpr bool flash_mode_bits(FlashMode m) {
  return m == FlashMode::kPlainBits || m == FlashMode::kScoreMod || m == FlashMode::kCapAlibiBits;
}
constexpr bool flash_mode_cap_alibi(FlashMode m) { return m == FlashMode::kCapAlibi || m == FlashMode::kCapAlibiBits; }
constexpr bool flash_mode_bitless(FlashMode m) { return m == FlashMode::kPlain || m == FlashMode::kCapAlibi; }
// for error messages, in the enum's order
inline const char* flash_mode_name(FlashMode m) {
  constexpr const char* kNames[] = {"plain",
                                    "plain with mask_mod bits",
                                    "soft-cap / ALiBi",
                                    "interpreted score_mod",
                                    "soft-cap / ALiBi with mask_mod bits",
                                    "plain with an FP8 K / V cache"};
  return kNames[static_cast<int>(m)];
}

// The variant a launch runs: one rule for the launchers and flash_geometry.
inline FlashMode flash_mode(const FlashParams& p) {
  if (p.fp8) return FlashMode::kPlainFp8;  // cuda.flash's check() lets only the plain logit through with FP8
  if (p.score_ops) return FlashMode::kScoreMod;
  const bool plain_logit = p.soft_cap <= 0.f && !p.alibi;
  if (plain_logit) return p.mask_bits ? FlashMode::kPlainBits : FlashMode::kPlain;
  return p.mask_bits ? FlashMode::kCapAlibiBits : FlashMode::kCapAlibi;
}

// Kernel geometry of a tile: 16 rows -> 1 row warp x 4 key-split warps; 64 rows -> 4 warps, one
// 16-row block each; 128 rows -> 8 warps x 1 block, or FlashAttention-2's layout, 4 warps x 2 row
// blocks with Q in shared memory, for the bit-less variants at head dims 96 and 128: every K/V
// fragment read from shared memory then feeds two MMAs instead of one (8 warps x 1 block are bound by
// shared-memory bandwidth there). The bit variants have no registers for a second block (they
// spill), head dim <= 64 runs 8 warps at two CTAs per SM instead, head dim 256 has no registers for it.
// rb_override 1 or 2 forces the 128-row layout of the bit-less variants (FlashDebugOptions::rb). Both
// layouts compute every row over the same tiles with the same sums in the same order: the same bits
// (GPU test Gpu.FlashRowBlockLayoutsGiveTheSameBits).
inline void flash_geometry(int tile, int head_dim, int kv_split, FlashMode mode, int rb_override, int* wm, int* wn, int* rb) {
  *wn = kv_split;
  *rb = 1;
  *wm = tile / 16;
  const bool two_blocks = flash_mode_bitless(mode) && (rb_override ? rb_override == 2 : head_dim > 64);
  if (tile == 128 && kv_split == 1 && head_dim < 256 && two_blocks) {
    *wm = 4;
    *rb = 2;
  }
}

// Whether a launch can run the Hopper kernel (flash_sm90_kernel.cuh, wgmma) rather than the mma.sync
// kernel: a 64- or 128-row tile without key-split warps (decode's 16-row tiles keep the mma.sync
// kernel's 4 key-split warps), head dim in whole 64-column panels (64, 128, 256; 256 with 64-row tiles
// only: a 128-row tile's two warpgroups would need 2 x 128 x 255 registers), and any kernel variant
// but the interpreted score_mod. The caller adds the rest: compiled for this head dim and dtype, a
// compute capability 9.0 device, and not turned off (FlashDebugOptions::sm90).
constexpr bool flash_sm90_fits(int tile, int kv_split, int head_dim, FlashMode mode) {
  const bool dim_ok = head_dim == 64 || head_dim == 128 || (head_dim == 256 && tile == 64);
  return (tile == 64 || tile == 128) && kv_split == 1 && dim_ok && mode != FlashMode::kScoreMod && mode != FlashMode::kPlainFp8;
}

// Shared memory of the Hopper kernel: Q, then K and V of each of two stages (head dim 256 with 64
// rows: one K and one V buffer, the lean schedule, so two CTAs fit an SM; a pair's 128 rows keep two
// stages, 193 KB), plus 1 KB to align the swizzle atoms.
constexpr size_t flash_sm90_smem_bytes(int head_dim, int rows) {
  const size_t tile = static_cast<size_t>(kKvTile) * head_dim * 2;
  return static_cast<size_t>(rows) * head_dim * 2 + (head_dim >= 256 && rows == 64 ? 2 : 4) * tile + 1024;
}

// The mma.sync kernel's shared-memory row stride in elements (flash_kernel.cuh's tile_at): D where its
// rows are swizzled (D a multiple of 64), else D + 8. One rule for the kernel and flash_smem_bytes.
constexpr int flash_smem_stride(int head_dim) { return head_dim % 64 == 0 ? head_dim : head_dim + 8; }
// The alignment of the kernel's dynamic shared memory (each tile at a multiple of 2 D bytes: col_step),
// which it aligns itself: flash_smem_bytes asks for this much more.
constexpr int kTileAlign = 512;

// Whether the kernel reads Q's fragments from shared memory (its own region) at every k-step rather
// than holding them in registers: FlashAttention-2's two-row-block layout and head dim 256 (the
// lean form: no registers left). One rule for the kernel and for flash_smem_bytes.
constexpr bool flash_q_in_smem(int head_dim, int warps_m, int warps_n, int rb) {
  (void)warps_m;
  (void)warps_n;
  return rb > 1 || head_dim >= 256;
}

// One launcher per (head_dim, dtype) instance file; warps_m = cta_tile_q / 16 row warps,
// warps_n = the plan's kv_warp_split.
using FlashLauncher = void (*)(const FlashParams&, int warps_m, int warps_n, int row_blocks, dim3 grid, cudaStream_t);
FlashLauncher find_flash_launcher(int head_dim, DType dt);  // nullptr when not instantiated
// The Hopper kernel's launcher for a plan tile of `rows` (64 or 128) rows; nullptr when not built for
// this head dim and dtype (a build without 90 in CMAKE_CUDA_ARCHITECTURES has none).
using FlashSm90Launcher = void (*)(const FlashParams&, int rows, dim3 grid, cudaStream_t);
FlashSm90Launcher find_flash_sm90_launcher(int head_dim, DType dt);
void launch_merge(const MergeParams& p, DType dt, cudaStream_t s);
size_t flash_smem_bytes(int head_dim, int warps_m, int warps_n, int row_blocks, bool fp8 = false);

// The head dims cuda.flash's FP8 kernels (FlashMode::kPlainFp8) are compiled for, where the table
// (instances/flash_instances.def) builds that head dim.
constexpr bool flash_fp8_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }
// How an FP8 kernel turns its tile's bytes into MMA operands: where warps split the tile's keys (the
// decode layout, warps_n > 1), each warp converts its own keys' K and V in registers after ldmatrix of
// the bytes (every element once, no second pass); where warps split the rows, every warp reads the whole
// tile, so the CTA converts it once into a dtype tile in shared memory (docs/architecture.md, FP8).
constexpr bool flash_fp8_in_registers(int warps_n) { return warps_n > 1; }
// The FP8 kernels' ring of staging buffers (each a tile's K and V bytes): tile i + stages - 1 is copied
// while tile i is computed. Registers: four up to head dim 128 (a tile is half a dtype tile's bytes, so
// twice the tiles keep the dtype kernel's bytes in flight), two at 256; shared-memory conversion: two.
constexpr int flash_fp8_stages(int head_dim, int warps_n) { return flash_fp8_in_registers(warps_n) && head_dim <= 128 ? 4 : 2; }

}  // namespace attnscope::cuda
