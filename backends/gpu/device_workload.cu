// Device-side input generation and plan metadata upload.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <mutex>

#include "attnscope/workload.h"
#include "device_gen.cuh"
#include "device_mla.h"
#include "device_result.h"
#include "device_workload.h"

namespace attnscope::cuda {

using namespace gen;

namespace {

__global__ void widen_kernel(const uint16_t* in, bool fp16, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = fp16 ? f16_bits_to_f32(in[i]) : bf16_bits_to_f32(in[i]);
}

__global__ void gen_q_kernel(GenParams p, void* q, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(i % p.dq);
    const int h = static_cast<int>((i / p.dq) % p.hq);
    const int64_t t = i / (static_cast<int64_t>(p.dq) * p.hq);
    const int r = find_request(p.q_indptr, p.num_requests + 1, t);
    const int qi = static_cast<int>(t - p.q_indptr[r]);
    const uint64_t idx = (static_cast<uint64_t>(qi + p.q_offset[r]) * p.hq + h) * p.dq + d;
    store(q, i, gen_value(p.seeds[r], TensorId::kQ, idx, p.mean, p.std, 1.0, p.dt), p.dt);
  }
}

__global__ void gen_kv_kernel(GenParams p, void* pool, int dim, TensorId tensor, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(i % dim);
    int64_t rest = i / dim;
    int h, slot;
    if (p.layout == KvLayout::kNHD) {
      h = static_cast<int>(rest % p.hk);
      rest /= p.hk;
      slot = static_cast<int>(rest % p.page_size);
      rest /= p.page_size;
    } else {
      slot = static_cast<int>(rest % p.page_size);
      rest /= p.page_size;
      h = static_cast<int>(rest % p.hk);
      rest /= p.hk;
    }
    const int page = static_cast<int>(rest);
    const int r = p.page_owner[page];
    const int k = r >= 0 ? p.page_pos[page] * p.page_size + slot : -1;
    float v;
    if (r >= 0 && k < p.kv_len[r]) {
      const double scale = tensor == TensorId::kK ? p.k_scale[d] : 1.0;
      int64_t pos;
      const uint64_t seed = key_stream(p, r, k, &pos);
      v = gen_value(seed, tensor, (static_cast<uint64_t>(pos) * p.hk + h) * dim + d, p.mean, p.std, scale, p.dt);
    } else {
      v = p.poison ? __int_as_float(0x7fc00000) : 0.0f;  // unused page or slot
    }
    store(pool, i, v, p.dt);
  }
}

__device__ inline float load(const void* base, int64_t i, DType t) {
  if (t == DType::kFp32) return static_cast<const float*>(base)[i];
  const uint16_t b = static_cast<const uint16_t*>(base)[i];
  return t == DType::kFp16 ? f16_bits_to_f32(b) : bf16_bits_to_f32(b);
}

// Pool row (page, slot, head) of row index i (layout order, as gen_kv_kernel), and whether a key
// of a request lives there.
__device__ inline bool pool_row(const GenParams& p, int64_t i, int* page, int* slot, int* h) {
  if (p.layout == KvLayout::kNHD) {
    *h = static_cast<int>(i % p.hk);
    *slot = static_cast<int>((i / p.hk) % p.page_size);
    *page = static_cast<int>(i / (static_cast<int64_t>(p.hk) * p.page_size));
  } else {
    *slot = static_cast<int>(i % p.page_size);
    *h = static_cast<int>((i / p.page_size) % p.hk);
    *page = static_cast<int>(i / (static_cast<int64_t>(p.hk) * p.page_size));
  }
  const int r = p.page_owner[*page];
  return r >= 0 && p.page_pos[*page] * p.page_size + *slot < p.kv_len[r];
}

