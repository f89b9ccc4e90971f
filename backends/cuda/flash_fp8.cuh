// cuda.flash's FP8 cache in registers (flash_fp8_in_registers: the decode layout, whose warps split the
// tile's keys): the tile's FP8 bytes stay in shared memory and each warp turns its own keys' K and V into
// MMA operands after ldmatrix, treating a 16-byte row segment as eight b16 units (docs/architecture.md,
// FP8). The contraction order is free, so the fragments follow the bytes:
// - S = Q K^T: ldmatrix gives a thread 4 consecutive head-dim bytes 4 t4 .. 4 t4 + 3 of one key; as B
//   fragment (k 2 t4, 2 t4 + 1 | 2 t4 + 8, 2 t4 + 9) they are (4 t4, 4 t4 + 2 | 4 t4 + 1, 4 t4 + 3), and Q's
//   fragments are built in that order (fp8_q_fragment);
// - O += P V: ldmatrix.trans gives two keys x two head dims (2 g, 2 g + 1); the even dims of a 16-dim
//   chunk form one n-tile, the odd dims another, so a thread's O holds head dims 16 c + 4 t4 .. + 3 of its
//   rows (FlashCta::store's kQuadCols).
#pragma once

#include "sm80_primitives.cuh"

namespace attnscope::cuda {

// Byte offset of 16-byte chunk `chunk` of row r in an FP8 tile of D-byte rows: chunks XOR-swizzled so the
// 8 rows one ldmatrix reads fall on 8 bank groups (head dim 64: two rows share a 128-byte line).
template <int D>
__device__ __forceinline__ int fp8_at(int r, int chunk) {
  static_assert(D == 64 || D == 128 || D == 256, "the FP8 kernels' head dims");
  return r * D + 16 * (chunk ^ (D >= 128 ? (r & 7) : ((r >> 1) & 3)));
}

// This lane's ldmatrix address in an FP8 tile (shared address `tile`, a multiple of D) for a 16-key
// group from key `base` (a multiple of 16): matrix lane / 8 is keys base + 8 (mi % 2) .., chunk mi / 2.
// Chunk pair (c, c + 1), c even, is then at `addr ^ 16 c`: the swizzle XORs, and 16 c < D.
template <int D>
__device__ __forceinline__ uint32_t fp8_lane_addr(uint32_t tile, int base, int lane) {
  const int mi = lane / 8;
  return tile + static_cast<uint32_t>(fp8_at<D>(base + 8 * (mi % 2) + lane % 8, mi / 2));
}

// Q's A fragment for k-step c (head dims 16 c .. 16 c + 15) in the FP8 kernels' order, from Q's dtype
// tile in shared memory (tile_at layout), rows r0 + g and r0 + g + 8.
template <int D, class T, class At>
__device__ __forceinline__ void fp8_q_fragment(const T* qs, At at, int r0, int g, int t4, int c, uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint2 x = *reinterpret_cast<const uint2*>(qs + at(r0 + g + 8 * i, 16 * c + 8 * (t4 >> 1)) + 4 * (t4 & 1));
    a[i] = __byte_perm(x.x, x.y, 0x5410);      // dims 4 t4, 4 t4 + 2
    a[i + 2] = __byte_perm(x.x, x.y, 0x7632);  // dims 4 t4 + 1, 4 t4 + 3
  }
}

// S += Q K^T of a warp's NT x 8 keys from the K tile's bytes at this lane's address k_addr
// (fp8_lane_addr of the warp's first key); qf(c, a) gives Q's fragment of k-step c.
template <int D, class T, bool kE5m2, int NT, class QFrag>
__device__ __forceinline__ void fp8_qk(float (&s)[NT][4], QFrag&& qf, uint32_t k_addr) {
#pragma unroll
  for (int jj = 0; jj < NT / 2; ++jj)
#pragma unroll
    for (int c = 0; c < D / 16; c += 2) {
      uint32_t r[4], b[4][2];
      ldmatrix_x4(r, (k_addr + static_cast<uint32_t>(jj * 16 * D)) ^ static_cast<uint32_t>(16 * c));
#pragma unroll
      for (int x = 0; x < 4; ++x) fp8x4_split<T, kE5m2>(r[x], b[x][0], b[x][1]);
      uint32_t a[4];
      qf(c, a);
      Mma<T>::run(s[2 * jj], a, b[0][0], b[0][1]);  // keys 0..7 of the group
      Mma<T>::run(s[2 * jj + 1], a, b[1][0], b[1][1]);
      qf(c + 1, a);
      Mma<T>::run(s[2 * jj], a, b[2][0], b[2][1]);
      Mma<T>::run(s[2 * jj + 1], a, b[3][0], b[3][1]);
    }
}

// O += P V of a warp's keys from the V tile's bytes at this lane's address v_addr; p: P's A fragments
// (pack_p). o[2 c] holds chunk c's even head dims, o[2 c + 1] its odd ones.
template <int D, class T, bool kE5m2, int NT>
__device__ __forceinline__ void fp8_pv(float (&o)[D / 8][4], const uint32_t (&p)[NT / 2][4], uint32_t v_addr) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk)
#pragma unroll
    for (int c = 0; c < D / 16; c += 2) {
      uint32_t r[4], b[4][2];
      ldmatrix_x4_trans(r, (v_addr + static_cast<uint32_t>(kk * 16 * D)) ^ static_cast<uint32_t>(16 * c));
#pragma unroll
      for (int x = 0; x < 4; ++x) fp8x4_split<T, kE5m2>(r[x], b[x][0], b[x][1]);
      Mma<T>::run(o[2 * c], p[kk], b[0][0], b[1][0]);  // chunk c, even dims: keys 0..7 then 8..15
      Mma<T>::run(o[2 * c + 1], p[kk], b[0][1], b[1][1]);
      Mma<T>::run(o[2 * c + 2], p[kk], b[2][0], b[3][0]);
      Mma<T>::run(o[2 * c + 3], p[kk], b[2][1], b[3][1]);
    }
}

}  // namespace attnscope::cuda
