// cuda.flash: a FlashAttention-2 style kernel on mma.sync m16n8k16 (fp16 / bf16 inputs, fp32
// accumulation). One CTA runs one work item of the SplitPlan for one KV head: WARPS x 16 packed
// query rows (GQA heads of the KV head packed as rows) against the item's key range, in KV tiles of
// kKvTile keys gathered from the paged (or ragged) cache into shared memory. Online softmax in base
// 2 as in cpu.tiled: P is rounded to the dtype before P.V, the row sum uses fp32 P. Output: the
// final O and LSE, or a partial (normalised O, base-2 LSE) for the merge kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attnscope/block_map.h"
#include "attnscope/mask.h"
#include "flash_params.h"

namespace attnscope::cuda {

template <class T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  __device__ static void run(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ static uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static constexpr DType kDType = DType::kBf16;
};

template <>
struct Mma<__half> {
  __device__ static void run(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ static uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static constexpr DType kDType = DType::kFp16;
};

__device__ inline void ldmatrix_x4(uint32_t* r, const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ inline void ldmatrix_x4_trans(uint32_t* r, const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ inline void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // src-size 0: nothing is read, the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(n));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// exp2 on the SFU (ex2.approx, ~2 ulp; exp2(-inf) = +0): the same instruction FA2 uses.
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// tanh for the soft-cap: 1 - 2 / (exp(2y) + 1) on the SFU (ex2.approx, a fast divide), a few
// instructions where tanhf is a long inlined sequence that the unrolled loop carries 32 times per row
// block (instruction-cache stalls: docs/perf-notes.md v11). Absolute error about 1e-6 (tanh is at most
// 1 in size), times the cap (50 for Gemma-2): 5e-5 in a logit, far below the bf16 rounding of P that
// follows. exp overflowing to inf gives 1, underflowing to 0 gives -1.
__device__ inline float softcap_tanh(float y) {
  const float e = fast_exp2(y * 2.8853900817779268f);  // exp(2y) = 2^(2 y log2 e)
  return 1.f - __fdividef(2.f, e + 1.f);
}

// Shared-memory row stride in elements: +8 halves (16 bytes) staggers rows across banks for
// ldmatrix and keeps every row 16-byte aligned.
template <int D>
constexpr int kStride = D + 8;

// WM warps own RB x 16 query rows each (RB = 2 is FlashAttention-2's layout for 128-row tiles: every
// K/V fragment loaded from shared memory feeds twice the MMAs); WN warps split every KV tile's keys
// between them (the decode path: a 16-row tile still gets 4 warps of loads and MMAs) and are merged
// in warp order at the end. K/V tiles are double-buffered with cp.async. With RB = 1, Q lives in
// registers; with RB = 2 it stays in shared memory (registers go to the second row block).
// kPlain: no soft-cap and no ALiBi, so the logit is one multiply; a separate instantiation keeps
// tanhf and the ALiBi term out of the hot loop's code (instruction-cache stalls on the prefill).
// kMode: 0 plain; 1 plain with a mask_mod's bits (two words per row per tile), so a mask_mod alone
// keeps the lean code (measured: the same window as a mask_mod ran 2.07x the built-in window's time
// in the non-plain kernel; docs/perf-notes.md); 2 soft-cap / ALiBi; 4 soft-cap / ALiBi with a
// mask_mod's bits (a separate instantiation: testing absent bits per element cost the Gemma-2
// case ~20%, docs/perf-notes.md v10); 3 a score_mod that is neither, interpreted per element
// (expr_program.h, doubles, as the CPU backends), bits tested when present: correct, not fast, and
// its own instantiation so the others keep their code.
// Head dim 256 runs lean (kLean): Q's fragments are read from shared memory at every k-step rather
// than held (64 registers per thread: the held form spilled 250 bytes per thread), and K and V get
// one buffer each, K refilled as soon as S = Q K^T is done and V as soon as P V is done (the
// schedule FlashAttention-2 uses at this size): 101 KB of shared memory instead of 169 KB, so two
// CTAs share an SM and one's copies overlap the other's math. Same MMAs in the same order: the
// same bits as the double-buffered form.
// Head dim <= 64 with 8 warps asks for two CTAs per SM (__launch_bounds__ min blocks 2: at most 128
// registers, from 145; 64 bytes of spills, outside the key loop): 16 resident warps instead of 8.
// Measured on the H100: hd 64 prefill 1.89 -> 1.50 ms causal, 3.46 -> 2.69 ms non-causal.
template <int D, class T, int WM, int WN, int RB, int kMode>
__global__ void __launch_bounds__(WM* WN * 32, D <= 64 && WM * WN == 8 ? 2 : 1) flash_kernel(const FlashParams p) {
  constexpr bool kPlain = kMode <= 1, kBits = kMode == 1 || kMode >= 3, kProg = kMode == 3;
  constexpr int kThreads = WM * WN * 32;
  constexpr int kRows = WM * 16 * RB;
  constexpr int S = kStride<D>;
  constexpr int kVec = D / 8;          // 16-byte vectors per row
  constexpr int kKeys = kKvTile / WN;  // keys of a tile per warp
  constexpr int NT = kKeys / 8;        // S n-tiles per warp
  static_assert(RB == 1 || RB == 2, "one or two row blocks per warp");
  static_assert(WN == 1 || RB == 1, "key-split warps own one row block");
  static_assert(RB == 2 || kRows <= 2 * kKvTile, "Q staging reuses one K/V stage");
  constexpr bool kLean = D >= 256;
  static_assert(!kLean || RB == 1, "the lean form has one row block");
  if (static_cast<int>(blockIdx.x) >= p.num_items) return;  // CUDA-graph padding CTA

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* stage0 = reinterpret_cast<T*>(smem_raw);  // K [64][S] then V [64][S]
  T* stage1 = stage0 + 2 * kKvTile * S;        // the second stage (lean: none, Q's region)
  // Q read from shared memory: Q has its own region (lean: where the second stage would be); else
  // Q is staged in stage 1 and moved to registers
  constexpr bool kQSmem = flash_q_in_smem(D, WM, WN, RB);
  T* qs = kLean ? stage1 : kQSmem ? stage1 + 2 * kKvTile * S : stage1;
  __shared__ int s_lo, s_hi;

  const WorkItem it = p.items[blockIdx.x];
  const WorkUnit un = p.units[it.unit];
  const int kvh = blockIdx.z;
  const int G = p.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp % WM, wn = warp / WM;
  const RowMask m = p.view.masks[un.request];
  const int* pages = p.view.kv_indices + p.view.kv_indptr[un.request];
  const int ps = p.view.page_size;
  const int64_t tok0 = p.unit_tok[it.unit];
  const T* kbase = static_cast<const T*>(p.k);
  const T* vbase = static_cast<const T*>(p.v);

  // Q rows -> shared memory; invalid rows are zero
  for (int i = tid; i < kRows * kVec; i += kThreads) {
    const int r = i / kVec, c = i % kVec;
    const int row = it.row_begin + r;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (row < it.row_end) {
      const int64_t token = tok0 + row / G;
      const int head = kvh * G + row % G;
      val = reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + (token * p.hq + head) * D)[c];
    }
    *reinterpret_cast<uint4*>(qs + r * S + c * 8) = val;
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
    for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], qs + (wm * 16 + (lane % 16)) * S + kk * 16 + (lane / 16) * 8);
  }

