// cuda.flash's MLA absorbed-decode kernel (docs/architecture.md, "MLA absorbed decode"): plain attention
// with one latent KV head of head dims qk 576 ([ckv ; kpe]) and vo 512 (ckv), the query heads packed as
// rows (row = query token x head, as GQA groups are packed). One CTA runs up to 64 rows: the plan items
// (16, 32 or 64 rows each, the planners' tiles at vo 512) of one KV chunk that flash_mla.cu grouped, over
// the chunk's keys in 64-key tiles gathered from the paged (or ragged) K pool into shared memory; V is the first 512 columns of
// the same K tile, so the latent is read once. 2 x RG warps: for the logits, warp (rg, h) owns rows 16 rg .. 16 rg + 15 and keys
// 32 h .. 32 h + 31 of each tile; the two warps of a row group share their tile maxima, the rescale
// factors and P (rounded to the dtype) through shared memory, and each keeps the row sum of its own
// keys, summed at the end. For O += P V each warp owns 32 rows x 128 head dims (one row group: 16 x 256),
// its fp32 accumulators 128 registers, every V fragment feeding both of its row blocks.
// Online softmax in base 2 with the flash kernel's steps (flash_device.cuh); output: the final O and
// LSE or a split-KV partial for the merge kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "flash_device.cuh"
#include "flash_mla.h"

