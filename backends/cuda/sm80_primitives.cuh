// The mma.sync-generation (sm_80+) primitives of cuda.flash: the m16n8k16 MMA and the pack of two
// floats to the dtype by dtype, ldmatrix, cp.async with zero-fill, exp2 and tanh on the SFU. Used by
// both kernels (the Hopper kernel for its copies, the softmax and P's pack).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "attnscope/types.h"

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

// ldmatrix at a shared-memory address (a 32-bit shared-window address) or a generic pointer into shared memory
__device__ inline void ldmatrix_x4(uint32_t* r, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ inline void ldmatrix_x4_trans(uint32_t* r, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ inline void ldmatrix_x4(uint32_t* r, const void* smem) {
  ldmatrix_x4(r, static_cast<uint32_t>(__cvta_generic_to_shared(smem)));
}
__device__ inline void ldmatrix_x4_trans(uint32_t* r, const void* smem) {
  ldmatrix_x4_trans(r, static_cast<uint32_t>(__cvta_generic_to_shared(smem)));
}

__device__ inline void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // ignore-src (PTX 7.5) when !valid: nothing is read, the 16 bytes are zero-filled. The predicate
  // form, not a src-size of 0: ptxas turned the size back into the predicate with five integer
  // instructions per copy. L2::256B: the aligned 256 bytes around the source come into L2 on a key's
  // first copy (its whole row at head dim 128), which the key's next copies then hit
  asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, %2, 0;\ncp.async.cg.shared.global.L2::256B [%0], [%1], 16, p;\n}\n" ::"r"(dst),
               "l"(gmem), "r"(static_cast<uint32_t>(valid)));
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
// block (instruction-cache stalls). Absolute error about 1e-6 (tanh is at most
// 1 in size), times the cap (50 for Gemma-2): 5e-5 in a logit, far below the bf16 rounding of P that
// follows. exp overflowing to inf gives 1, underflowing to 0 gives -1.
__device__ inline float softcap_tanh(float y) {
  const float e = fast_exp2(y * 2.8853900817779268f);  // exp(2y) = 2^(2 y log2 e)
  return 1.f - __fdividef(2.f, e + 1.f);
}

// Eight FP8 values (e4m3, or e5m2 with kE5m2) to eight of the dtype, in order: exact (every FP8 value is
// a fp16 and a bf16 value; NaN stays NaN). Two at a time to fp16 (one cvt on sm_89 and later), and
// through fp32 to bf16.
template <class T, bool kE5m2>
__device__ __forceinline__ uint4 fp8x8_to(uint2 b) {
  constexpr __nv_fp8_interpretation_t kFmt = kE5m2 ? __NV_E5M2 : __NV_E4M3;
  const uint32_t w[2] = {b.x, b.y};
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_fp8x2_storage_t pair = static_cast<__nv_fp8x2_storage_t>(w[i / 2] >> (16 * (i % 2)));
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, kFmt);
    if constexpr (sizeof(T) == 2 && Mma<T>::kDType == DType::kFp16) {
      out[i] = static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
    } else {
      const float2 f = __half22float2(__half2(h));
      out[i] = Mma<T>::pack(f.x, f.y);
    }
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// Four FP8 bytes b0..b3 of a register as two pairs of the dtype: lo = (b0, b2), hi = (b1, b3), low half
// first (the pairs ldmatrix of FP8 bytes as b16 units hands the FP8 kernels' fragments, flash_fp8.cuh).
// Exact for every finite code (the quantisation writes no NaN / inf; they would come out finite here).
// A byte moved into the dtype's sign / exponent / mantissa fields reads as its value times 2^-k (the
// exponent-bias difference), the format's subnormals included, and one multiply by 2^k (exact) restores
// it: a shift and two logic operations per pair and a multiply where bf16 has no conversion instruction.
// fp16: e5m2 is fp16's top byte (no arithmetic); e4m3 is one cvt on sm_89 and later.
template <class T, bool kE5m2>
__device__ __forceinline__ void fp8x4_split(uint32_t r, uint32_t& lo, uint32_t& hi) {
  constexpr bool kBf16 = Mma<T>::kDType == DType::kBf16;
  if constexpr (!kBf16 && kE5m2) {
    hi = r & 0xff00ff00u;
    lo = (r << 8) & 0xff00ff00u;
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (!kBf16 && !kE5m2) {
    const uint32_t p0 = __byte_perm(r, 0u, 0x4420), p1 = __byte_perm(r, 0u, 0x4431);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(lo) : "h"(static_cast<unsigned short>(p0)));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(hi) : "h"(static_cast<unsigned short>(p1)));
    return;
  }
#endif
  // the fields' shift and the power of two: bf16 (8 exponent bits, 7 mantissa bits) from e4m3 >> 4 and
  // 2^120, from e5m2 >> 3 and 2^112; fp16 (5, 10) from e4m3 >> 1 and 2^8
  constexpr int kShift = kBf16 ? (kE5m2 ? 3 : 4) : 1;
  constexpr float kPow = kBf16 ? (kE5m2 ? 0x1p112f : 0x1p120f) : 0x1p8f;
  const uint32_t h = ((r & 0x7f007f00u) >> kShift) | (r & 0x80008000u);
  const uint32_t r8 = r << 8;
  const uint32_t l = ((r8 & 0x7f007f00u) >> kShift) | (r8 & 0x80008000u);
  if constexpr (kBf16) {
    const __nv_bfloat162 f = __float2bfloat162_rn(kPow);
    const __nv_bfloat162 a = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&l), f);
    const __nv_bfloat162 b = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&h), f);
    lo = *reinterpret_cast<const uint32_t*>(&a);
    hi = *reinterpret_cast<const uint32_t*>(&b);
  } else {
    const __half2 f = __float2half2_rn(kPow);
    const __half2 a = __hmul2(*reinterpret_cast<const __half2*>(&l), f);
    const __half2 b = __hmul2(*reinterpret_cast<const __half2*>(&h), f);
    lo = *reinterpret_cast<const uint32_t*>(&a);
    hi = *reinterpret_cast<const uint32_t*>(&b);
  }
}

}  // namespace attnscope::cuda