  // this thread's rows: g and g + 8 of each of its warp's row blocks
  const int g = lane / 4, t4 = lane % 4;
  // The rows' visible key ranges live in shared memory, not registers (8 registers at RB = 2, where
  // the kernel sits at 255), with each warp row block's common range: a tile inside it needs no
  // per-key test. The row's query position and head are recomputed where needed (ALiBi, the output).
  auto row_of = [&](int rb, int i) { return it.row_begin + (wm * RB + rb) * 16 + g + 8 * i; };
  __shared__ int s_rlo[kRows], s_rhi[kRows], s_wlo[WM * RB], s_whi[WM * RB];
  if (wn == 0) {
#pragma unroll
    for (int rb = 0; rb < RB; ++rb) {
      int wlo = INT_MIN, whi = INT_MAX;  // the block's common range (empty when any row sees nothing)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = row_of(rb, i);
        const bool ok = row < it.row_end;
        int lo = 0, hi = 0;
        visible_range(m, q_abs_of(m, un.q_begin + (ok ? row / G : 0)), &lo, &hi);
        lo = max(lo, it.kv_begin);
        hi = min(hi, it.kv_end);
        if (!ok || hi <= lo) {
          lo = 0;
          hi = 0;
        } else {
          atomicMin(&s_lo, lo);
          atomicMax(&s_hi, hi);
        }
        wlo = max(wlo, lo);
        whi = min(whi, hi);
        if (t4 == 0) {
          s_rlo[(wm * RB + rb) * 16 + g + 8 * i] = lo;
          s_rhi[(wm * RB + rb) * 16 + g + 8 * i] = hi;
        }
      }
      wlo = __reduce_max_sync(0xffffffffu, wlo);
      whi = __reduce_min_sync(0xffffffffu, whi);
      if (lane == 0) {
        s_wlo[wm * RB + rb] = wlo;
        s_whi[wm * RB + rb] = whi;
      }
    }
  }
  // a mask_mod's bit rows of this thread's rows (non-plain kernel only)
  const uint64_t* brow[kBits ? RB : 1][2];
  if constexpr (kBits) {
#pragma unroll
    for (int rb = 0; rb < RB; ++rb)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = row_of(rb, i);
        brow[rb][i] = p.mask_bits && row < it.row_end ? m.bits + static_cast<int64_t>(un.q_begin + row / G) * m.words : nullptr;
      }
  }
  __syncthreads();  // s_lo / s_hi final; RB = 1: every warp has its Q fragments, stage 1 is free
  const int kv_lo = s_lo, kv_hi = s_hi;

  // soft-cap / ALiBi (kModes 2 and 4): 1 / cap once, and each row's ALiBi slope and query position
  // once per CTA rather than per element (the division by G and the position lookup, unrolled 32
  // times, were most of the loop's code)
  constexpr bool kCapAlibi = kMode == 2 || kMode == 4;
  const float inv_cap = kCapAlibi && p.soft_cap > 0.f ? 1.f / p.soft_cap : 0.f;
  float aslope[kCapAlibi ? RB : 1][2] = {}, aq[kCapAlibi ? RB : 1][2] = {};
  if constexpr (kCapAlibi) {
    if (p.alibi) {
#pragma unroll
      for (int rb = 0; rb < RB; ++rb)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int row = row_of(rb, i);
          if (row < it.row_end) {
            aslope[rb][i] = p.slopes[kvh * G + row % G];
            aq[rb][i] = static_cast<float>(q_abs_of(m, un.q_begin + row / G));
          }
        }
    }
  }
  float o[RB][D / 8][4];