namespace attnscope::cuda {

// Element offset of row r's column col (a multiple of 8) in a shared-memory tile of rows of W elements
// (W a multiple of 64): 16-byte vectors XOR-swizzled by the row's low three bits within each 128-byte
// panel, so the 8 rows an ldmatrix reads fall on 8 bank groups (flash_kernel.cuh's tile_at).
template <int W>
__device__ __forceinline__ int mla_at(int r, int col) {
  static_assert(W % 64 == 0, "whole 128-byte panels");
  return r * W + (((col >> 3) ^ (r & 7)) << 3);
}

// The byte offsets in a 128-byte panel of the swizzled 16-byte vectors 2 q + c (q = 0 .. 3) of a row whose
// low three bits are r7: a lane's ldmatrix addresses along a row are its row base + 128 x panel + x[q].
struct PanelX {
  uint32_t x[4];
  __device__ PanelX(int c, int r7) {
#pragma unroll
    for (int q = 0; q < 4; ++q) x[q] = static_cast<uint32_t>(((2 * q + c) ^ r7) << 4);
  }
};
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// The work item of CTA-wide 16-row block blk (slot blk / ib of the CTA's items, ib blocks each): an empty
// slot takes slot 0's item with its rows moved past the item's end (blk0 one item back), so they load
// zeros, see no key and store nothing.
__device__ __forceinline__ FlashCta mla_cta(const FlashParams& p, int tid, const int* items, int blk, int ib) {
  const int slot = blk / ib, mine = items[slot];
  return FlashCta(p, tid, mine >= 0 ? mine : items[0], mine >= 0 ? slot * ib : (slot - 1) * ib);
}

// The output of block blk's rows, head dims d0 .. d0 + kDW - 1 of O / den: final (dtype) or a split-KV
// partial (fp32) for the merge kernel; the LSE once per row (the warp with d0 = 0). FlashCta::store's
// rules (no sink: cuda.flash refuses sinks with MLA).
template <class T, int kDW>
__device__ __forceinline__ void flash_mla_store(const FlashCta& c, int blk, int d0, const float (&o)[kDW / 8][4],
                                                const float (&mx)[2], const float (&den)[2]) {
  constexpr int DV = kMlaVoDim;
  const FlashParams& p = c.p;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = c.row_of(blk, i);
    if (row >= c.it.row_end) continue;
    const int q_local = row / c.G;
    const int hd = c.kvh * c.G + row % c.G;
    const bool empty = den[i] == 0.f;
    const float inv = empty ? 0.f : 1.f / den[i];
    const float lse2 = empty ? -INFINITY : mx[i] + log2f(den[i]);
    const bool lse_here = d0 == 0 && c.t4 == 0;
    if (p.split) {
      const int64_t pr = p.o_indptr[c.it.unit] + static_cast<int64_t>(q_local) * p.unit_chunks[c.it.unit] + c.it.kv_chunk;
      float* dst = p.part_o + (pr * p.hq + hd) * DV + d0;
#pragma unroll
      for (int j = 0; j < kDW / 8; ++j) {
        float a = o[j][2 * i] * inv, b = o[j][2 * i + 1] * inv;
        if (p.round_partials) {
          a = round_to(Mma<T>::kDType, a);
          b = round_to(Mma<T>::kDType, b);
        }
        *reinterpret_cast<float2*>(dst + 8 * j + 2 * c.t4) = make_float2(a, b);
      }
      if (lse_here) p.part_lse[pr * p.hq + hd] = lse2;
    } else {
      const int64_t token = c.tok0 + q_local;
      T* dst = static_cast<T*>(p.o) + (token * p.hq + hd) * DV + d0;
#pragma unroll
      for (int j = 0; j < kDW / 8; ++j)
        *reinterpret_cast<uint32_t*>(dst + 8 * j + 2 * c.t4) = Mma<T>::pack(o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
      if (lse_here) p.lse[token * p.hq + hd] = lse2 == -INFINITY ? -INFINITY : lse2 * 0.6931471805599453f;
    }
  }
}

template <class T, int RG>
__global__ void __launch_bounds__(RG * 64, 1) flash_mla_kernel(const FlashParams p) {
  constexpr int kThreads = RG * 64;
  constexpr int kRows = RG * 16;
  constexpr int DK = kMlaQkDim, DV = kMlaVoDim;  // 576, 512
  constexpr int kVec = DK / 8;                   // 16-byte vectors per K / Q row
  constexpr int NT = 4;                          // a warp's 32 keys of a tile: 4 n-tiles
  // P V's warps: with 2+ row groups each warp owns 32 rows (two blocks) x 128 dims (every V fragment read
  // from shared memory feeds both blocks); with one, 16 rows x 256 dims
  constexpr int kRB = RG >= 2 ? 2 : 1, kDW = DV / (2 * kRB);
  if (static_cast<int>(blockIdx.x) >= p.num_items) return;  // num_items: the CTAs (groups), not the plan's items

  extern __shared__ __align__(128) unsigned char smem_dyn[];
  T* qs = reinterpret_cast<T*>(smem_dyn);  // [kRows][576], swizzled (mla_at<576>)
  T* stage0 = qs + kRows * DK;             // K of a tile [64][576]; its first 512 columns are V
  T* stage1 = stage0 + kKvTile * DK;
  T* ps = stage1 + kKvTile * DK;  // P [kRows][64] in the dtype, swizzled (mla_at<64>)
  __shared__ int s_lo, s_hi;
  __shared__ int s_rlo[kRows], s_rhi[kRows], s_wlo[RG], s_whi[RG];
  __shared__ float s_red[2][kRows];  // each half's tile maxima (then: row sums)
  __shared__ float s_corr[kRows];    // the rows' rescale factor of the tile (then: their maxima)
  __shared__ int64_t s_row[3][kKvTile];
  __shared__ bool s_full[3];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int rg = warp % RG, h = warp / RG;
  // this warp's item for S and the softmax: its row group's (mla_cta)
  const int ib = p.mla_item_blocks;
  const int* items = p.mla_items + static_cast<int64_t>(blockIdx.x) * (RG / ib);
  const FlashCta c = mla_cta(p, tid, items, rg, ib);
  const int g = c.g, t4 = c.t4;

  // Q: the row group's two warps load its 16 rows
  for (int i = lane + 32 * h; i < 16 * kVec; i += 64) {
    const int r = rg * 16 + i / kVec, cv = i % kVec;
    *reinterpret_cast<uint4*>(qs + mla_at<DK>(r, cv * 8)) = q_vector<DK, T>(c, r, cv);
  }
  if (tid == 0) {
    s_lo = INT_MAX;
    s_hi = INT_MIN;
  }
  __syncthreads();
  if (h == 0) c.row_ranges(rg, &s_lo, &s_hi, s_rlo, s_rhi, s_wlo, s_whi);
  __syncthreads();
  const int kv_lo = s_lo, kv_hi = s_hi;
  const FlashRowBlock<FlashMode::kPlain> no_terms;
  const float exp_scale = p.scale_log2;

  const int pv_blk = kRB == 2 ? (warp % (RG / 2)) * 2 : rg;  // P V's first row block and dims
  const int d0 = kRB == 2 ? (warp / (RG / 2)) * kDW : h * kDW;
  float o[kRB][kDW / 8][4];
#pragma unroll
  for (int rb = 0; rb < kRB; ++rb)
#pragma unroll
    for (int j = 0; j < kDW / 8; ++j) o[rb][j][0] = o[rb][j][1] = o[rb][j][2] = o[rb][j][3] = 0.f;
  float mx[2] = {-INFINITY, -INFINITY}, den[2] = {0.f, 0.f};
  float s[NT][4];

  const ItemTiles tiles(c, kv_lo, kv_hi, false);
  auto fetch_pages = [&](int i) { return load_tile_page(c, tid, tiles, i, kv_hi); };
  auto put_pages = [&](int i, const TilePage& t) { store_tile_slot(c, t, s_row[i % 3], &s_full[i % 3], tid, DK); };
  auto stage_of = [&](int i) { return (i & 1) ? stage1 : stage0; };
  auto copy = [&](int i, bool, bool) {
    T* ks = stage_of(i);
#pragma unroll 2
    for (int l = 0; l < kKvTile * kVec / kThreads; ++l) {
      const int idx = tid + l * kThreads;
      const int r = idx / kVec, cv = idx % kVec;
      bool ok = false;
      const int64_t off = kv_source(s_row[i % 3][r], cv, &ok);
      cp_async16(ks + mla_at<DK>(r, cv * 8), pool_at(p.k, off), ok);
    }
  };
  // S = Q K^T: rows of row group rg, keys 32 h .. 32 h + 31 of the tile, over the 576 dims. Each lane's
  // ldmatrix rows have the same low three bits (lane % 8), so its swizzled addresses are a row base plus
  // a panel and one of four offsets (PanelX): no address per k-step held in registers.
  const int mi = lane / 8;
  const PanelX xq(lane / 16, lane % 8), xk(mi % 2, lane % 8), xv(mi / 2, lane % 8);
  const uint32_t q_base = smem_u32(qs) + (rg * 16 + lane % 16) * DK * 2;
  const uint32_t k_row = (h * 32 + (mi / 2) * 8 + lane % 8) * DK * 2;
  auto qk = [&](int ti) {
    const uint32_t k_base = smem_u32(stage_of(ti)) + k_row;
#pragma unroll
    for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < DK / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, q_base + (kk / 4) * 128 + xq.x[kk % 4]);
#pragma unroll
      for (int jj = 0; jj < NT / 2; ++jj) {
        uint32_t b[4];
        ldmatrix_x4(b, k_base + jj * 16 * DK * 2 + (kk / 4) * 128 + xk.x[kk % 4]);
        Mma<T>::run(s[2 * jj], a, b[0], b[1]);
        Mma<T>::run(s[2 * jj + 1], a, b[2], b[3]);
      }
    }
  };
  // the logits, the shared maxima, the online softmax, P through shared memory and O += P V
  auto pv = [&](int ti) {
    float tile_max[2];
    c.logits<FlashMode::kPlain, NT>(s, tile_max, no_terms, rg, tiles.key(ti) + h * 32, false, s_rlo, s_rhi, s_wlo, s_whi, 0.f);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      if (t4 == 0) s_red[h][rg * 16 + g + 8 * i] = tile_max[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; ++i) tile_max[i] = fmaxf(s_red[0][rg * 16 + g + 8 * i], s_red[1][rg * 16 + g + 8 * i]);
    float corr[2];
    softmax_step<NT>(s, tile_max, mx, den, corr, exp_scale);  // the same maxima in both halves
    if (h == 0 && t4 == 0) s_corr[rg * 16 + g] = corr[0], s_corr[rg * 16 + g + 8] = corr[1];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = rg * 16 + g + 8 * i, key = h * 32 + 8 * j + 2 * t4;
        *reinterpret_cast<uint32_t*>(ps + mla_at<kKvTile>(r, key & ~7) + (key & 7)) = Mma<T>::pack(s[j][2 * i], s[j][2 * i + 1]);
      }
    __syncthreads();