// amax of each scale group over the real elements, as float bits: |x| >= 0 orders like its bits, so
// atomicMax on them is exact and order-independent. One thread per pool row; the tensor and head
// groups meet in shared memory first (at most kMaxHeads of them), token groups are one row each.
__global__ void amax_kernel(GenParams p, const void* pool, int dim, ScaleGranularity g, unsigned* amax, int64_t rows) {
  extern __shared__ unsigned sh_amax[];
  const int groups = g == ScaleGranularity::kTensor ? 1 : p.hk;
  if (g != ScaleGranularity::kToken)
    for (int i = threadIdx.x; i < groups; i += blockDim.x) sh_amax[i] = 0u;
  __syncthreads();
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int page, slot, h;
    if (!pool_row(p, row, &page, &slot, &h)) continue;
    float m = 0.0f;
    for (int d = 0; d < dim; ++d) m = fmaxf(m, fabsf(load(pool, row * dim + d, p.dt)));
    const int64_t si = scale_index(g, page, slot, h, p.page_size, p.hk);
    if (g == ScaleGranularity::kToken)
      amax[si] = __float_as_uint(m);  // the row is the group
    else
      atomicMax(&sh_amax[si], __float_as_uint(m));
  }
  __syncthreads();
  if (g != ScaleGranularity::kToken)
    for (int i = threadIdx.x; i < groups; i += blockDim.x)
      if (sh_amax[i]) atomicMax(&amax[i], sh_amax[i]);
}

// amax bits -> scale, in place (make_workload's tensor_scales): a token group no request uses gets
// NaN under poison_unused, else 1.
__global__ void scales_kernel(GenParams p, ScaleGranularity g, Fp8Format f, unsigned* s, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = scale_from_amax(__uint_as_float(s[i]), f);
    if (g == ScaleGranularity::kToken) {
      const int64_t row = i / p.hk;  // [pages * page_size, kv_heads]: slot-major whatever the layout
      const int page = static_cast<int>(row / p.page_size), slot = static_cast<int>(row % p.page_size);
      const int r = p.page_owner[page];
      const bool used = r >= 0 && p.page_pos[page] * p.page_size + slot < p.kv_len[r];
      if (!used && p.poison) v = __int_as_float(0x7fc00000);
    }
    s[i] = __float_as_uint(v);
  }
}

// x / scale to FP8 for each real element: the bytes to `q8`, their values back into the dtype pool
// (exact); unused elements get byte 0x7f (NaN) under poison_unused, else 0, and keep their pool value.
// __fdiv_rn: quantize_fp8's one IEEE division whatever the compiler's division flags.
__global__ void quantize_kernel(GenParams p, void* pool, uint8_t* q8, int dim, ScaleGranularity g, Fp8Format f,
                                const float* scales, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int page, slot, h;
    if (!pool_row(p, i / dim, &page, &slot, &h)) {
      q8[i] = p.poison ? 0x7f : 0;
      continue;
    }
    const float s = scales[scale_index(g, page, slot, h, p.page_size, p.hk)];
    const uint8_t b = f32_to_fp8_bits(f, __fdiv_rn(load(pool, i, p.dt), s));
    q8[i] = b;
    store(pool, i, fp8_bits_to_f32(f, b), p.dt);
  }
}

// amax over all of Q (every element is real).
__global__ void q_amax_kernel(const void* q, DType t, unsigned* amax, int64_t n) {
  float m = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(load(q, i, t)));
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (threadIdx.x % 32 == 0) atomicMax(amax, __float_as_uint(m));
}

__global__ void q_quantize_kernel(void* q, DType t, Fp8Format f, float scale, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(q, i, fp8_bits_to_f32(f, f32_to_fp8_bits(f, __fdiv_rn(load(q, i, t), scale))), t);
}

