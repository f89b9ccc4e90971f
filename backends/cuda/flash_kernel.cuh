// cuda.flash: a FlashAttention-2 style kernel on mma.sync m16n8k16 (fp16 / bf16 inputs, fp32
// accumulation). One CTA runs one work item of the SplitPlan for one KV head: WARPS x 16 packed
// query rows (GQA heads of the KV head packed as rows) against the item's key range, in KV tiles of
// kKvTile keys gathered from the paged (or ragged) cache into shared memory. Online softmax in base
// 2 as in cpu.tiled: P is rounded to the dtype before P.V, the row sum uses fp32 P. Output: the
// final O and LSE, or a partial (normalised O, base-2 LSE) for the merge kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "flash_device.cuh"
#include "flash_fp8.cuh"

namespace attnscope::cuda {

// Shared-memory tiles (K, V, Q): rows of D elements, their 16-byte vectors XOR-swizzled by the row's
// low three bits (vector c of row r at c ^ (r % 8)), so the 8 rows an ldmatrix reads fall on 8 bank
// groups; a row keeps its 128-byte lines whole. Where D is not a multiple of 64 (32, 96), the swizzle
// would leave the row, so rows are padded by 8 elements instead (16 bytes: the same stagger).
// Why not pad everywhere: cp.async.cg moves 128-byte lines from L2 into shared memory, and a padded
// row (272 bytes at head dim 128) puts 7 of 8 rows' lines across two 128-byte shared segments, so each
// line costs more L2 sectors and requests than a swizzled row's.
template <int D>
constexpr int kStride = flash_smem_stride(D);
template <int D>
constexpr bool kSwizzle = kStride<D> == D;
// element offset of row r's column col (a multiple of 8) in such a tile
template <int D>
__device__ __forceinline__ int tile_at(int r, int col) {
  if constexpr (kSwizzle<D>)
    return r * D + (((col >> 3) ^ (r & 7)) << 3);
  else
    return r * (D + 8) + col;
}
// The shared-memory address of row r's column c0 + 16 j from that of column c0 (c0 = 0 or 8): an
// XOR of 32 j bytes in a swizzled row ((2 j + c0 / 8) ^ (r % 8) = 2 j ^ (c0 / 8 ^ r % 8)), exact because
// every tile starts at a multiple of 2 D bytes (kTileAlign) and 32 j < 2 D; one LOP3 per ldmatrix.
template <int D>
__device__ __forceinline__ uint32_t col_step(uint32_t a, int j) {
  return kSwizzle<D> ? a ^ static_cast<uint32_t>(32 * j) : a + static_cast<uint32_t>(32 * j);
}
template <int D, class T>
__device__ __forceinline__ uint32_t tile_addr(const T* tile, int r, int col) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(tile + tile_at<D>(r, col)));
}

