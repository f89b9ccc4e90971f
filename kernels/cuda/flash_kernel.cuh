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
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ inline void ldmatrix_x4_trans(uint32_t* r, const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// Shared-memory row stride in elements: +8 halves (16 bytes) staggers rows across banks for
// ldmatrix and keeps every row 16-byte aligned.
template <int D>
constexpr int kStride = D + 8;

template <int D, class T, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) flash_kernel(const FlashParams p) {
  constexpr int kRows = WARPS * 16;
  constexpr int kThreads = WARPS * 32;
  constexpr int S = kStride<D>;
  constexpr int kVec = D / 8;  // 16-byte vectors per row
  if (static_cast<int>(blockIdx.x) >= p.num_items) return;  // CUDA-graph padding CTA

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* qs = reinterpret_cast<T*>(smem_raw);
  T* ks = qs + kRows * S;
  T* vs = ks + kKvTile * S;
  __shared__ int s_lo, s_hi;

  const WorkItem it = p.items[blockIdx.x];
  const WorkUnit un = p.units[it.unit];
  const int kvh = blockIdx.z;
  const int G = p.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const RowMask m = p.view.masks[un.request];
  const int* pages = p.view.kv_indices + p.view.kv_indptr[un.request];
  const int ps = p.view.page_size;
  const int64_t tok0 = p.unit_tok[it.unit];

  // Q rows -> shared memory (invalid rows zero)
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

  // this thread's two rows: g and g + 8 of its warp's 16
  const int g = lane / 4, t4 = lane % 4;
  int lo[2], hi[2], qa[2], head[2];
  bool valid[2];
  float slope[2];
  if (tid == 0) {
    s_lo = INT_MAX;
    s_hi = INT_MIN;
  }
  __syncthreads();
  for (int i = 0; i < 2; ++i) {
    const int row = it.row_begin + warp * 16 + g + 8 * i;
    valid[i] = row < it.row_end;
    const int q_local = valid[i] ? row / G : 0;
    head[i] = kvh * G + (valid[i] ? row % G : 0);
    qa[i] = q_abs_of(m, un.q_begin + q_local);
    visible_range(m, qa[i], &lo[i], &hi[i]);
    lo[i] = max(lo[i], it.kv_begin);
    hi[i] = min(hi[i], it.kv_end);
    if (!valid[i] || hi[i] <= lo[i]) {
      lo[i] = 0;
      hi[i] = 0;
    } else {
      atomicMin(&s_lo, lo[i]);
      atomicMax(&s_hi, hi[i]);
    }
    slope[i] = p.alibi ? p.slopes[head[i]] : 0.f;
  }
  __syncthreads();
  const int kv_lo = s_lo, kv_hi = s_hi;

  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float mx[2] = {-INFINITY, -INFINITY}, den[2] = {0.f, 0.f};
  const float log2e = 1.4426950408889634f;

  // KV tiles start at the item's first key, as in cpu.tiled; tiles no row sees are skipped
  const int first_tile = kv_lo < kv_hi ? it.kv_begin + ((kv_lo - it.kv_begin) / kKvTile) * kKvTile : kv_hi;
  for (int k0 = first_tile; k0 < kv_hi; k0 += kKvTile) {
    __syncthreads();  // previous tile fully consumed
    for (int i = tid; i < kKvTile * kVec; i += kThreads) {
      const int r = i / kVec, c = i % kVec;
      const int key = k0 + r;
      uint4 kval = make_uint4(0, 0, 0, 0), vval = make_uint4(0, 0, 0, 0);
      if (key < kv_hi) {  // keys past the range stay zero: 0 * P never meets a poisoned slot
        const int64_t off = kv_offset(p.view.layout, pages[key / ps], key % ps, kvh, c * 8, ps, p.hk, D);
        kval = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.k) + off);
        vval = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.v) + off);
      }
      *reinterpret_cast<uint4*>(ks + r * S + c * 8) = kval;
      *reinterpret_cast<uint4*>(vs + r * S + c * 8) = vval;
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows x 64 keys
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, qs + (warp * 16 + (lane % 16)) * S + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        uint32_t b[4];
        const int mi = lane / 8;
        ldmatrix_x4(b, ks + (jj * 16 + (mi / 2) * 8 + lane % 8) * S + kk * 16 + (mi % 2) * 8);
        Mma<T>::run(s[2 * jj], a, b[0], b[1]);
        Mma<T>::run(s[2 * jj + 1], a, b[2], b[3]);
      }
    }

    // logits: scale, soft-cap, ALiBi, mask; base 2
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        const int key = k0 + 8 * j + 2 * t4 + (e % 2);
        float x = -INFINITY;
        if (key >= lo[i] && key < hi[i]) {
          x = s[j][e] * p.sm_scale;
          if (p.soft_cap > 0.f) x = p.soft_cap * tanhf(x / p.soft_cap);
          if (p.alibi) x += slope[i] * static_cast<float>(key - qa[i]);
          x *= log2e;
        }
        s[j][e] = x;
        tile_max[i] = fmaxf(tile_max[i], x);
      }
    float corr[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      const float m_new = fmaxf(mx[i], tile_max[i]);
      // nothing visible yet: keep the state (exp2(-inf - -inf) would be NaN)
      corr[i] = m_new == -INFINITY ? 1.f : exp2f(mx[i] - m_new);
      mx[i] = m_new;
      den[i] *= corr[i];
    }
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      o[j][0] *= corr[0];
      o[j][1] *= corr[0];
      o[j][2] *= corr[1];
      o[j][3] *= corr[1];
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        const float pv = mx[i] == -INFINITY ? 0.f : exp2f(s[j][e] - mx[i]);
        s[j][e] = pv;
        den[i] += pv;  // the row sum uses fp32 P, as FA2 does
      }

    // O += P V: P (rounded to the dtype) from the S accumulators, V through ldmatrix.trans
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[4];
      a[0] = Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]);
      a[1] = Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]);
      a[2] = Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int nn = 0; nn < D / 16; ++nn) {
        uint32_t b[4];
        const int mi = lane / 8;
        ldmatrix_x4_trans(b, vs + (kk * 16 + (mi % 2) * 8 + lane % 8) * S + nn * 16 + (mi / 2) * 8);
        Mma<T>::run(o[2 * nn], a, b[0], b[1]);
        Mma<T>::run(o[2 * nn + 1], a, b[2], b[3]);
      }
    }
  }

  // finish: the quad's partial row sums, then O / den and LSE
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    den[i] += __shfl_xor_sync(0xffffffffu, den[i], 1);
    den[i] += __shfl_xor_sync(0xffffffffu, den[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!valid[i]) continue;
    const int row = it.row_begin + warp * 16 + g + 8 * i;
    const int q_local = row / G;
    const bool empty = den[i] == 0.f;
    const float inv = empty ? 0.f : 1.f / den[i];
    const float lse2 = empty ? -INFINITY : mx[i] + log2f(den[i]);
    if (p.split) {
      const int64_t pr = p.o_indptr[it.unit] + static_cast<int64_t>(q_local) * p.unit_chunks[it.unit] + it.kv_chunk;
      float* dst = p.part_o + (pr * p.hq + head[i]) * D;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        float a = o[j][2 * i] * inv, b = o[j][2 * i + 1] * inv;
        if (p.round_partials) {
          a = round_to(Mma<T>::kDType, a);
          b = round_to(Mma<T>::kDType, b);
        }
        *reinterpret_cast<float2*>(dst + 8 * j + 2 * t4) = make_float2(a, b);
      }
      if (t4 == 0) p.part_lse[pr * p.hq + head[i]] = lse2;
    } else {
      const int64_t token = tok0 + q_local;
      T* dst = static_cast<T*>(p.o) + (token * p.hq + head[i]) * D;
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<uint32_t*>(dst + 8 * j + 2 * t4) = Mma<T>::pack(o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
      if (t4 == 0) p.lse[token * p.hq + head[i]] = lse2 == -INFINITY ? -INFINITY : lse2 * 0.6931471805599453f;
    }
  }
}

template <int D, class T>
void launch_flash(const FlashParams& p, int warps, dim3 grid, cudaStream_t stream) {
  const size_t smem = flash_smem_bytes(D, warps);
  auto go = [&](auto kernel, int threads) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), "cudaFuncSetAttribute");
    kernel<<<grid, threads, smem, stream>>>(p);
  };
  switch (warps) {
    case 1: go(flash_kernel<D, T, 1>, 32); break;
    case 4: go(flash_kernel<D, T, 4>, 128); break;
    default:
      if constexpr (D < 256) go(flash_kernel<D, T, 8>, 256);
      else throw CudaError("cuda.flash: head_dim 256 has no 128-row tile");
  }
}

}  // namespace attnscope::cuda