#pragma unroll
  for (int rb = 0; rb < RB; ++rb)
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[rb][j][0] = o[rb][j][1] = o[rb][j][2] = o[rb][j][3] = 0.f;
  float mx[RB][2], den[RB][2];
#pragma unroll
  for (int rb = 0; rb < RB; ++rb) mx[rb][0] = mx[rb][1] = -INFINITY, den[rb][0] = den[rb][1] = 0.f;

  // KV tiles start at the item's first key, as in cpu.tiled; tiles no row sees are skipped (a
  // mask_mod's empty tiles inside the range too: the plan lists the item's non-empty tiles)
  const int first_tile = kv_lo < kv_hi ? it.kv_begin + ((kv_lo - it.kv_begin) / kKvTile) * kKvTile : kv_hi;
  const int* tile_list = p.item_tiles ? p.item_tiles + p.item_tile_indptr[blockIdx.x] : nullptr;
  const int n_tiles = tile_list       ? (kv_lo < kv_hi ? p.item_tile_indptr[blockIdx.x + 1] - p.item_tile_indptr[blockIdx.x] : 0)
                      : kv_lo < kv_hi ? (kv_hi - first_tile + kKvTile - 1) / kKvTile
                                      : 0;
  auto tile_key = [&](int i) { return tile_list ? tile_list[i] : first_tile + i * kKvTile; };
  // The physical page of every key of a tile, fetched one tile ahead into shared memory (one
  // thread per key) so the page-table reads overlap the previous tile's math; shared memory rather
  // than registers, which the two-row-block kernel has none of. Slot i % 3: tile i + 2's pages are
  // written while tile i + 1's are read and tile i's may still be (the prologue's copy of tile 0 has
  // no barrier before the first iteration's fetch of tile 2; racecheck found it with two slots).
  constexpr int kLoads = kKvTile * kVec / kThreads;
  static_assert(kKvTile * kVec % kThreads == 0, "whole copies per thread");
  static_assert(kThreads >= kKvTile, "one thread per key fetches the pages");
  __shared__ int s_page[3][kKvTile];
  auto fetch_pages = [&](int i) {
    if (tid < kKvTile) {
      const int key = (i < n_tiles ? tile_key(i) : 0) + tid;
      int col = 0, slot = 0;
      if (i < n_tiles && key < kv_hi) page_slot(p.view, key, &col, &slot);
      s_page[i % 3][tid] = (i < n_tiles && key < kv_hi) ? pages[col] : -1;
    }
  };
  // copies tile i's K (want_k) and / or V into stage `i & 1` (lean: the one stage) as one group
  auto copy = [&](int i, bool want_k, bool want_v) {
    T* ks = (!kLean && (i & 1)) ? stage1 : stage0;
    T* vs = ks + kKvTile * S;
    const int k0 = tile_key(i);
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int idx = tid + l * kThreads;
      const int r = idx / kVec, c = idx % kVec;
      const int key = k0 + r;
      const int page = s_page[i % 3][r];
      const bool ok = page >= 0;  // keys past the range are zero: 0 * P never meets a poisoned slot
      int col = 0, slot = 0;
      if (ok) page_slot(p.view, key, &col, &slot);
      const int64_t off = ok ? kv_offset(p.view.layout, page, slot, kvh, c * 8, ps, p.hk, D) : 0;
      if (want_k) cp_async16(ks + r * S + c * 8, kbase + off, ok);
      if (want_v) cp_async16(vs + r * S + c * 8, vbase + off, ok);
    }
    cp_async_commit();
  };
  fetch_pages(0);
  fetch_pages(1);
  __syncthreads();  // tiles 0 and 1's pages
  if constexpr (kLean) {
    // groups in flight at the top of iteration ti: K(ti), V(ti)
    if (n_tiles > 0) {
      copy(0, true, false);
      copy(0, false, true);
    }
  } else {
    if (n_tiles > 0) copy(0, true, true);
  }
  for (int ti = 0; ti < n_tiles; ++ti) {
    if constexpr (kLean) {
      cp_async_wait<1>();  // K(ti) has landed; V(ti) may be in flight
    } else if (ti + 1 < n_tiles) {
      copy(ti + 1, true, true);
      fetch_pages(ti + 2);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* ks = (!kLean && (ti & 1)) ? stage1 : stage0;
    const T* vs = ks + kKvTile * S;
    const int k0 = tile_key(ti) + wn * kKeys;  // this warp's first key

    // S = Q K^T: this warp's RB x 16 rows x kKeys keys
    float s[RB][NT][4];
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
        for (int rb = 0; rb < RB; ++rb)
          ldmatrix_x4(a[rb], qs + ((wm * RB + rb) * 16 + (lane % 16)) * S + kk * 16 + (lane / 16) * 8);
      }
#pragma unroll
      for (int jj = 0; jj < NT / 2; ++jj) {
        uint32_t b[4];
        const int mi = lane / 8;
        ldmatrix_x4(b, ks + (wn * kKeys + jj * 16 + (mi / 2) * 8 + lane % 8) * S + kk * 16 + (mi % 2) * 8);
#pragma unroll
        for (int rb = 0; rb < RB; ++rb) {
          Mma<T>::run(s[rb][2 * jj], a[rb], b[0], b[1]);
          Mma<T>::run(s[rb][2 * jj + 1], a[rb], b[2], b[3]);
        }
      }
    }
    if constexpr (kLean) {
      // every warp is done with K(ti): refill the K buffer with K(ti + 1) during the softmax and
      // P V, then wait for V(ti) (the group before it)
      __syncthreads();
      if (ti + 1 < n_tiles) {
        copy(ti + 1, true, false);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
    }

#pragma unroll
    for (int rb = 0; rb < RB; ++rb) {
      // logits in base 2: scale (and soft-cap, ALiBi), mask
      float tile_max[2] = {-INFINITY, -INFINITY};
      // a mask_mod's bits of this warp's keys: they start at k0 and span at most 64 keys, so two
      // words per row, loaded once per tile instead of once per element
      uint64_t wlo[2] = {~0ull, ~0ull}, whi[2] = {~0ull, ~0ull};
      const int kw = k0 >> 6;
      if constexpr (kBits) {
#pragma unroll
        for (int i = 0; i < 2; ++i)
          if (brow[rb][i]) {
            wlo[i] = brow[rb][i][kw];
            whi[i] = kw + 1 < m.words ? brow[rb][i][kw + 1] : 0ull;
          }
      }
      // every key of this warp's part of the tile is visible to every one of its rows: the plain
      // kernel then scales without a per-key test (a warp-uniform branch)
      const int blk = wm * RB + rb;
      const bool whole = k0 >= s_wlo[blk] && k0 + kKeys <= s_whi[blk];
      if (kMode == 0 && whole) {
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[rb][j][e] *= p.scale_log2;
            tile_max[e / 2] = fmaxf(tile_max[e / 2], s[rb][j][e]);
          }
      } else {
        const int rlo[2] = {s_rlo[blk * 16 + g], s_rlo[blk * 16 + g + 8]};
        const int rhi[2] = {s_rhi[blk * 16 + g], s_rhi[blk * 16 + g + 8]};
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = e / 2;
            const int key = k0 + 8 * j + 2 * t4 + (e % 2);
            float x = -INFINITY;
            bool seen = key >= rlo[i] && key < rhi[i];
            if constexpr (kBits) {
              const int off = key - (kw << 6);                                     // in [0, 128)
              if (seen) seen = ((off < 64 ? wlo[i] : whi[i]) >> (off & 63)) & 1u;  // the mask_mod's bit
            }
            if (seen) {
              if constexpr (kPlain) {
                x = s[rb][j][e] * p.scale_log2;
              } else if constexpr (kProg) {
                const int row = row_of(rb, i);
                ExprEnv env = p.score_envs[un.request];
                env.doc_starts = m.doc_starts;  // the device copy
                env.num_docs = m.num_docs;
                env.v[kVarH] = kvh * G + row % G;
                env.v[kVarQ] = q_abs_of(m, un.q_begin + row / G);
                env.v[kVarKv] = key;
                env.v[kVarScore] = s[rb][j][e] * p.sm_scale;
                x = static_cast<float>(eval_expr(p.score_ops, p.score_n, env)) * 1.4426950408889634f;
              } else if (p.soft_cap <= 0.f && !p.alibi) {
                x = s[rb][j][e] * p.scale_log2;  // a mask_mod alone: the plain logit, the same bits
              } else {
                x = s[rb][j][e] * p.sm_scale;
                if (p.soft_cap > 0.f) x = p.soft_cap * softcap_tanh(x * inv_cap);
                // key - q as float: exact below 2^24, as the int difference the twins use
                if (p.alibi) x += aslope[rb][i] * (static_cast<float>(key) - aq[rb][i]);
                x *= 1.4426950408889634f;
              }
            }
            s[rb][j][e] = x;
            tile_max[i] = fmaxf(tile_max[i], x);
          }
      }
      float corr[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
        const float m_new = fmaxf(mx[rb][i], tile_max[i]);
        // nothing visible yet: keep the state (exp2(-inf - -inf) would be NaN)
        corr[i] = m_new == -INFINITY ? 1.f : fast_exp2(mx[rb][i] - m_new);
        mx[rb][i] = m_new;
        den[rb][i] *= corr[i];
      }
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[rb][j][0] *= corr[0];
        o[rb][j][1] *= corr[0];
        o[rb][j][2] *= corr[1];
        o[rb][j][3] *= corr[1];
      }
      // a row with nothing visible yet has only -inf logits: exp2(-inf - 0) = 0, one test per row
      // instead of one per element
      const float mref[2] = {mx[rb][0] == -INFINITY ? 0.f : mx[rb][0], mx[rb][1] == -INFINITY ? 0.f : mx[rb][1]};
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e / 2;
          const float pv = fast_exp2(s[rb][j][e] - mref[i]);
          s[rb][j][e] = pv;
          den[rb][i] += pv;  // the row sum uses fp32 P, as FA2 does
        }
    }

    // O += P V: P (rounded to the dtype) from the S accumulators, V through ldmatrix.trans
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
        const int mi = lane / 8;
        ldmatrix_x4_trans(b, vs + (wn * kKeys + kk * 16 + (mi % 2) * 8 + lane % 8) * S + nn * 16 + (mi / 2) * 8);