// WM warps own RB x 16 query rows each (RB = 2 is FlashAttention-2's layout for 128-row tiles: every
// K/V fragment loaded from shared memory feeds twice the MMAs); WN warps split every KV tile's keys
// between them (the decode path: a 16-row tile still gets 4 warps of loads and MMAs) and are merged
// in warp order at the end. K/V tiles are double-buffered with cp.async. With RB = 1, Q lives in
// registers; with RB = 2 it stays in shared memory (registers go to the second row block).
// kMode, the kernel variant (FlashMode), is a template argument so that each variant is its own
// instantiation: the plain ones keep tanhf and the ALiBi term out of the hot loop's code
// (instruction-cache stalls), a mask_mod alone keeps the plain code (kPlainBits), the soft-cap / ALiBi
// kernel tests no absent bits per element (kCapAlibiBits is apart), and the interpreted score_mod
// (expr_program.h, doubles, as the CPU backends: correct, not fast) leaves the others' code alone.
// Head dim 256 runs lean (kLean): Q's fragments are read from shared memory at every k-step rather
// than held (the held form spills), and K and V get one buffer each, K refilled as soon as S = Q K^T
// is done and V as soon as P V is done (the schedule FlashAttention-2 uses at this size): 101 KB of
// shared memory instead of 169 KB, so two CTAs share an SM and one's copies overlap the other's math.
// Same MMAs in the same order: the same bits as the double-buffered form.
// Head dim <= 64 with 8 warps asks for two CTAs per SM (__launch_bounds__ min blocks 2, at most 128
// registers; its few spills are outside the key loop): 16 resident warps instead of 8.
template <int D, class T, int WM, int WN, int RB, FlashMode kMode>
__global__ void __launch_bounds__(WM* WN * 32, D <= 64 && WM * WN == 8 ? 2 : 1) flash_kernel(const FlashParams p) {
  constexpr int kThreads = WM * WN * 32;
  constexpr int kRows = WM * 16 * RB;
  constexpr int S = kStride<D>;
  constexpr int kVec = D / 8;          // 16-byte vectors per row
  constexpr int kKeys = kKvTile / WN;  // keys of a tile per warp
  constexpr int NT = kKeys / 8;        // S n-tiles per warp
  static_assert(RB == 1 || RB == 2, "one or two row blocks per warp");
  static_assert(WN == 1 || RB == 1, "key-split warps own one row block");
  static_assert(RB == 2 || kRows <= 2 * kKvTile, "Q staging reuses one K/V stage");
  // An FP8 cache (kPlainFp8): a ring of kStages8 FP8 staging buffers (Q's region after it), from stage
  // 1 on after one dtype K / V tile (stage 0) that the CTA converts the bytes into, or from stage 0 where
  // the warps convert their keys in registers (kFp8Reg, flash_fp8.cuh); no lean form
  constexpr bool kFp8 = kMode == FlashMode::kPlainFp8;
  constexpr bool kFp8Reg = kFp8 && flash_fp8_in_registers(WN);
  constexpr int kStages8 = flash_fp8_stages(D, WN);
  static_assert(!kFp8 || RB == 1, "the FP8 kernels have one row block");
  constexpr bool kLean = D >= 256 && !kFp8;
  static_assert(!kLean || RB == 1, "the lean form has one row block");
  if (static_cast<int>(p.item_cta()) >= p.num_items) return;  // CUDA-graph padding CTA

  extern __shared__ __align__(16) unsigned char smem_dyn[];
  // the dynamic region starts after the static one; aligned here (flash_smem_bytes adds kTileAlign)
  // (an offset from the shared array, not a rounded integer: the compiler keeps its addresses 32-bit
  // shared ones; rounded through uintptr_t they become generic 64-bit ones, costing many registers)
  unsigned char* smem_raw =
      smem_dyn + ((kTileAlign - static_cast<uint32_t>(__cvta_generic_to_shared(smem_dyn)) % kTileAlign) % kTileAlign);
  T* stage0 = reinterpret_cast<T*>(smem_raw);  // K [64][S] then V [64][S]
  T* stage1 = stage0 + 2 * kKvTile * S;        // the second stage (lean: none, Q's region)
  // Q read from shared memory: Q has its own region (lean: where the second stage would be); else
  // Q is staged in stage 1 and moved to registers
  constexpr bool kQSmem = flash_q_in_smem(D, WM, WN, RB);
  T* const ring = kFp8Reg ? stage0 : stage1;  // FP8: the staging ring (2 x kKvTile x D bytes per stage)
  T* qs = kLean ? stage1 : kQSmem ? ring + (kFp8 ? kStages8 * kKvTile * D : 2 * kKvTile * S) : ring;
  __shared__ int s_lo, s_hi;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp % WM, wn = warp / WM;
  const FlashCta c(p, tid);
  const int g = c.g, t4 = c.t4;  // this thread's rows g and g + 8 of each row block, its quad column

  // Q rows -> shared memory; invalid rows are zero
  for (int i = tid; i < kRows * kVec; i += kThreads) {
    const int r = i / kVec, cv = i % kVec;
    *reinterpret_cast<uint4*>(qs + tile_at<D>(r, cv * 8)) = q_vector<D, T>(c, r, cv);
  }
  if (tid == 0) {
    s_lo = INT_MAX;
    s_hi = INT_MIN;
  }
  __syncthreads();
  constexpr bool kQRegs = !kQSmem;
  constexpr int kQf = kQRegs ? D / 16 : 1;  // Q fragments kept in registers
  uint32_t qf[kQf][4];
  if constexpr (kQRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      if constexpr (kFp8Reg)
        fp8_q_fragment<D>(qs, tile_at<D>, wm * 16, g, t4, kk, qf[kk]);
      else
        ldmatrix_x4(qf[kk], qs + tile_at<D>(wm * 16 + (lane % 16), kk * 16 + (lane / 16) * 8));
    }
  }

  // The rows' visible key ranges live in shared memory, not registers (8 registers at RB = 2, where
  // the kernel sits at 255), with each warp row block's common range: a tile inside it needs no
  // per-key test. The row's query position and head are recomputed where needed (ALiBi, the output).
  __shared__ int s_rlo[kRows], s_rhi[kRows], s_wlo[WM * RB], s_whi[WM * RB];
  if (wn == 0) {
#pragma unroll
    for (int rb = 0; rb < RB; ++rb) c.row_ranges(wm * RB + rb, &s_lo, &s_hi, s_rlo, s_rhi, s_wlo, s_whi);
  }
  // a mask_mod's bit rows and the ALiBi terms of this thread's rows
  FlashRowBlock<kMode> rows[RB];
