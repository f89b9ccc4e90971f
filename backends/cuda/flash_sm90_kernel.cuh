// cuda.flash's Hopper kernel (sm_90a): the same plan, tiles and per-row numerics as flash_kernel.cuh,
// with the two matrix products on wgmma (warpgroup MMA, asynchronous issue) instead of mma.sync.
// One CTA runs one work item for one KV head: NWG warpgroups of 64 packed query rows each (a 64- or
// 128-row tile of the plan; each warp owns 16 rows, as the mma.sync kernel's 16-row blocks), KV tiles
// of kKvTile keys gathered by cp.async from the paged cache into shared memory in the 128-byte
// swizzled layout wgmma reads (Q and K "K-major", V "MN-major": the hardware transposes it).
// S = Q K^T is D / 16 wgmma m64n64k16 from shared memory; the logits, mask and online softmax run on
// the accumulators in registers (a warp's part of a wgmma accumulator has mma.sync's fragment layout,
// so flash_device.cuh's functions serve both kernels); O += P V is 4 wgmma m64nDk16 with P from
// registers, rounded to the dtype as in cpu.tiled. Every row sees the same tiles, in the same order,
// with the same fp32 sums as the mma.sync kernel.
// Compiled only for sm_90a (wgmma exists on compute capability 9.0 alone): its own library,
// attnscope_cuda_sm90 (backends/cuda/CMakeLists.txt).
#pragma once

#include <type_traits>

#include "flash_device.cuh"
#include "sm90_primitives.cuh"