#pragma unroll
    for (int rb = 0; rb < kRB; ++rb) {
      const float cr[2] = {s_corr[(pv_blk + rb) * 16 + g], s_corr[(pv_blk + rb) * 16 + g + 8]};
      rescale_o<kDW>(o[rb], cr);
    }
    // V: the tile's keys 16 kk .. as rows, this warp's dims (d0 / 64 panels on) through ldmatrix.trans
    const uint32_t v_base = smem_u32(stage_of(ti)) + ((mi % 2) * 8 + lane % 8) * DK * 2 + d0 * 2;
    const uint32_t p_base = smem_u32(ps) + (pv_blk * 16 + lane % 16) * kKvTile * 2;
#pragma unroll
    for (int kk = 0; kk < kKvTile / 16; ++kk) {
      uint32_t a[kRB][4];
#pragma unroll
      for (int rb = 0; rb < kRB; ++rb)
        ldmatrix_x4(a[rb], p_base + rb * 16 * kKvTile * 2 + (((2 * kk + lane / 16) ^ (lane % 8)) << 4));
#pragma unroll
      for (int nn = 0; nn < kDW / 16; ++nn) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_base + kk * 16 * DK * 2 + (nn / 4) * 128 + xv.x[nn % 4]);
#pragma unroll
        for (int rb = 0; rb < kRB; ++rb) {
          Mma<T>::run(o[rb][2 * nn], a[rb], b[0], b[1]);
          Mma<T>::run(o[rb][2 * nn + 1], a[rb], b[2], b[3]);
        }
      }
    }
  };
  kv_tile_loop<false, false, false>(tiles.n, copy, fetch_pages, put_pages, qk, pv);

  quad_row_sums(den);
  __syncthreads();  // every warp is past its last reads of s_red and s_corr