// The scales of one tensor (K or V) on the device: the given ones, or amax / max over each group.
DeviceBuffer device_scales(const CaseSpec& c, const GenParams& g, const DeviceBuffer& pool, int dim,
                           const std::vector<double>& given, int64_t n) {
  const ScaleGranularity gr = c.kv_cache.scales.granularity;
  if (!given.empty()) {
    std::vector<float> s(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) s[i] = scale_as_float(given[gr == ScaleGranularity::kTensor ? 0 : i]);
    return DeviceBuffer::from(s);
  }
  DeviceBuffer s(n * 4);
  check(cudaMemset(s.as<void>(), 0, n * 4), "cudaMemset");
  const int64_t rows = static_cast<int64_t>(g.num_pages) * g.page_size * g.hk;
  const size_t smem = gr == ScaleGranularity::kToken ? 0 : static_cast<size_t>(g.hk) * 4;
  amax_kernel<<<grid_for(rows), 256, smem>>>(g, pool.as<void>(), dim, gr, s.as<unsigned>(), rows);
  check_launch("amax_kernel", grid_for(rows), 256, smem, false);
  scales_kernel<<<grid_for(n), 256>>>(g, gr, *c.kv_cache.fp8, s.as<unsigned>(), n);
  check_launch("scales_kernel", grid_for(n), 256, 0, false);
  return s;
}

// The FP8 half of make_device_workload (make_workload's quantize_workload, bit for bit).
void quantize_device_workload(const CaseSpec& c, const GenParams& g, DeviceWorkload& w) {
  const Fp8Format f = *c.kv_cache.fp8;
  const ScaleGranularity gr = c.kv_cache.scales.granularity;
  w.fp8 = f;
  w.granularity = gr;
  const int64_t n = scale_count(gr, static_cast<int64_t>(g.num_pages) * g.page_size, g.hk);
  w.k_scale = device_scales(c, g, w.k, g.dq, c.kv_cache.scales.k, n);
  w.v_scale = device_scales(c, g, w.v, g.dv, c.kv_cache.scales.v, n);
  w.k8.alloc(std::max<int64_t>(w.k_elems, 1));
  w.v8.alloc(std::max<int64_t>(w.v_elems, 1));
  if (w.k_elems) {
    quantize_kernel<<<grid_for(w.k_elems), 256>>>(g, w.k.as<void>(), w.k8.as<uint8_t>(), g.dq, gr, f, w.k_scale.as<float>(),
                                                  w.k_elems);
    check_launch("quantize_kernel(K)", grid_for(w.k_elems), 256, 0, false);
    quantize_kernel<<<grid_for(w.v_elems), 256>>>(g, w.v.as<void>(), w.v8.as<uint8_t>(), g.dv, gr, f, w.v_scale.as<float>(),
                                                  w.v_elems);
    check_launch("quantize_kernel(V)", grid_for(w.v_elems), 256, 0, false);
  }
  if (!c.fp8_attention) return;
  if (c.fp8_attention->q_scale) {
    w.q_scale = scale_as_float(*c.fp8_attention->q_scale);
  } else {
    DeviceBuffer amax(4);
    check(cudaMemset(amax.as<void>(), 0, 4), "cudaMemset");
    if (w.q_elems) {
      q_amax_kernel<<<grid_for(w.q_elems), 256>>>(w.q.as<void>(), c.dtype, amax.as<unsigned>(), w.q_elems);
      check_launch("q_amax_kernel", grid_for(w.q_elems), 256, 0, false);
    }
    w.q_scale = scale_from_amax(bits_f32(amax.to_host<uint32_t>(1)[0]), f);
  }
  if (w.q_elems) {
    q_quantize_kernel<<<grid_for(w.q_elems), 256>>>(w.q.as<void>(), c.dtype, f, w.q_scale, w.q_elems);
    check_launch("q_quantize_kernel", grid_for(w.q_elems), 256, 0, false);
  }
}

}  // namespace

DeviceScoreMod upload_score_mod(const CaseSpec& c, const Expr& e) {
  DeviceScoreMod d;
  d.ops = DeviceBuffer::from(e.ops());
  d.n = static_cast<int>(e.ops().size());
  std::vector<ExprEnv> envs;
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r) {
    envs.push_back(expr_env(c, r, 0, 0, 0));
    envs.back().doc_starts = nullptr;  // a host pointer
  }
  d.envs = DeviceBuffer::from(envs);
  return d;
}