#pragma unroll
  for (int rb = 0; rb < RB; ++rb) rows[rb] = c.row_block<kMode>(wm * RB + rb);
  __syncthreads();  // s_lo / s_hi final; RB = 1: every warp has its Q fragments, stage 1 is free
  const int kv_lo = s_lo, kv_hi = s_hi;
  // soft-cap (the soft-cap / ALiBi variants): 1 / cap once
  const float inv_cap = FlashRowBlock<kMode>::kCapAlibi && p.soft_cap > 0.f ? 1.f / p.soft_cap : 0.f;
  // the logits' pending scale; an FP8 cache's K scale (one per tensor or per KV head: constant in a
  // CTA) folded in as cpu.tiled does, (sm_scale x log2(e)) x k_scale in float
  const float exp_scale = kFp8 ? c.exp_scale<kMode>() * p.k_scale[c.kvh * p.scale_stride] : c.exp_scale<kMode>();

  float o[RB][D / 8][4];
#pragma unroll
  for (int rb = 0; rb < RB; ++rb)
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[rb][j][0] = o[rb][j][1] = o[rb][j][2] = o[rb][j][3] = 0.f;
  float mx[RB][2], den[RB][2];
#pragma unroll
  for (int rb = 0; rb < RB; ++rb) c.start_rows(wm * RB + rb, mx[rb], den[rb], wn == 0);

  // KV tiles start at the item's first key, as in cpu.tiled; tiles no row sees are skipped (a
  // mask_mod's empty tiles inside the range too: the plan lists the item's non-empty tiles)
  const ItemTiles tiles(c, kv_lo, kv_hi, true);
  const int n_tiles = tiles.n;
  // Where every key of a tile starts in the pool, fetched one tile ahead into shared memory (one
  // thread per key) so the page-table reads overlap the previous tile's math; shared memory rather
  // than registers, which the two-row-block kernel has none of. Slot i % 3: tile i + 2's pages are
  // written while tile i + 1's are read and tile i's may still be (the prologue's copy of tile 0 has
  // no barrier before the first iteration's fetch of tile 2; racecheck found it with two slots).
  constexpr int kLoads = kKvTile * kVec / kThreads;
  static_assert(kKvTile * kVec % kThreads == 0, "whole copies per thread");
  static_assert(kThreads >= kKvTile, "one thread per key fetches the pages");
  static_assert(sizeof(T) == 2, "the table of key offsets holds bytes of a 2-byte dtype (store_tile_slot)");
  // (FP8: kStages8 + 1 slots, tiles i .. i + kStages8 live; kv_tile_loop_fp8)
  constexpr int kSlots = kFp8 ? kStages8 + 1 : 3;
  __shared__ int64_t s_row[kSlots][kKvTile];
  __shared__ bool s_full[kSlots];
  // the thread that fetches a key's page: key tid of the tile, or (kFp8Reg) lane l of warp wn its key
  // wn x kKeys + l, each warp copying and reading only its own keys (kv_tile_loop_fp8 syncs the warp)
  const int key_thread = kFp8Reg ? (lane < kKeys ? wn * kKeys + lane : kKvTile) : tid;
  auto fetch_pages = [&](int i) { return load_tile_page(c, key_thread, tiles, i, kv_hi); };
  auto put_pages = [&](int i, const TilePage& t) {
    store_tile_slot(c, t, s_row[i % kSlots], &s_full[i % kSlots], key_thread, D, kFp8 ? 1 : 2);
  };
  // Copy l of a thread is row tid / kVec + l * kRowStep; where kRowStep is a multiple of 8 the rows keep
  // their swizzle, so the destination is the first row's plus a constant
  constexpr int kRowStep = kThreads / kVec;
  constexpr bool kSameSwizzle = kThreads % kVec == 0 && (!kSwizzle<D> || kRowStep % 8 == 0);
  const int dst0 = tile_at<D>(tid / kVec, (tid % kVec) * 8);
  // copies tile i's K (want_k) and / or V into stage `i & 1` (lean: the one stage); kv_tile_loop commits
  auto copy = [&](int i, bool want_k, bool want_v) {
    T* ks = (!kLean && (i & 1)) ? stage1 : stage0;
    T* vs = ks + kKvTile * S;
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int idx = tid + l * kThreads;
      const int r = idx / kVec, cv = idx % kVec;
      bool ok = false;
      const int64_t off = kv_source(s_row[i % kSlots][r], cv, &ok);
      const int dst = kSameSwizzle ? dst0 + l * kRowStep * S : tile_at<D>(r, cv * 8);
      if (want_k) cp_async16(ks + dst, pool_at(p.k, off), ok);
      if (want_v) cp_async16(vs + dst, pool_at(p.v, off), ok);
    }
  };
  // FP8: tile i's K and V bytes into staging buffer i % kStages8 (rows of D bytes, K's 64 then V's 64;
  // swizzled for the registers' ldmatrix, in order for the shared-memory conversion)
  unsigned char* stage8 = reinterpret_cast<unsigned char*>(ring);
  auto copy8 = [&](int i) {
    constexpr int kVec8 = D / 16;
    // the CTA's threads copy the whole tile, or (kFp8Reg) a warp's lanes its keys
    constexpr int kCopiers = kFp8Reg ? 32 : kThreads, kRows8 = kFp8Reg ? kKeys : kKvTile;
    static_assert(!kFp8 || kRows8 * kVec8 % kCopiers == 0, "whole FP8 copies per thread");
    unsigned char* k8 = stage8 + (i % kStages8) * 2 * kKvTile * D;
#pragma unroll
    for (int l = 0; l < kRows8 * kVec8 / kCopiers; ++l) {
      const int idx = (kFp8Reg ? lane : tid) + l * kCopiers;
      const int r = (kFp8Reg ? wn * kKeys : 0) + idx / kVec8, cv = idx % kVec8;
      bool ok = false;
      const int64_t off = kv_source(s_row[i % kSlots][r], cv, &ok);
      int dst = r * D + cv * 16;
      if constexpr (kFp8Reg) dst = fp8_at<D>(r, cv);
      cp_async16(k8 + dst, pool_at(p.k, off), ok);
      cp_async16(k8 + kKvTile * D + dst, pool_at(p.v, off), ok);
    }
  };
  // FP8: staging buffer i % kStages8 into the dtype tile, 8 bytes per step (8 threads of a row write its 8
  // swizzled 16-byte vectors: no bank conflict); the format is uniform, so one branch per tile
  auto convert8 = [&](int i) {
    const unsigned char* src = stage8 + (i % kStages8) * 2 * kKvTile * D;
    auto run = [&](auto e5m2) {
#pragma unroll
      for (int l = 0; l < 2 * kKvTile * D / 8 / kThreads; ++l) {
        const int idx = tid + l * kThreads;
        const int r = idx / (D / 8), cv = idx % (D / 8);  // rows 64..127: V, which follows K in stage 0
        const uint2 b = *reinterpret_cast<const uint2*>(src + idx * 8);
        *reinterpret_cast<uint4*>(stage0 + tile_at<D>(r, cv * 8)) = fp8x8_to<T, decltype(e5m2)::value>(b);
      }
    };
    if (p.fp8 == 2)
      run(std::true_type{});
    else
      run(std::false_type{});
  };
  // S = Q K^T of a tile: this warp's RB x 16 rows x kKeys keys (registers shared by the two steps)
  float s[RB][NT][4];
  // kFp8Reg: this lane's ldmatrix address in staging buffer 0's K (buffer i is 2 x kKvTile x D bytes on)
  uint32_t lane8 = 0;
  if constexpr (kFp8Reg) lane8 = fp8_lane_addr<D>(static_cast<uint32_t>(__cvta_generic_to_shared(stage8)), wn * kKeys, lane);
  auto buf8 = [&](int ti) { return lane8 + static_cast<uint32_t>((ti % kStages8) * 2 * kKvTile * D); };
  auto qk8 = [&](int ti) {  // kFp8Reg: K converted in registers, Q's fragments in fp8_qk's order
    {
#pragma unroll
      for (int j = 0; j < NT; ++j) s[0][j][0] = s[0][j][1] = s[0][j][2] = s[0][j][3] = 0.f;
      auto qfrag = [&](int kk, uint32_t(&a)[4]) {
        if constexpr (kQRegs) {
#pragma unroll
          for (int x = 0; x < 4; ++x) a[x] = qf[kk][x];
        } else {
          fp8_q_fragment<D>(qs, tile_at<D>, wm * 16, g, t4, kk, a);
        }
      };
      if (p.fp8 == 2)
        fp8_qk<D, T, true, NT>(s[0], qfrag, buf8(ti));
      else
        fp8_qk<D, T, false, NT>(s[0], qfrag, buf8(ti));
    }
  };
  auto qk_dtype = [&](int ti) {
    const T* ks = (!kLean && !kFp8 && (ti & 1)) ? stage1 : stage0;
    const int mi = lane / 8;
    // this lane's ldmatrix rows at column 0 / 8 (col_step moves them along the k-steps)
    const uint32_t k0 = tile_addr<D>(ks, wn * kKeys + (mi / 2) * 8 + lane % 8, (mi % 2) * 8);
    const uint32_t q0 = tile_addr<D>(qs, (wm * RB) * 16 + (lane % 16), (lane / 16) * 8);
#pragma unroll
    for (int rb = 0; rb < RB; ++rb)
#pragma unroll
      for (int j = 0; j < NT; ++j) s[rb][j][0] = s[rb][j][1] = s[rb][j][2] = s[rb][j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[RB][4];
      if constexpr (kQRegs) {
#pragma unroll
        for (int x = 0; x < 4; ++x) a[0][x] = qf[kk][x];
      } else {
#pragma unroll
        for (int rb = 0; rb < RB; ++rb) ldmatrix_x4(a[rb], col_step<D>(q0 + rb * 16 * S * 2, kk));
      }
#pragma unroll
      for (int jj = 0; jj < NT / 2; ++jj) {
        uint32_t b[4];
        ldmatrix_x4(b, col_step<D>(k0 + jj * 16 * S * 2, kk));
#pragma unroll
        for (int rb = 0; rb < RB; ++rb) {
          Mma<T>::run(s[rb][2 * jj], a[rb], b[0], b[1]);
          Mma<T>::run(s[rb][2 * jj + 1], a[rb], b[2], b[3]);
        }
      }
    }
  };
  auto qk = [&](int ti) {
    if constexpr (kFp8Reg)
      qk8(ti);
    else
      qk_dtype(ti);
  };
  // O += P V from the dtype V tile: P (rounded to the dtype) from the S accumulators, V through ldmatrix.trans
  auto pv_dtype = [&](int ti) {
    const T* vs = ((!kLean && !kFp8 && (ti & 1)) ? stage1 : stage0) + kKvTile * S;
    const int mi = lane / 8;
    const uint32_t v0 = tile_addr<D>(vs, wn * kKeys + (mi % 2) * 8 + lane % 8, (mi / 2) * 8);
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) {
      uint32_t a[RB][4];
#pragma unroll
      for (int rb = 0; rb < RB; ++rb) {
        a[rb][0] = Mma<T>::pack(s[rb][2 * kk][0], s[rb][2 * kk][1]);
        a[rb][1] = Mma<T>::pack(s[rb][2 * kk][2], s[rb][2 * kk][3]);
        a[rb][2] = Mma<T>::pack(s[rb][2 * kk + 1][0], s[rb][2 * kk + 1][1]);
        a[rb][3] = Mma<T>::pack(s[rb][2 * kk + 1][2], s[rb][2 * kk + 1][3]);
      }
#pragma unroll
      for (int nn = 0; nn < D / 16; ++nn) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, col_step<D>(v0 + kk * 16 * S * 2, nn));
