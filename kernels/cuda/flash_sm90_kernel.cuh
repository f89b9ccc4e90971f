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
// attnscope_cuda_sm90 (kernels/cuda/CMakeLists.txt).
#pragma once

#include "flash_device.cuh"
#include "wgmma_ops.cuh"

namespace attnscope::cuda {

template <class T>
struct Wgmma;

template <>
struct Wgmma<__nv_bfloat16> {
  __device__ static void qk(float* d, uint64_t a, uint64_t b, int acc) { wgmma_ss_m64n64k16_bf16(d, a, b, acc); }
  template <int N>
  __device__ static void pv(float* d, const uint32_t* a, uint64_t b) {
    if constexpr (N == 64) wgmma_rs_m64n64k16_bf16_tb(d, a, b);
    if constexpr (N == 128) wgmma_rs_m64n128k16_bf16_tb(d, a, b);
    if constexpr (N == 256) wgmma_rs_m64n256k16_bf16_tb(d, a, b);
  }
};

template <>
struct Wgmma<__half> {
  __device__ static void qk(float* d, uint64_t a, uint64_t b, int acc) { wgmma_ss_m64n64k16_f16(d, a, b, acc); }
  template <int N>
  __device__ static void pv(float* d, const uint32_t* a, uint64_t b) {
    if constexpr (N == 64) wgmma_rs_m64n64k16_f16_tb(d, a, b);
    if constexpr (N == 128) wgmma_rs_m64n128k16_f16_tb(d, a, b);
    if constexpr (N == 256) wgmma_rs_m64n256k16_f16_tb(d, a, b);
  }
};

__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// keeps the compiler from moving reads or writes of accumulator registers across a wgmma's issue and
// its wait (the asm statements do not tell it that the hardware writes them in between)
template <int N>
__device__ __forceinline__ void wgmma_hold(float* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

template <int N>
__device__ __forceinline__ void wgmma_hold_regs(uint32_t* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// A shared-memory matrix descriptor with the 128-byte swizzle: start address, leading and stride byte
// offsets (16-byte units), swizzle mode 1 in bits 62-63 (PTX ISA, "Matrix Descriptor Format").
__device__ inline uint64_t sw128_desc(const void* smem, uint32_t lead_bytes, uint32_t stride_bytes) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((a & 0x3FFFF) >> 4) | static_cast<uint64_t>((lead_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32 | 1ull << 62;
}

// Byte offset of row r's 16-byte vector cv in a tile of `rows` rows stored as 128-byte swizzled
// panels of 64 columns: panel cv / 8, then row r's 128 bytes, in which vector cv % 8 sits at
// (cv % 8) ^ (r % 8). Each 8-row group is one 1024-byte swizzle atom.
__device__ inline int sw128_offset(int r, int cv, int rows) {
  return (cv >> 3) * rows * 128 + r * 128 + (((cv & 7) ^ (r & 7)) << 4);
}

template <int D, class T, int NWG, int kMode, bool kOverlap>
__global__ void __launch_bounds__(NWG * 128, NWG == 2 && (kOverlap ? D <= 64 : D <= 128) ? 2 : 1)
    flash_sm90_kernel(const FlashParams p) {
  static_assert(D % 64 == 0, "whole 64-column swizzle panels");
  constexpr int kThreads = NWG * 128, kRows = NWG * 64;
  constexpr int kVec = D / 8;      // 16-byte vectors per row
  constexpr int NT = kKvTile / 8;  // S n-tiles per warp (every warp sees the whole tile)
  constexpr bool kLean = D >= 256;
  constexpr int kTileBytes = kKvTile * D * 2;               // one K or V tile
  if (static_cast<int>(blockIdx.x) >= p.num_items) return;  // CUDA-graph padding CTA

  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* qs = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  unsigned char* stage0 = qs + kRows * D * 2;  // K then V
  unsigned char* stage1 = kLean ? stage0 : stage0 + 2 * kTileBytes;
  __shared__ int s_lo, s_hi, s_rlo[kRows], s_rhi[kRows], s_wlo[NWG * 4], s_whi[NWG * 4];
  __shared__ int s_page[3][kKvTile];  // as in flash_kernel.cuh: tile i's pages in slot i % 3

  const int tid = threadIdx.x, warp = tid / 32, wg = warp / 4;
  const FlashCta c(p, tid);

  // Q rows -> shared memory, swizzled; invalid rows are zero
  for (int i = tid; i < kRows * kVec; i += kThreads) {
    const int r = i / kVec, cv = i % kVec;
    *reinterpret_cast<uint4*>(qs + sw128_offset(r, cv, kRows)) = q_vector<D, T>(c, r, cv);
  }
  if (tid == 0) {
    s_lo = INT_MAX;
    s_hi = INT_MIN;
  }
  __syncthreads();
  c.row_ranges(warp, &s_lo, &s_hi, s_rlo, s_rhi, s_wlo, s_whi);
  const FlashRowBlock<kMode> rows = c.row_block<kMode>(warp);
  __syncthreads();  // s_lo / s_hi final
  const int kv_lo = s_lo, kv_hi = s_hi;
  const float inv_cap = FlashRowBlock<kMode>::kCapAlibi && p.soft_cap > 0.f ? 1.f / p.soft_cap : 0.f;

  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float mx[2] = {-INFINITY, -INFINITY}, den[2] = {0.f, 0.f};

  // the item's tiles, as in flash_kernel.cuh (from its first key; a mask_mod's non-empty tiles only)
  const WorkItem& it = c.it;
  const int first_tile = kv_lo < kv_hi ? it.kv_begin + ((kv_lo - it.kv_begin) / kKvTile) * kKvTile : kv_hi;
  const int* tile_list = p.item_tiles ? p.item_tiles + p.item_tile_indptr[blockIdx.x] : nullptr;
  const int n_tiles = tile_list       ? (kv_lo < kv_hi ? p.item_tile_indptr[blockIdx.x + 1] - p.item_tile_indptr[blockIdx.x] : 0)
                      : kv_lo < kv_hi ? (kv_hi - first_tile + kKvTile - 1) / kKvTile
                                      : 0;
  auto tile_key = [&](int i) { return tile_list ? tile_list[i] : first_tile + i * kKvTile; };
  auto fetch_pages = [&](int i) { fetch_tile_pages(c, s_page[i % 3], tid, i < n_tiles, i < n_tiles ? tile_key(i) : 0, kv_hi); };
  constexpr int kLoads = kKvTile * kVec / kThreads;
  static_assert(kKvTile * kVec % kThreads == 0, "whole copies per thread");
  auto copy = [&](int i, bool want_k, bool want_v) {
    unsigned char* ks = (i & 1) ? stage1 : stage0;
    unsigned char* vs = ks + kTileBytes;
    const int k0 = tile_key(i);
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int idx = tid + l * kThreads;
      const int r = idx / kVec, cv = idx % kVec;
      bool ok = false;
      const int64_t off = kv_source(c, k0 + r, s_page[i % 3][r], cv * 8, D, &ok);
      const int dst = sw128_offset(r, cv, kKvTile);
      if (want_k) cp_async16(ks + dst, static_cast<const T*>(p.k) + off, ok);
      if (want_v) cp_async16(vs + dst, static_cast<const T*>(p.v) + off, ok);
    }
  };

  float s[NT][4];
  uint32_t a[NT / 2][4];  // P of the tile whose P V is next, as wgmma's A fragments
  // S = Q K^T: this warpgroup's 64 rows x 64 keys, k-step kk reads Q's and K's 16 columns kk * 16 at
  // byte 32 (kk % 4) of panel kk / 4 (the swizzle is applied to the address bits, so a k-step inside
  // an atom is a start-address offset); 8-row groups 1024 bytes apart. Issued, not waited for.
  auto issue_qk = [&](int ti) {
    const unsigned char* ks = (ti & 1) ? stage1 : stage0;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t da = sw128_desc(qs + (kk / 4) * kRows * 128 + wg * 64 * 128 + (kk % 4) * 32, 16, 1024);
      const uint64_t db = sw128_desc(ks + (kk / 4) * kKvTile * 128 + (kk % 4) * 32, 16, 1024);
      Wgmma<T>::qk(&s[0][0], da, db, kk > 0);
    }
    wgmma_commit();
  };
  // O += P V with P from `pa`: k-step kk is keys 16 kk.. (two 8-key atoms, 1024 bytes apart), V's
  // 64-column panels kKvTile * 128 bytes apart. Issued, not waited for.
  auto issue_pv = [&](int ti, const uint32_t(&pa)[NT / 2][4]) {
    const unsigned char* vs = ((ti & 1) ? stage1 : stage0) + kTileBytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) Wgmma<T>::pv<D>(&o[0][0], pa[kk], sw128_desc(vs + kk * 2048, kKvTile * 128, 1024));
    wgmma_commit();
  };
  // the logits and the online-softmax step of tile ti's S (the mma.sync kernel's functions): O's
  // factor in corr, P into pa
  auto softmax = [&](int ti, float(&corr)[2], uint32_t(&pa)[NT / 2][4]) {
    float tile_max[2];
    c.logits<kMode, NT>(s, tile_max, rows, warp, tile_key(ti), s_rlo, s_rhi, s_wlo, s_whi, inv_cap);
    softmax_step<NT>(s, tile_max, mx, den, corr);
    pack_p<T, NT>(s, pa);
  };

  if constexpr (kLean || !kOverlap) {
    // one tile at a time, each product waited for (head dim 256: one K and one V buffer, two CTAs per
    // SM; else two stages, and two CTAs per SM at head dims <= 128: 128 registers)
    auto qk = [&](int ti) {
      issue_qk(ti);
      wgmma_wait<0>();
      wgmma_hold<NT * 4>(&s[0][0]);
    };
    auto pv = [&](int ti) {
      float corr[2];
      softmax(ti, corr, a);
      rescale_o<D>(o, corr);
      wgmma_hold<D / 2>(&o[0][0]);
      issue_pv(ti, a);
      wgmma_wait<0>();
      wgmma_hold<D / 2>(&o[0][0]);
    };
    kv_tile_loop<kLean, true>(n_tiles, copy, fetch_pages, qk, pv);
  } else {
    // Overlapped (FlashAttention-3's intra-warpgroup pipelining): S(ti + 1) = Q K(ti + 1)^T and
    // O += P(ti) V(ti) are issued together, the softmax of tile ti + 1 runs on the CUDA cores while the
    // tensor cores do P(ti) V(ti), and O is rescaled by tile ti + 1's factor once that product is done:
    // the same operations on O in the same order as one tile at a time, so the same bits. K and V
    // are copied as separate groups, K one tile further ahead: group G(ti) = {K(ti + 2), V(ti + 1)}
    // is issued at the top of iteration ti, and G(ti - 1) = {K(ti + 1), V(ti)} is what it waits for.
    auto publish = [] {
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncthreads();
    };
    fetch_pages(0);
    fetch_pages(1);
    fetch_pages(2);
    __syncthreads();  // tiles 0-2's pages
    if (n_tiles > 0) copy(0, true, false);
    cp_async_commit();  // G(-2) = {K(0)}
    if (n_tiles > 1) copy(1, true, false);
    if (n_tiles > 0) copy(0, false, true);
    cp_async_commit();  // G(-1) = {K(1), V(0)}
    if (n_tiles > 0) {
      cp_async_wait<1>();
      publish();
      issue_qk(0);
      wgmma_wait<0>();
      wgmma_hold<NT * 4>(&s[0][0]);
      float corr[2];
      softmax(0, corr, a);  // O is zero: no factor to apply
    }
    __syncthreads();  // every warp is done with K(0): its buffer takes K(2)
    // the steady state: every iteration but the last issues S(ti + 1) beside P(ti) V(ti) (no
    // conditional wgmma, so ptxas can see which group each wait completes)
    for (int ti = 0; ti + 1 < n_tiles; ++ti) {
      if (ti + 2 < n_tiles) copy(ti + 2, true, false);
      copy(ti + 1, false, true);
      cp_async_commit();   // G(ti)
      cp_async_wait<1>();  // G(ti - 1): K(ti + 1) and V(ti) have landed
      publish();
      fetch_pages(ti + 3);  // slot ti % 3: tile ti's pages, last read by V(ti)'s copy before the barrier
      issue_qk(ti + 1);
      issue_pv(ti, a);
      float corr[2];
      uint32_t an[NT / 2][4];  // P(ti + 1): a is read by the P V in flight
      wgmma_wait<1>();         // S(ti + 1) is done; P(ti) V(ti) may still run
      wgmma_hold<NT * 4>(&s[0][0]);
      softmax(ti + 1, corr, an);
      wgmma_wait<0>();
      wgmma_hold<D / 2>(&o[0][0]);
      rescale_o<D>(o, corr);
      // P(ti + 1) becomes the next P V's operand only now: the hold orders the copy after the wait (a
      // register move is otherwise free to rise above it, into the P V's flight: ptxas then serialises)
      wgmma_hold_regs<NT * 2>(&a[0][0]);
#pragma unroll
      for (int kk = 0; kk < NT / 2; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x) a[kk][x] = an[kk][x];
      __syncthreads();  // K(ti + 1) and V(ti) are free for G(ti + 1)'s copies
    }
    if (n_tiles > 0) {     // the last tile: P V alone
      cp_async_wait<0>();  // V(n - 1)
      publish();
      issue_pv(n_tiles - 1, a);
      wgmma_wait<0>();
      wgmma_hold<D / 2>(&o[0][0]);
    }
  }

  quad_row_sums(den);
  c.store<D, T>(warp, o, mx, den);
}

// The Hopper kernel for a plan tile of `rows` (64 or 128) rows, overlapped or one tile at a time (head
// dim 256 has the lean form only); the caller has checked flash_sm90_fits (no key-split warps, a mode
// it compiles).
template <int D, class T>
void launch_flash_sm90(const FlashParams& p, int rows, bool overlap, dim3 grid, cudaStream_t stream) {
  const size_t smem = flash_sm90_smem_bytes(D, rows);
  auto go = [&](auto kernel, int threads) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
          "cudaFuncSetAttribute");
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100), "cudaFuncSetAttribute");
    kernel<<<grid, threads, smem, stream>>>(p);
  };
  const int mode = flash_mode(p);
  auto pick = [&](auto k0, auto k1, auto k2, auto k4, int threads) {
    if (mode == 0) return go(k0, threads);
    if (mode == 1) return go(k1, threads);
    if (mode == 2) return go(k2, threads);
    return go(k4, threads);
  };
#define ATTNSCOPE_SM90_MODES(NWG, OV)                                                                            \
  flash_sm90_kernel<D, T, NWG, 0, OV>, flash_sm90_kernel<D, T, NWG, 1, OV>, flash_sm90_kernel<D, T, NWG, 2, OV>, \
      flash_sm90_kernel<D, T, NWG, 4, OV>
  constexpr bool kCanOverlap = D < 256;
  if (rows == 64 && overlap && kCanOverlap) return pick(ATTNSCOPE_SM90_MODES(1, kCanOverlap), 128);
  if (rows == 64) return pick(ATTNSCOPE_SM90_MODES(1, false), 128);
  if constexpr (D < 256) {
    if (rows == 128 && overlap) return pick(ATTNSCOPE_SM90_MODES(2, true), 256);
    if (rows == 128) return pick(ATTNSCOPE_SM90_MODES(2, false), 256);
  }
#undef ATTNSCOPE_SM90_MODES
  throw CudaError("cuda.flash (wgmma): no kernel for head_dim " + std::to_string(D) + " with " + std::to_string(rows) +
                  "-row tiles");
}

}  // namespace attnscope::cuda