int64_t device_workload_bytes(const CaseSpec& c, const Plan& p) {
  const int64_t slots = static_cast<int64_t>(p.pages.num_pages) * p.pages.page_size * c.num_kv_heads;
  int64_t mask_bytes = 0;
  if (p.mask_store)
    for (const MaskBits& mb : *p.mask_store) mask_bytes += static_cast<int64_t>(mb.bits.size()) * 8 + mb.bounds.size() * 4;
  // FP8: the stored bytes beside the dtype pools, and K's and V's scales
  const int64_t fp8_bytes = c.fp8_kv()
                                ? slots * (c.head_dim_qk + c.head_dim_vo) +
                                      8 * scale_count(c.kv_cache.scales.granularity,
                                                      static_cast<int64_t>(p.pages.num_pages) * p.pages.page_size, c.num_kv_heads)
                                : 0;
  // MLA: generate_mla's float buffers (latent rows, W_uk and W_uv) while it runs
  const int64_t mla_bytes =
      c.is_mla() ? 4 * (static_cast<int64_t>(p.pages.num_pages) * p.pages.page_size * c.mla->latent_dim() +
                        static_cast<int64_t>(c.num_qo_heads) * (c.mla->qk_nope_dim + c.mla->v_head_dim) * c.mla->kv_lora_rank)
                 : 0;
  return dtype_bytes(c.dtype) * (c.total_q() * c.num_qo_heads * c.head_dim_qk + slots * (c.head_dim_qk + c.head_dim_vo)) +
         mask_bytes + fp8_bytes + mla_bytes;
}

void require_device_memory(int64_t need, const std::string& what) {
  size_t free_b = 0, total_b = 0;
  // keep 5% and 256 MiB for the runtime and other tenants
  auto usable_bytes = [&] {
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    return static_cast<int64_t>(free_b) - std::max<int64_t>(static_cast<int64_t>(total_b) / 20, int64_t{256} << 20);
  };
  int64_t usable = usable_bytes();
  // results' device copies only save time: a run that needs their memory gets it
  if (need > usable && drop_device_copies()) usable = usable_bytes();
  if (need > usable)
    throw CudaError(what + " needs " + std::to_string(need >> 20) + " MiB of device memory, " +
                    std::to_string(std::max<int64_t>(usable, 0) >> 20) + " MiB usable (" + std::to_string(free_b >> 20) +
                    " MiB free of " + std::to_string(total_b >> 20) + ")");
}

// The plan's per-request metadata on the device (w.view points into it).
static void upload_metadata(const CaseSpec& c, const Plan& p, DeviceWorkload& w) {
  const int R = static_cast<int>(c.requests.size());
  const auto& pt = p.pages;

  std::vector<int64_t> q_indptr(R + 1, 0);
  std::vector<int> docs_flat, doc_off(R);
  for (int r = 0; r < R; ++r) {
    q_indptr[r + 1] = q_indptr[r] + c.requests[r].q_len;
    doc_off[r] = static_cast<int>(docs_flat.size());
    for (int d : c.requests[r].doc_starts) docs_flat.push_back(d);
  }
  w.total_q = q_indptr[R];
  w.q_indptr = DeviceBuffer::from(q_indptr);
  w.kv_indptr = DeviceBuffer::from(pt.indptr);
  w.kv_indices = DeviceBuffer::from(pt.indices.empty() ? std::vector<int>{0} : pt.indices);
  w.docs = DeviceBuffer::from(docs_flat.empty() ? std::vector<int>{0} : docs_flat);
  std::vector<RowMask> masks = p.masks;
  for (int r = 0; r < R; ++r)
    if (masks[r].doc_starts) masks[r].doc_starts = w.docs.as<int>() + doc_off[r];
  if (p.mask_store) {  // a mask_mod's bits and row bounds, one flat buffer each
    std::vector<uint64_t> bits;
    std::vector<int> bounds;
    std::vector<size_t> bits_off(R), bounds_off(R);
    for (int r = 0; r < R; ++r) {
      const MaskBits& mb = (*p.mask_store)[r];
      bits_off[r] = bits.size();
      bounds_off[r] = bounds.size();
      bits.insert(bits.end(), mb.bits.begin(), mb.bits.end());
      bounds.insert(bounds.end(), mb.bounds.begin(), mb.bounds.end());
    }
    w.mask_bits = DeviceBuffer::from(bits);
    w.mask_bounds = DeviceBuffer::from(bounds);
    for (int r = 0; r < R; ++r) {
      masks[r].bits = w.mask_bits.as<uint64_t>() + bits_off[r];
      masks[r].bounds = w.mask_bounds.as<int>() + bounds_off[r];
    }
  }
  w.masks = DeviceBuffer::from(masks);
  int shift = -1;
  for (int b = 0; b < 31; ++b)
    if ((1 << b) == pt.page_size) shift = b;
  w.view = DevicePlanView{
      w.masks.as<RowMask>(), w.kv_indptr.as<int>(), w.kv_indices.as<int>(), w.q_indptr.as<int64_t>(), R, pt.page_size, shift,
      c.kv_cache.layout};
}