#pragma unroll
        for (int rb = 0; rb < RB; ++rb) {
          Mma<T>::run(o[rb][2 * nn], a[rb], b[0], b[1]);
          Mma<T>::run(o[rb][2 * nn + 1], a[rb], b[2], b[3]);
        }
      }
    }
  };
  // the logits, the online softmax and O += P V of a tile
  auto pv = [&](int ti) {
    const int k0 = tiles.key(ti) + wn * kKeys;  // this warp's first key
#pragma unroll
    for (int rb = 0; rb < RB; ++rb) {
      float tile_max[2];
      c.logits<kMode, NT>(s[rb], tile_max, rows[rb], wm * RB + rb, k0, s_full[ti % kSlots], s_rlo, s_rhi, s_wlo, s_whi, inv_cap);
      float corr[2];
      softmax_step<NT>(s[rb], tile_max, mx[rb], den[rb], corr, exp_scale);
      rescale_o<D>(o[rb], corr);
    }

    if constexpr (kFp8Reg) {  // V converted in registers; O's head dims in fp8_pv's order
      uint32_t pa[NT / 2][4];
      pack_p<T, NT>(s[0], pa);
      if (p.fp8 == 2)
        fp8_pv<D, T, true, NT>(o[0], pa, buf8(ti) + kKvTile * D);
      else
        fp8_pv<D, T, false, NT>(o[0], pa, buf8(ti) + kKvTile * D);
    } else {
      pv_dtype(ti);
    }
  };
  if constexpr (kFp8)
    kv_tile_loop_fp8<kStages8, !kFp8Reg>(n_tiles, copy8, convert8, fetch_pages, put_pages, qk, pv);
  else
    kv_tile_loop<kLean, false, false>(n_tiles, copy, fetch_pages, put_pages, qk, pv);