#pragma unroll
  for (int i = 0; i < 2; ++i)
    if (t4 == 0) {
      s_red[h][rg * 16 + g + 8 * i] = den[i];
      if (h == 0) s_corr[rg * 16 + g + 8 * i] = mx[i];
    }
  __syncthreads();
#pragma unroll
  for (int rb = 0; rb < kRB; ++rb) {
    const int b = pv_blk + rb;
    float m2[2], d2[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = b * 16 + g + 8 * i;
      m2[i] = s_corr[r];
      d2[i] = s_red[0][r] + s_red[1][r];
    }
    flash_mla_store<T, kDW>(kRB == 2 ? mla_cta(p, tid, items, b, ib) : c, b, d0, o[rb], m2, d2);
  }
}

// The launcher of the instance table (instances/flash_mla_instances.def): D is the qk head dim, 576.
template <int D, class T>
void launch_flash_mla(const FlashParams& p, int rows, dim3 grid, cudaStream_t stream) {
  static_assert(D == kMlaQkDim, "the absorbed form's qk head dim");
  auto go = [&](auto kernel, int rg) {
    const size_t smem = flash_mla_smem_bytes(rg);
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
          "cudaFuncSetAttribute");
    kernel<<<grid, rg * 64, smem, stream>>>(p);
  };
  const int rg = flash_mla_row_groups(rows);
  if (rg == 1) return go(flash_mla_kernel<T, 1>, 1);
  if (rg == 2) return go(flash_mla_kernel<T, 2>, 2);
  return go(flash_mla_kernel<T, 4>, 4);
}

}  // namespace attnscope::cuda