// A /sparse case's gathered form (sparse_gather.h): the original case's inputs, shared under the key,
// read through the gathered plan's metadata (its page table holds slots of the same pool).
static std::shared_ptr<const DeviceWorkload> gathered_device_workload(const CaseSpec& c, const Plan& p, const RunOptions& opt) {
  RunOptions o = opt;
  o.inputs_case = nullptr;
  o.inputs_plan = nullptr;
  std::shared_ptr<const DeviceWorkload> src = device_workload(*opt.inputs_case, *opt.inputs_plan, o);
  auto w = std::make_shared<DeviceWorkload>();
  upload_metadata(c, p, *w);
  if (w->total_q != src->total_q) throw CudaError("a gathered /sparse run with another number of query rows than its case");
  w->dtype = src->dtype;
  w->q = DeviceBuffer::borrow(src->q);
  w->k = DeviceBuffer::borrow(src->k);
  w->v = DeviceBuffer::borrow(src->v);
  w->q_elems = src->q_elems, w->k_elems = src->k_elems, w->v_elems = src->v_elems;
  w->fp8 = src->fp8;
  w->granularity = src->granularity;
  w->k8 = DeviceBuffer::borrow(src->k8);
  w->v8 = DeviceBuffer::borrow(src->v8);
  w->k_scale = DeviceBuffer::borrow(src->k_scale);
  w->v_scale = DeviceBuffer::borrow(src->v_scale);
  w->q_scale = src->q_scale;
  w->inputs = std::move(src);
  return w;
}

