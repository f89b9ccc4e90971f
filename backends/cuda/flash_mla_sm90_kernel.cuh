// cuda.flash's MLA absorbed-decode kernel on Hopper (sm_90a; docs/architecture.md, "MLA absorbed decode"):
// flash_mla_kernel.cuh's computation with both matrix products on wgmma. One CTA of two warpgroups runs
// 64 rows (the plan items of one KV chunk that flash_mla.cu grouped; warp w % 4 owns 16-row block w), over
// the chunk's keys in 64-key tiles of the latent gathered by cp.async into 128-byte swizzled panels; V is
// the first 512 columns (panels 0-7) of the same tile. Warpgroup h computes S for keys 32 h .. 32 h + 31
// of each tile (wgmma m64n32k16 over 576 dims from shared memory) and O for head dims 256 h .. 256 h + 255
// (wgmma m64n256k16, P from registers). The two halves of a row share the tile maxima through shared
// memory and P through the tile's panel 8 (its kpe columns, which P V does not read): each row's P, in the
// dtype, and every sum are those of flash_mla_kernel.cuh, in the same order.
#pragma once

#include "flash_mla_kernel.cuh"
#include "sm90_primitives.cuh"

namespace attnscope::cuda {

template <class T>
__global__ void __launch_bounds__(256, 1) flash_mla_sm90_kernel(const FlashParams p) {
  constexpr int DK = kMlaQkDim, kVec = DK / 8;  // 576, 72 16-byte vectors per row
  constexpr int kRows = 64, NT = 4;             // a warpgroup's 32 keys of a tile: 4 n-tiles
  constexpr int kDW = kMlaVoDim / 2;            // a warpgroup's 256 output dims
  constexpr uint32_t kPanel = kKvTile * 128;    // one 64-column panel of a K tile
  constexpr int kTileBytes = kKvTile * DK * 2;
  static_assert(kKvTile == 64 && kRows * DK * 2 == kTileBytes, "Q and a K tile: the same 9 panels of 64 rows");
  if (static_cast<int>(blockIdx.x) >= p.num_items) return;  // num_items: the CTAs (groups)

  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* qs = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  unsigned char* stage0 = qs + kTileBytes;  // K of a tile, 9 panels; panel 8 then holds the tile's P
  __shared__ int s_lo, s_hi;
  __shared__ int s_rlo[kRows], s_rhi[kRows], s_wlo[4], s_whi[4];
  __shared__ float s_red[2][kRows];  // each half's tile maxima (then: row sums)
  __shared__ int64_t s_row[3][kKvTile];
  __shared__ bool s_full[3];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = __shfl_sync(0xffffffffu, warp / 4, 0), w = warp % 4;
  const int ib = p.mla_item_blocks;
  const int* items = p.mla_items + static_cast<int64_t>(blockIdx.x) * (4 / ib);
  const FlashCta c = mla_cta(p, tid, items, w, ib);
  const int g = c.g, t4 = c.t4;

  // Q: warps w and w + 4 load block w's 16 rows
  for (int i = lane + 32 * wg; i < 16 * kVec; i += 64) {
    const int r = w * 16 + i / kVec, cv = i % kVec;
    *reinterpret_cast<uint4*>(qs + sw128_offset(r, cv, kRows)) = q_vector<DK, T>(c, r, cv);
  }
  if (tid == 0) {
    s_lo = INT_MAX;
    s_hi = INT_MIN;
  }
  __syncthreads();
  if (wg == 0) c.row_ranges(w, &s_lo, &s_hi, s_rlo, s_rhi, s_wlo, s_whi);
  fence_async_shared();  // Q's stores, before wgmma reads them
  __syncthreads();
  const int kv_lo = s_lo, kv_hi = s_hi;
  const FlashRowBlock<FlashMode::kPlain> no_terms;

  float o[kDW / 8][4];
#pragma unroll
  for (int j = 0; j < kDW / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float mx[2] = {-INFINITY, -INFINITY}, den[2] = {0.f, 0.f};
  float s[NT][4];
  uint32_t a[kKvTile / 16][4];  // P of the row block, all 64 keys, as wgmma's A fragments

  const ItemTiles tiles(c, kv_lo, kv_hi, false);
  const Sw128Desc kmaj = sw128_desc_base(qs, 16, 1024), vmaj = sw128_desc_base(qs, kPanel, 1024);
  auto stage_off = [&](int ti) { return static_cast<uint32_t>(kTileBytes) * (1 + (ti & 1)); };
  auto fetch_pages = [&](int i) { return load_tile_page(c, tid, tiles, i, kv_hi); };
  auto put_pages = [&](int i, const TilePage& t) { store_tile_slot(c, t, s_row[i % 3], &s_full[i % 3], tid, DK); };
  auto copy = [&](int i, bool, bool) {
    unsigned char* ks = stage0 + (i & 1) * kTileBytes;
#pragma unroll 2
    for (int l = 0; l < kKvTile * kVec / 256; ++l) {
      const int idx = tid + l * 256;
      const int r = idx / kVec, cv = idx % kVec;
      bool ok = false;
      const int64_t off = kv_source(s_row[i % 3][r], cv, &ok);
      cp_async16(ks + sw128_offset(r, cv, kKvTile), pool_at(p.k, off), ok);
    }
  };
  // S = Q K^T, issued: all 64 rows, keys 32 wg .. 32 wg + 31 (rows 32 wg on of each K panel: whole
  // 8-row swizzle atoms), k-step kk 16 columns at byte 32 (kk % 4) of panel kk / 4
  auto qk = [&](int ti) {
    const uint32_t k_off = stage_off(ti) + wg * 32 * 128;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < DK / 16; ++kk) {
      const uint32_t step = (kk / 4) * kPanel + (kk % 4) * 32;
      Wgmma<T>::qk32(&s[0][0], kmaj.at(step), kmaj.at(k_off + step), kk > 0);
    }
    wgmma_commit();
  };
  auto pv = [&](int ti) {
    wgmma_wait<0>();
    wgmma_hold<NT * 4>(&s[0][0]);
    float tile_max[2];
    c.logits<FlashMode::kPlain, NT>(s, tile_max, no_terms, w, tiles.key(ti) + wg * 32, false, s_rlo, s_rhi, s_wlo, s_whi, 0.f);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      if (t4 == 0) s_red[wg][w * 16 + g + 8 * i] = tile_max[i];
    }
    // every warpgroup's S is done (its reads of panel 8 too) and the maxima are published
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; ++i) tile_max[i] = fmaxf(s_red[0][w * 16 + g + 8 * i], s_red[1][w * 16 + g + 8 * i]);
    float corr[2];
    softmax_step<NT>(s, tile_max, mx, den, corr, p.scale_log2);  // the same maxima in both halves
    rescale_o<kDW>(o, corr);
    unsigned char* ps = qs + stage_off(ti) + 8 * kPanel;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = w * 16 + g + 8 * i, vec = wg * 4 + j;
        *reinterpret_cast<uint32_t*>(ps + r * 128 + ((vec ^ (r & 7)) << 4) + 4 * t4) = Mma<T>::pack(s[j][2 * i], s[j][2 * i + 1]);
      }
    named_barrier(1 + w, 64);  // block w's two halves of P
    const uint32_t p_row = smem_u32(ps) + (w * 16 + lane % 16) * 128;
