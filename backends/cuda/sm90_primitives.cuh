// Hopper (sm_90a) primitives of cuda.flash's wgmma kernels: the wgmma wrappers by dtype, their fences
// and waits, shared-memory matrix descriptors with the 128-byte swizzle, and named barriers (PTX ISA
// 8.x names).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "wgmma_ops.cuh"

namespace attnscope::cuda {

template <class T>
struct Wgmma;

template <>
struct Wgmma<__nv_bfloat16> {
  __device__ static void qk(float* d, uint64_t a, uint64_t b, int acc) { wgmma_ss_m64n64k16_bf16(d, a, b, acc); }
  // half a key tile (the MLA kernel's warpgroups split a tile's keys)
  __device__ static void qk32(float* d, uint64_t a, uint64_t b, int acc) { wgmma_ss_m64n32k16_bf16(d, a, b, acc); }
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
  // half a key tile (the MLA kernel's warpgroups split a tile's keys)
  __device__ static void qk32(float* d, uint64_t a, uint64_t b, int acc) { wgmma_ss_m64n32k16_f16(d, a, b, acc); }
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

// the same for registers a wgmma reads (P's A fragments): held until its wait, so the compiler does
// not reuse them while the tensor cores may still read them
template <int N>
__device__ __forceinline__ void wgmma_hold_u32(uint32_t* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// the generic-proxy writes (cp.async, st.shared) this thread has seen, ordered before its async-proxy
// (wgmma) reads
__device__ inline void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// A shared-memory matrix descriptor with the 128-byte swizzle: start address, leading and stride byte
// offsets (16-byte units), swizzle mode 1 in bits 62-63 (PTX ISA, "Matrix Descriptor Format").
__device__ inline uint64_t sw128_desc(const void* smem, uint32_t lead_bytes, uint32_t stride_bytes) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((a & 0x3FFFF) >> 4) | static_cast<uint64_t>((lead_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32 | 1ull << 62;
}

// The same descriptor split into its two 32-bit words, for a base address that many k-steps offset:
// the start-address field (bits 0-13, address / 16) of the base plus offset / 16 is the field of the
// offset address, and never carries into bit 14 (shared memory ends below 256 KB), so a k-step's
// descriptor is one 32-bit add to the low word instead of rebuilding it from the address (rebuilt
// descriptors were a large part of the loop's instructions).
struct Sw128Desc {
  uint32_t lo, hi;
  __device__ uint64_t at(uint32_t byte_offset) const { return static_cast<uint64_t>(hi) << 32 | (lo + (byte_offset >> 4)); }
};
__device__ inline Sw128Desc sw128_desc_base(const void* smem, uint32_t lead_bytes, uint32_t stride_bytes) {
  const uint64_t d = sw128_desc(smem, lead_bytes, stride_bytes);
  return {static_cast<uint32_t>(d), static_cast<uint32_t>(d >> 32)};
}

// S = Q K^T of one warpgroup's 64 rows and one K tile, both in 128-byte swizzled panels of 64
// columns: Q's rows from byte q_off (panels kRows rows apart), the K tile's keys from k_off (panels
// kKeys rows apart); k-step kk is 16 columns, 32 bytes into panel kk / 4. Issued and committed, not
// waited on (the callers differ in when they wait).
template <class T, int D, int kRows, int kKeys>
__device__ __forceinline__ void wgmma_qk_tile(float* s, const Sw128Desc& kmaj, uint32_t q_off, uint32_t k_off) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t da = kmaj.at(q_off + (kk / 4) * kRows * 128 + (kk % 4) * 32);
    const uint64_t db = kmaj.at(k_off + (kk / 4) * kKeys * 128 + (kk % 4) * 32);
    Wgmma<T>::qk(s, da, db, kk > 0);
  }
  wgmma_commit();
}

// Byte offset of row r's 16-byte vector cv in a tile of `rows` rows stored as 128-byte swizzled
// panels of 64 columns: panel cv / 8, then row r's 128 bytes, in which vector cv % 8 sits at
// (cv % 8) ^ (r % 8). Each 8-row group is one 1024-byte swizzle atom.
__device__ inline int sw128_offset(int r, int cv, int rows) {
  return (cv >> 3) * rows * 128 + r * 128 + (((cv & 7) ^ (r & 7)) << 4);
}

// a barrier of `threads` threads on hardware barrier `id` (0 is __syncthreads')
__device__ inline void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace attnscope::cuda