DeviceWorkload make_device_workload(const CaseSpec& c, const Plan& p) {
  require_device_memory(device_workload_bytes(c, p), "the inputs");
  DeviceWorkload w;
  w.dtype = c.dtype;
  const int R = static_cast<int>(c.requests.size());
  const auto& pt = p.pages;
  upload_metadata(c, p, w);
  std::vector<int> kv_len(R), q_off(R);
  std::vector<uint64_t> seeds(R);
  for (int r = 0; r < R; ++r) {
    kv_len[r] = c.requests[r].kv_len;
    q_off[r] = c.requests[r].q_offset;
    seeds[r] = c.request_seed(r);
  }

  // generation
  std::vector<int> owner(pt.num_pages, -1), pos(pt.num_pages, 0);
  for (int r = 0; r < R; ++r)
    for (int i = pt.indptr[r]; i < pt.indptr[r + 1]; ++i) {
      owner[pt.indices[i]] = r;
      pos[pt.indices[i]] = i - pt.indptr[r];
    }
  std::vector<double> k_scale(c.head_dim_qk, 1.0);
  for (int ch : c.data.outlier_channels) k_scale[ch] = c.data.outlier_scale;
  DeviceBuffer d_seeds = DeviceBuffer::from(seeds), d_owner = DeviceBuffer::from(owner), d_pos = DeviceBuffer::from(pos),
               d_kv = DeviceBuffer::from(kv_len), d_scale = DeviceBuffer::from(k_scale), d_qoff = DeviceBuffer::from(q_off);
  GenParams g{d_seeds.as<uint64_t>(),
              w.q_indptr.as<int64_t>(),
              d_owner.as<int>(),
              d_pos.as<int>(),
              d_kv.as<int>(),
              d_qoff.as<int>(),
              d_scale.as<double>(),
              R,
              c.num_qo_heads,
              c.num_kv_heads,
              c.head_dim_qk,
              c.head_dim_vo,
              pt.page_size,
              pt.num_pages,
              c.kv_cache.layout,
              c.data.mean,
              c.data.std,
              c.dtype,
              c.kv_cache.poison_unused,
              c.keys(),
              c.shared_prefix_seed()};
  const int eb = dtype_bytes(c.dtype);
  w.q_elems = w.total_q * c.num_qo_heads * c.head_dim_qk;
  const int64_t slots = static_cast<int64_t>(pt.num_pages) * pt.page_size * c.num_kv_heads;
  w.k_elems = slots * c.head_dim_qk;
  w.v_elems = slots * c.head_dim_vo;
  w.q.alloc(w.q_elems * eb);
  w.k.alloc(std::max<int64_t>(w.k_elems, 1) * eb);
  w.v.alloc(std::max<int64_t>(w.v_elems, 1) * eb);
  if (c.is_mla()) {
    generate_mla(c, g, w);
  } else if (w.q_elems) {
    gen_q_kernel<<<grid_for(w.q_elems), 256>>>(g, w.q.as<void>(), w.q_elems);
    check_launch("gen_q_kernel", grid_for(w.q_elems), 256, 0, false);
  }
  if (w.k_elems && !c.is_mla()) {
    gen_kv_kernel<<<grid_for(w.k_elems), 256>>>(g, w.k.as<void>(), c.head_dim_qk, TensorId::kK, w.k_elems);
    check_launch("gen_kv_kernel(K)", grid_for(w.k_elems), 256, 0, false);
    gen_kv_kernel<<<grid_for(w.v_elems), 256>>>(g, w.v.as<void>(), c.head_dim_vo, TensorId::kV, w.v_elems);
    check_launch("gen_kv_kernel(V)", grid_for(w.v_elems), 256, 0, false);
  }
  if (c.fp8_kv()) quantize_device_workload(c, g, w);
  check(cudaDeviceSynchronize(), "input generation");
  return w;
}

std::vector<float> download_as_float(const DeviceBuffer& b, int64_t n, DType t) {
  if (t == DType::kFp32 || n == 0) return b.to_host<float>(n);
  // widened on the device by the host's own functions (types.h): the same bits, and one copy of
  // floats instead of a copy of halves and a loop on one host core
  DeviceBuffer f(static_cast<size_t>(n) * sizeof(float));
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535 * 4)));
  widen_kernel<<<grid, 256>>>(b.as<uint16_t>(), t == DType::kFp16, n, f.as<float>());
  check(cudaGetLastError(), "widen_kernel launch");
  return f.to_host<float>(n);
}

std::shared_ptr<const DeviceWorkload> device_workload(const CaseSpec& c, const Plan& p, const RunOptions& opt) {
  if (opt.inputs_case) return gathered_device_workload(c, p, opt);
  if (opt.inputs_key.empty()) return std::make_shared<const DeviceWorkload>(make_device_workload(c, p));
  static std::mutex mu;
  static std::string key;
  static std::shared_ptr<const DeviceWorkload> kept;
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  const std::string k = std::to_string(dev) + ' ' + opt.inputs_key;
  // held while generating: a second backend of the same run waits for these inputs, never makes its own
  const std::lock_guard<std::mutex> lock(mu);
  if (kept && key == k) return kept;
  kept.reset();  // the last key's memory first
  kept = std::make_shared<const DeviceWorkload>(make_device_workload(c, p));
  key = k;
  return kept;
}

}  // namespace attnscope::cuda