#pragma unroll
        for (int rb = 0; rb < RB; ++rb) {
          Mma<T>::run(o[rb][2 * nn], a[rb], b[0], b[1]);
          Mma<T>::run(o[rb][2 * nn + 1], a[rb], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // this stage is refilled by the next iteration's copy
    if constexpr (kLean) {
      // every warp is done with V(ti): V(ti + 1) joins K(ti + 1) in flight
      if (ti + 1 < n_tiles) {
        copy(ti + 1, false, true);
        fetch_pages(ti + 2);
      }
    }
  }

  // the quad's partial row sums
#pragma unroll
  for (int rb = 0; rb < RB; ++rb)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      den[rb][i] += __shfl_xor_sync(0xffffffffu, den[rb][i], 1);
      den[rb][i] += __shfl_xor_sync(0xffffffffu, den[rb][i], 2);
    }
  if constexpr (WN > 1) {
    // merge the key-split warps in warp order: M = max m_w, scale_w = exp2(m_w - M)
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
  for (int rb = 0; rb < RB; ++rb)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row_of(rb, i);
      if (row >= it.row_end) continue;
      const int q_local = row / G;
      const int hd = kvh * G + row % G;
      const bool empty = den[rb][i] == 0.f;
      const float inv = empty ? 0.f : 1.f / den[rb][i];
      const float lse2 = empty ? -INFINITY : mx[rb][i] + log2f(den[rb][i]);
      if (p.split) {
        const int64_t pr = p.o_indptr[it.unit] + static_cast<int64_t>(q_local) * p.unit_chunks[it.unit] + it.kv_chunk;
        float* dst = p.part_o + (pr * p.hq + hd) * D;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          float a = o[rb][j][2 * i] * inv, b = o[rb][j][2 * i + 1] * inv;
          if (p.round_partials) {
            a = round_to(Mma<T>::kDType, a);
            b = round_to(Mma<T>::kDType, b);
          }
          *reinterpret_cast<float2*>(dst + 8 * j + 2 * t4) = make_float2(a, b);
        }
        if (t4 == 0) p.part_lse[pr * p.hq + hd] = lse2;
      } else {
        const int64_t token = tok0 + q_local;
        T* dst = static_cast<T*>(p.o) + (token * p.hq + hd) * D;
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
          *reinterpret_cast<uint32_t*>(dst + 8 * j + 2 * t4) = Mma<T>::pack(o[rb][j][2 * i] * inv, o[rb][j][2 * i + 1] * inv);
        if (t4 == 0) p.lse[token * p.hq + hd] = lse2 == -INFINITY ? -INFINITY : lse2 * 0.6931471805599453f;
      }
    }
}