namespace attnscope::cuda {

// Every warp copies and computes, one tile at a time: two K / V stages (head dim 256 with one
// warpgroup: one K and one V buffer, the lean schedule) and a barrier per tile, two CTAs per SM at
// head dims <= 128 (128 registers: 16 warps per SM, one CTA's softmax and copies beside the other's
// wgmma). The Hopper form; a warp-specialised one (a producer warpgroup, mbarrier stages) was slower
// on every shape measured and left the build (docs/perf-history-2.md, v34 and v37).
// kPair: two 64-row work items of the plan in one CTA, one per warpgroup (pair_items: the same unit
// and KV chunk, so the same keys on the same 64-key tile grid). Every K / V tile is loaded once for
// both, and each warpgroup computes exactly the tiles its item alone would visit, in the same order:
// the same bits as one item per CTA. Head dim 256, where a 64-row CTA is bound by the K / V it loads
// per row.
template <int D, class T, int NWG, FlashMode kMode, bool kPair = false>
__global__ void __launch_bounds__(NWG * 128, NWG == 2 && D <= 128 ? 2 : 1) flash_sm90_kernel(const FlashParams p) {
  static_assert(D % 64 == 0, "whole 64-column swizzle panels");
  static_assert(!kPair || NWG == 2, "a pair is two warpgroups");
  constexpr int kThreads = NWG * 128, kRows = NWG * 64;
  constexpr int kVec = D / 8;      // 16-byte vectors per row
  constexpr int NT = kKvTile / 8;  // S n-tiles per warp (every warp sees the whole tile)
  constexpr bool kLean = D >= 256 && NWG == 1;
  constexpr bool kShadow = !kLean && !kPair && kMode != FlashMode::kPlainBits;  // S's wait apart from its issue
  constexpr int kTileBytes = kKvTile * D * 2;                                   // one K or V tile
  if (!kPair && static_cast<int>(blockIdx.x) >= p.num_items) return;            // CUDA-graph padding CTA

  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* qs = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  unsigned char* stage0 = qs + kRows * D * 2;  // K then V of each stage
  unsigned char* stage1 = kLean ? stage0 : stage0 + 2 * kTileBytes;
  // the key range of each item (a paired CTA has two) and of each row and 16-row block
  __shared__ int s_lo[NWG], s_hi[NWG], s_rlo[kRows], s_rhi[kRows], s_wlo[NWG * 4], s_whi[NWG * 4];
  __shared__ int64_t s_row[3][kKvTile];  // as in flash_kernel.cuh: tile i's table slot i % 3
  __shared__ bool s_full[3];

  // wg broadcast from lane 0: the compiler then knows it is warp-uniform, and the descriptors built
  // from it stay in uniform registers
  const int tid = threadIdx.x, warp = tid / 32, wg = __shfl_sync(0xffffffffu, warp / 4, 0);
  // this warpgroup's item: the CTA's, or in a paired CTA its own of the pair; a pair's missing second
  // item (-1) leaves its warpgroup with no rows: it only copies
  int item = p.item_of_cta(blockIdx.x), item_blk0 = 0;
  bool no_rows = false;
  if constexpr (kPair) {
    const int2 pair = p.pairs[blockIdx.x];
    const int mine = wg == 0 ? pair.x : pair.y;
    no_rows = mine < 0;
    item = no_rows ? pair.x : mine;
    item_blk0 = wg * 4;
  }
  FlashCta c(p, tid, item, item_blk0);
  if (no_rows) c.it.row_end = c.it.row_begin;
  const int own = kPair ? wg : 0;  // this warpgroup's slot of s_lo / s_hi

  // Q rows -> shared memory, swizzled, each warpgroup its own 64; invalid rows are zero
  for (int i = tid % 128; i < 64 * kVec; i += 128) {
    const int r = wg * 64 + i / kVec, cv = i % kVec;
    *reinterpret_cast<uint4*>(qs + sw128_offset(r, cv, kRows)) = q_vector<D, T>(c, r, cv);
  }
  if (tid < NWG) {
    s_lo[tid] = INT_MAX;
    s_hi[tid] = INT_MIN;
  }
  __syncthreads();
  c.row_ranges(warp, &s_lo[own], &s_hi[own], s_rlo, s_rhi, s_wlo, s_whi);
  const FlashRowBlock<kMode> rows = c.row_block<kMode>(warp);
  fence_async_shared();  // Q's stores, before wgmma reads them
  __syncthreads();       // s_lo / s_hi final
  // the CTA loads the union of its items' ranges (the same tile grid: the same chunk start)
  const int own_lo = s_lo[own], own_hi = s_hi[own];
  const int kv_lo = kPair ? min(s_lo[0], s_lo[1]) : own_lo, kv_hi = kPair ? max(s_hi[0], s_hi[1]) : own_hi;
  const float inv_cap = FlashRowBlock<kMode>::kCapAlibi && p.soft_cap > 0.f ? 1.f / p.soft_cap : 0.f;

  // the item's tiles, as in flash_kernel.cuh (from its first key; a mask_mod's non-empty tiles only:
  // never paired)
  const ItemTiles tiles(c, kv_lo, kv_hi, !kPair);
  const int n_tiles = tiles.n;
  // whether this warpgroup computes tile i: always, but in a paired CTA only the tiles its item alone
  // would visit (those meeting its range; warpgroup-uniform, so wgmma's warpgroup stays whole)
  auto mine = [&](int i) {
    if constexpr (!kPair) return true;
    const int k0 = tiles.key(i);
    return own_lo < own_hi && k0 + kKvTile > own_lo && k0 < own_hi;
  };

  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float mx[2], den[2];
  c.start_rows(warp, mx, den, true);
  float s[NT][4];
  uint32_t a[NT / 2][4];  // P as wgmma's A fragments
  // S = Q K^T from the K tile of `stage`: this warpgroup's 64 rows x 64 keys, k-step kk reads Q's and K's 16
  // columns kk * 16 at byte 32 (kk % 4) of panel kk / 4 (the swizzle is applied to the address bits,
  // so a k-step inside an atom is a start-address offset); 8-row groups 1024 bytes apart
  // (descriptors: two bases, K-major and V's MN-major, at the CTA's shared memory; Q's rows, the
  // stages and the k-steps are constant offsets from them. Stage 1 is stage 0 in the lean loop.)
  const Sw128Desc kmaj = sw128_desc_base(qs, 16, 1024), vmaj = sw128_desc_base(qs, kKvTile * 128, 1024);
  const uint32_t q_off = wg * 64 * 128, stage_off = static_cast<uint32_t>(stage0 - qs),
                 stage_step = static_cast<uint32_t>(stage1 - stage0);
  // S's wait, apart from its issue (kShadow): the two-stage loop loads the next pages while the
  // tensor cores run S (kv_tile_loop), and pv_tile waits. Not in a paired CTA nor the plain mask_mod
  // kernel, which were slower with it (the latter's 128 registers spill more)
  auto qk_done = [&] {
    wgmma_wait<0>();
    wgmma_hold<NT * 4>(&s[0][0]);
  };
  auto qk = [&](int stage) {
    wgmma_qk_tile<T, D, kRows, kKvTile>(&s[0][0], kmaj, q_off, stage_off + stage * stage_step);
    if constexpr (!kShadow) qk_done();
  };
  // the logits and the online-softmax step of tile ti (the mma.sync kernel's functions), O rescaled,
  // P packed
  auto softmax = [&](int ti) {
    float tile_max[2], corr[2];
    c.logits<kMode, NT>(s, tile_max, rows, warp, tiles.key(ti), s_full[ti % 3], s_rlo, s_rhi, s_wlo, s_whi, inv_cap);
    softmax_step<NT>(s, tile_max, mx, den, corr, c.exp_scale<kMode>());
    rescale_o<D>(o, corr);
    pack_p<T, NT>(s, a);
  };
  // O += P V from the V tile of `stage`: k-step kk is keys 16 kk.. (two 8-key atoms, 1024 bytes apart), V's
  // 64-column panels kKvTile * 128 bytes apart
  auto pv = [&](int stage) {
    const uint32_t vs = stage_off + stage * stage_step + kTileBytes;
    wgmma_hold<D / 2>(&o[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) Wgmma<T>::pv<D>(&o[0][0], a[kk], vmaj.at(vs + kk * 2048));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold<D / 2>(&o[0][0]);
  };
  // where the keys start in the pool, into a slot of the table in shared memory (-1: a zero-filled key)
  auto fetch_pages = [&](int i) { return load_tile_page(c, tid, tiles, i, kv_hi); };
  auto put_pages = [&](int i, const TilePage& t) { store_tile_slot(c, t, s_row[i % 3], &s_full[i % 3], tid, D); };
  // tile i's K (want_k) and / or V copies into stage `i & 1` (lean: the one stage); kv_tile_loop commits
  auto copy = [&](int i, bool want_k, bool want_v) {
    unsigned char* ks = (i & 1) ? stage1 : stage0;
    unsigned char* vs = ks + kTileBytes;
    const int64_t* slot_rows = s_row[i % 3];
    constexpr int kLoads = kKvTile * kVec / kThreads;
    static_assert(kKvTile * kVec % kThreads == 0, "whole copies per thread");
    static_assert(sizeof(T) == 2, "the table of key offsets holds bytes of a 2-byte dtype (store_tile_slot)");
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int idx = tid + l * kThreads;
      const int r = idx / kVec, cv = idx % kVec;
      bool ok = false;
      const int64_t off = kv_source(slot_rows[r], cv, &ok);
      const int dst = sw128_offset(r, cv, kKvTile);
      if (want_k) cp_async16(ks + dst, pool_at(p.k, off), ok);
      if (want_v) cp_async16(vs + dst, pool_at(p.v, off), ok);
    }
  };

  auto qk_tile = [&](int ti) {
    if (mine(ti)) qk(ti & 1);  // lean: stage1 is stage0
  };
  auto pv_tile = [&](int ti) {
    if (!mine(ti)) return;
    if constexpr (kShadow) qk_done();
    softmax(ti);
    pv(ti & 1);
  };
  kv_tile_loop<kLean, true, kShadow>(n_tiles, copy, fetch_pages, put_pages, qk_tile, pv_tile);

  quad_row_sums(den);
  c.store<D, T>(warp, o, mx, den);
}

// The Hopper kernel for a plan tile of `rows` (64 or 128) rows, or with p.pairs two 64-row items per
// CTA (head dim 256, the bit-less variants: flash.cu's rule); the caller has checked flash_sm90_fits
// (no key-split warps, a variant it compiles).
template <int D, class T>
void launch_flash_sm90(const FlashParams& p, int rows, dim3 grid, cudaStream_t stream) {
  const size_t smem = flash_sm90_smem_bytes(D, p.pairs ? 128 : rows);
  auto go = [&](auto kernel, int threads) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
          "cudaFuncSetAttribute");
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100), "cudaFuncSetAttribute");
    kernel<<<grid, threads, smem, stream>>>(p);
  };
  const FlashMode mode = flash_mode(p);
  if (p.pairs) {
    if constexpr (D == 256) {
      if (mode == FlashMode::kPlain) return go(flash_sm90_kernel<D, T, 2, FlashMode::kPlain, true>, 256);
      if (mode == FlashMode::kCapAlibi) return go(flash_sm90_kernel<D, T, 2, FlashMode::kCapAlibi, true>, 256);
    }
    throw CudaError("cuda.flash (wgmma): no paired kernel for head_dim " + std::to_string(D) + ", kernel variant " +
                    flash_mode_name(mode));
  }
  // every variant but the interpreted score_mod (flash_sm90_fits), for NWG warpgroups
  auto pick = [&](auto nwg, int threads) {
    constexpr int NWG = decltype(nwg)::value;
    if (mode == FlashMode::kPlain) return go(flash_sm90_kernel<D, T, NWG, FlashMode::kPlain>, threads);
    if (mode == FlashMode::kPlainBits) return go(flash_sm90_kernel<D, T, NWG, FlashMode::kPlainBits>, threads);
    if (mode == FlashMode::kCapAlibi) return go(flash_sm90_kernel<D, T, NWG, FlashMode::kCapAlibi>, threads);
    return go(flash_sm90_kernel<D, T, NWG, FlashMode::kCapAlibiBits>, threads);
  };
  if (rows == 64) return pick(std::integral_constant<int, 1>{}, 128);
  if constexpr (D < 256) {  // head dim 256: 64-row tiles only (flash_sm90_fits)
    if (rows == 128) return pick(std::integral_constant<int, 2>{}, 256);
  }
  throw CudaError("cuda.flash (wgmma): no kernel for head_dim " + std::to_string(D) + " with " + std::to_string(rows) +
                  "-row tiles");
}

}  // namespace attnscope::cuda