#pragma unroll
    for (int kk = 0; kk < kKvTile / 16; ++kk) ldmatrix_x4(a[kk], p_row + (((2 * kk + lane / 16) ^ (lane % 8)) << 4));
    // O += P V: keys 16 kk .. as rows (2048 bytes a k-step), this warpgroup's panels 4 wg .. 4 wg + 3
    const uint32_t vs = stage_off(ti) + wg * 4 * kPanel;
    wgmma_hold<kDW / 2>(&o[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKvTile / 16; ++kk) Wgmma<T>::template pv<kDW>(&o[0][0], a[kk], vmaj.at(vs + kk * 2048));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold<kDW / 2>(&o[0][0]);
  };
  kv_tile_loop<false, true, true>(tiles.n, copy, fetch_pages, put_pages, qk, pv);

  quad_row_sums(den);
  __syncthreads();  // every warp is past its last reads of s_red
#pragma unroll
  for (int i = 0; i < 2; ++i)
    if (t4 == 0) s_red[wg][w * 16 + g + 8 * i] = den[i];
  __syncthreads();
  float d2[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) d2[i] = s_red[0][w * 16 + g + 8 * i] + s_red[1][w * 16 + g + 8 * i];
  flash_mla_store<T, kDW>(c, w, wg * kDW, o, mx, d2);
}

// The launcher of the instance table (instances/flash_mla_sm90_instances.def): D is the qk head dim, 576.
template <int D, class T>
void launch_flash_mla_sm90(const FlashParams& p, dim3 grid, cudaStream_t stream) {
  static_assert(D == kMlaQkDim, "the absorbed form's qk head dim");
  const size_t smem = flash_mla_sm90_smem_bytes();
  check(cudaFuncSetAttribute(flash_mla_sm90_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "cudaFuncSetAttribute");
  flash_mla_sm90_kernel<T><<<grid, 256, smem, stream>>>(p);
}

}  // namespace attnscope::cuda