template <int D, class T>
void launch_flash(const FlashParams& p, int warps_m, int warps_n, int rb, dim3 grid, cudaStream_t stream) {
  const size_t smem = flash_smem_bytes(D, warps_m, warps_n, rb);
  auto go = [&](auto kernel, int threads) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
          "cudaFuncSetAttribute");
    // prefer shared memory over L1 so several CTAs fit an SM (the default carveout allowed one)
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100), "cudaFuncSetAttribute");
    kernel<<<grid, threads, smem, stream>>>(p);
  };
  // plain, plain with a mask_mod's bits, soft-cap / ALiBi, an interpreted score_mod, or soft-cap /
  // ALiBi with bits
  const int mode = flash_mode(p);
  auto pick = [&](auto k0, auto k1, auto k2, auto k3, auto k4, int threads) {
    if (mode == 0) return go(k0, threads);
    if (mode == 1) return go(k1, threads);
    if (mode == 2) return go(k2, threads);
    if (mode == 3) return go(k3, threads);
    return go(k4, threads);
  };
#define ATTNSCOPE_FLASH_MODES(WM, WN, RB)                                                                  \
  flash_kernel<D, T, WM, WN, RB, 0>, flash_kernel<D, T, WM, WN, RB, 1>, flash_kernel<D, T, WM, WN, RB, 2>, \
      flash_kernel<D, T, WM, WN, RB, 3>, flash_kernel<D, T, WM, WN, RB, 4>
  if (warps_m == 1 && warps_n == 4 && rb == 1) return pick(ATTNSCOPE_FLASH_MODES(1, 4, 1), 128);
  if (warps_m == 4 && warps_n == 1 && rb == 1) return pick(ATTNSCOPE_FLASH_MODES(4, 1, 1), 128);
  if constexpr (D < 256) {  // head dim 256: at most 64 rows per tile (the planners' rule)
    if (warps_m == 8 && warps_n == 1 && rb == 1) return pick(ATTNSCOPE_FLASH_MODES(8, 1, 1), 256);
    // FlashAttention-2's layout for modes 0 and 2 only (flash_geometry picks it for no other)
    if (warps_m == 4 && warps_n == 1 && rb == 2 && mode == 0) return go(flash_kernel<D, T, 4, 1, 2, 0>, 128);
    if (warps_m == 4 && warps_n == 1 && rb == 2 && mode == 2) return go(flash_kernel<D, T, 4, 1, 2, 2>, 128);
  }
#undef ATTNSCOPE_FLASH_MODES
  throw CudaError("cuda.flash: no kernel for head_dim " + std::to_string(D) + " with " + std::to_string(warps_m) + "x" +
                  std::to_string(warps_n) + " warps, " + std::to_string(rb) + " row blocks");
}

}  // namespace attnscope::cuda
