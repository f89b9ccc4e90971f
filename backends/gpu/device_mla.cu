// MLA's inputs on the device (docs/conventions.md section 13), bit for bit as model/src/mla.cpp: the
// latent rows and the up-projections are generated into float buffers first, then the pools and Q.
#include "attnscope/mla.h"
#include "device_gen.cuh"
#include "device_mla.h"

namespace attnscope::cuda {

using namespace gen;

namespace {

// Request and key of pool row `row` (page-major: row = page * page_size + slot), or false if unused.
__device__ inline bool slot_key(const GenParams& p, int64_t row, int* r, int* k) {
  const int page = static_cast<int>(row / p.page_size), slot = static_cast<int>(row % p.page_size);
  *r = p.page_owner[page];
  *k = *r >= 0 ? p.page_pos[page] * p.page_size + slot : -1;
  return *r >= 0 && *k < p.kv_len[*r];
}

// [num_pages * page_size][latent]: every used slot's latent row (unused ones 0, never read).
__global__ void latent_kernel(GenParams p, MlaGen g, float* lat, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int r, k;
    int64_t pos = 0;
    const int64_t row = i / g.latent();
    const bool used = slot_key(p, row, &r, &k);
    const uint64_t seed = used ? key_stream(p, r, k, &pos) : 0;
    lat[i] = used ? mla_latent(g, seed, pos, static_cast<int>(i % g.latent())) : 0.0f;
  }
}

__global__ void weights_kernel(MlaGen g, TensorId t, int rows, float* w, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(i % g.rank);
    const int64_t hn = i / g.rank;
    w[i] = mla_weight(g, t, static_cast<int>(hn / rows), static_cast<int>(hn % rows), d);
  }
}

// Q [tokens][heads][head_dim_qk]: the generator's row (non-absorbed) or [W_uk^T q_nope ; q_pe].
__global__ void q_kernel(GenParams p, MlaGen g, const float* wuk, bool absorbed, void* q, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(i % p.dq);
    const int h = static_cast<int>((i / p.dq) % p.hq);
    const int64_t t = i / (static_cast<int64_t>(p.dq) * p.hq);
    const int r = find_request(p.q_indptr, p.num_requests + 1, t);
    const uint64_t base = (static_cast<uint64_t>(t - p.q_indptr[r] + p.q_offset[r]) * p.hq + h) * g.q_dim();
    const uint64_t seed = p.seeds[r];
    auto qg = [&](int j) { return gen_value(seed, TensorId::kQ, base + j, g.mean, g.std, 1.0, g.dt); };
    float v;
    if (!absorbed)
      v = qg(d);
    else if (d >= g.rank)
      v = qg(g.nope + d - g.rank);
    else
      v = mla_dot_f(
          g, g.nope, [&](int j) { return wuk[(static_cast<int64_t>(h) * g.nope + j) * g.rank + d]; }, qg);
    store(q, i, v, p.dt);
  }
}

// A K or V pool in the case's layout: the latent (absorbed) or its up-projection (non-absorbed).
__global__ void pool_kernel(GenParams p, MlaGen g, const float* lat, const float* w, int dim, bool is_v, bool absorbed,
                            void* pool, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int j = static_cast<int>(i % dim);
    const int64_t rest = i / dim;
    int h, row;  // row = page * page_size + slot
    if (p.layout == KvLayout::kNHD) {
      h = static_cast<int>(rest % p.hk);
      row = static_cast<int>(rest / p.hk);
    } else {
      const int slot = static_cast<int>(rest % p.page_size);
      h = static_cast<int>((rest / p.page_size) % p.hk);
      row = static_cast<int>(rest / (static_cast<int64_t>(p.page_size) * p.hk)) * p.page_size + slot;
    }
    int r, k;
    float v;
    const float* lr = lat + static_cast<int64_t>(row) * g.latent();
    if (!slot_key(p, row, &r, &k))
      v = p.poison ? __int_as_float(0x7fc00000) : 0.0f;
    else if (absorbed)
      v = lr[j];
    else if (!is_v && j >= g.nope)
      v = lr[g.rank + j - g.nope];
    else
      v = mla_dot(g, g.rank, w + (static_cast<int64_t>(h) * (is_v ? g.vdim : g.nope) + j) * g.rank, 1, lr, 1);
    store(pool, i, v, p.dt);
  }
}

}  // namespace

void generate_mla(const CaseSpec& c, const GenParams& p, DeviceWorkload& w) {
  const MlaGen g = mla_gen(c);
  const bool absorbed = c.mla->absorbed;
  const int64_t rows = static_cast<int64_t>(p.num_pages) * p.page_size;
  DeviceBuffer lat(std::max<int64_t>(rows * g.latent(), 1) * 4);
  const int64_t nuk = static_cast<int64_t>(g.heads) * g.nope * g.rank, nuv = static_cast<int64_t>(g.heads) * g.vdim * g.rank;
  DeviceBuffer wuk(nuk * 4), wuv(absorbed ? 4 : nuv * 4);
  weights_kernel<<<grid_for(nuk), 256>>>(g, TensorId::kWuk, g.nope, wuk.as<float>(), nuk);
  check_launch("mla weights_kernel(W_uk)", grid_for(nuk), 256, 0, false);
  if (!absorbed) {
    weights_kernel<<<grid_for(nuv), 256>>>(g, TensorId::kWuv, g.vdim, wuv.as<float>(), nuv);
    check_launch("mla weights_kernel(W_uv)", grid_for(nuv), 256, 0, false);
  }
  if (w.q_elems) {
    q_kernel<<<grid_for(w.q_elems), 256>>>(p, g, wuk.as<float>(), absorbed, w.q.as<void>(), w.q_elems);
    check_launch("mla q_kernel", grid_for(w.q_elems), 256, 0, false);
  }
  if (!w.k_elems) return;
  latent_kernel<<<grid_for(rows * g.latent()), 256>>>(p, g, lat.as<float>(), rows * g.latent());
  check_launch("mla latent_kernel", grid_for(rows * g.latent()), 256, 0, false);
  pool_kernel<<<grid_for(w.k_elems), 256>>>(p, g, lat.as<float>(), wuk.as<float>(), p.dq, false, absorbed, w.k.as<void>(),
                                            w.k_elems);
  check_launch("mla pool_kernel(K)", grid_for(w.k_elems), 256, 0, false);
  pool_kernel<<<grid_for(w.v_elems), 256>>>(p, g, lat.as<float>(), wuv.as<float>(), p.dv, true, absorbed, w.v.as<void>(),
                                            w.v_elems);
  check_launch("mla pool_kernel(V)", grid_for(w.v_elems), 256, 0, false);
  check(cudaDeviceSynchronize(), "MLA input generation");  // the buffers above are freed on return
}

}  // namespace attnscope::cuda