#pragma unroll
  for (int rb = 0; rb < RB; ++rb) quad_row_sums(den[rb]);
  if constexpr (WN > 1) {
    // merge the key-split warps in warp order: M = max m_w, scale_w = exp2(m_w - M); the buffer
    // reuses the K / V stages, which the last tile's warps may still be reading
    __syncthreads();
    constexpr int kR = WM * 16;
    float* red_o = reinterpret_cast<float*>(smem_raw);  // [WN][WM * 16][D]
    float* red_m = red_o + WN * kR * D;                 // [WN][WM * 16]
    float* red_d = red_m + WN * kR;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = wm * 16 + g + 8 * i;
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(red_o + (wn * kR + r) * D + 8 * j + 2 * t4) = make_float2(o[0][j][2 * i], o[0][j][2 * i + 1]);
      if (t4 == 0) {
        red_m[wn * kR + r] = mx[0][i];
        red_d[wn * kR + r] = den[0][i];
      }
    }
    __syncthreads();
    if (wn != 0) return;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = wm * 16 + g + 8 * i;
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < WN; ++w) M = fmaxf(M, red_m[w * kR + r]);
      float sc[WN];
      float dsum = 0.f;
#pragma unroll
      for (int w = 0; w < WN; ++w) {
        const float mw = red_m[w * kR + r];
        sc[w] = mw == -INFINITY ? 0.f : fast_exp2(mw - M);
        dsum += red_d[w * kR + r] * sc[w];
      }
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        float a = 0.f, b = 0.f;
#pragma unroll
        for (int w = 0; w < WN; ++w) {
          const float2 v = *reinterpret_cast<const float2*>(red_o + (w * kR + r) * D + 8 * j + 2 * t4);
          a += v.x * sc[w];
          b += v.y * sc[w];
        }
        o[0][j][2 * i] = a;
        o[0][j][2 * i + 1] = b;
      }
      mx[0][i] = M;
      den[0][i] = dsum;
    }
  }

  // O / den and LSE: the final output, or a partial for the merge kernel
#pragma unroll
  for (int rb = 0; rb < RB; ++rb) {
    if constexpr (kFp8)
      c.store<D, T, true, kFp8Reg>(wm * RB + rb, o[rb], mx[rb], den[rb], p.v_scale[c.kvh * p.scale_stride]);
    else
      c.store<D, T>(wm * RB + rb, o[rb], mx[rb], den[rb]);
  }
}

// A warp layout of launch_flash (row warps x key-split warps), as a type for its dispatch.
template <int WM, int WN>
struct FlashWarps {
  static constexpr int kWM = WM, kWN = WN;
};

template <int D, class T>
void launch_flash(const FlashParams& p, int warps_m, int warps_n, int rb, dim3 grid, cudaStream_t stream) {
  const FlashMode mode = flash_mode(p);
  const size_t smem = flash_smem_bytes(D, warps_m, warps_n, rb, mode == FlashMode::kPlainFp8);
  auto go = [&](auto kernel, int threads) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
          "cudaFuncSetAttribute");
    // prefer shared memory over L1 so several CTAs fit an SM (the default carveout allowed one)
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100), "cudaFuncSetAttribute");
    kernel<<<grid, threads, smem, stream>>>(p);
  };
  // the instantiation of the launch's variant for one warp layout (every variant is compiled for it)
  auto pick = [&](auto layout, int threads) {
    constexpr int kWM = decltype(layout)::kWM, kWN = decltype(layout)::kWN;
    // FP8: the plain variant only, at flash_fp8_head_dim's head dims (cuda.flash's check() refuses the rest)
    if constexpr (flash_fp8_head_dim(D)) {
      if (mode == FlashMode::kPlainFp8) return go(flash_kernel<D, T, kWM, kWN, 1, FlashMode::kPlainFp8>, threads);
    }
    if (mode == FlashMode::kPlainFp8) throw CudaError("cuda.flash: no FP8 kernel for head_dim " + std::to_string(D));
    if (mode == FlashMode::kPlain) return go(flash_kernel<D, T, kWM, kWN, 1, FlashMode::kPlain>, threads);
    if (mode == FlashMode::kPlainBits) return go(flash_kernel<D, T, kWM, kWN, 1, FlashMode::kPlainBits>, threads);
    if (mode == FlashMode::kCapAlibi) return go(flash_kernel<D, T, kWM, kWN, 1, FlashMode::kCapAlibi>, threads);
    if (mode == FlashMode::kScoreMod) return go(flash_kernel<D, T, kWM, kWN, 1, FlashMode::kScoreMod>, threads);
    return go(flash_kernel<D, T, kWM, kWN, 1, FlashMode::kCapAlibiBits>, threads);
  };
  if (warps_m == 1 && warps_n == 4 && rb == 1) return pick(FlashWarps<1, 4>{}, 128);
  if (warps_m == 4 && warps_n == 1 && rb == 1) return pick(FlashWarps<4, 1>{}, 128);
  if constexpr (D < 256) {  // head dim 256: at most 64 rows per tile (the planners' rule)
    if (warps_m == 8 && warps_n == 1 && rb == 1) return pick(FlashWarps<8, 1>{}, 256);
    // FlashAttention-2's layout for the bit-less variants only (flash_geometry picks it for no other)
    if (warps_m == 4 && warps_n == 1 && rb == 2 && mode == FlashMode::kPlain)
      return go(flash_kernel<D, T, 4, 1, 2, FlashMode::kPlain>, 128);
    if (warps_m == 4 && warps_n == 1 && rb == 2 && mode == FlashMode::kCapAlibi)
      return go(flash_kernel<D, T, 4, 1, 2, FlashMode::kCapAlibi>, 128);
  }
  throw CudaError("cuda.flash: no kernel for head_dim " + std::to_string(D) + " with " + std::to_string(warps_m) + "x" +
                  std::to_string(warps_n) + " warps, " + std::to_string(rb) + " row blocks");
}

}  // namespace attnscope::cuda
