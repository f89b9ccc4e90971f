// Host tensors of a case, from the counter-based generator.
#include "attnscope/workload.h"

#include <cmath>
#include <limits>

namespace attnscope {

int64_t workload_bytes(const CaseSpec& c, const PageTable& pt) {
  const int64_t slots = static_cast<int64_t>(pt.num_pages) * pt.page_size * c.num_kv_heads;
  return 4 * (c.total_q() * c.num_qo_heads * c.head_dim_qk + slots * (c.head_dim_qk + c.head_dim_vo));
}

Workload make_workload(const CaseSpec& c, const PageTable& pt) {
  Workload w;
  const int R = static_cast<int>(c.requests.size());
  const int Hq = c.num_qo_heads, Hk = c.num_kv_heads, Dq = c.head_dim_qk, Dv = c.head_dim_vo, ps = pt.page_size;
  w.q_indptr.assign(R + 1, 0);
  for (int r = 0; r < R; ++r) w.q_indptr[r + 1] = w.q_indptr[r] + c.requests[r].q_len;
  w.q.resize(static_cast<size_t>(w.q_indptr[R]) * Hq * Dq);

  const float fill = c.kv_cache.poison_unused ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
  const size_t slots = static_cast<size_t>(pt.num_pages) * ps * Hk;
  w.k_pool.assign(slots * Dq, fill);
  w.v_pool.assign(slots * Dv, fill);

  std::vector<double> k_scale(Dq, 1.0);
  for (int ch : c.data.outlier_channels) k_scale[ch] = c.data.outlier_scale;

  for (int r = 0; r < R; ++r) {
    const uint64_t seed = c.request_seed(r);
    const auto& rq = c.requests[r];
    float* q = w.q.data() + w.q_indptr[r] * Hq * Dq;
    for (int t = 0; t < rq.q_len; ++t)
      for (int h = 0; h < Hq; ++h)
        for (int d = 0; d < Dq; ++d)
          q[(static_cast<size_t>(t) * Hq + h) * Dq + d] =
              gen_value(seed, TensorId::kQ, q_index(c, t, h, d), c.data.mean, c.data.std, 1.0, c.dtype);
    for (int k = 0; k < rq.kv_len; ++k) {
      const int page = pt.page_of(r, k), slot = k % ps;
      for (int h = 0; h < Hk; ++h) {
        for (int d = 0; d < Dq; ++d)
          w.k_pool[kv_offset(c.kv_cache.layout, page, slot, h, d, ps, Hk, Dq)] =
              gen_value(seed, TensorId::kK, kv_index(k, h, d, Hk, Dq), c.data.mean, c.data.std, k_scale[d], c.dtype);
        for (int d = 0; d < Dv; ++d)
          w.v_pool[kv_offset(c.kv_cache.layout, page, slot, h, d, ps, Hk, Dv)] =
              gen_value(seed, TensorId::kV, kv_index(k, h, d, Hk, Dv), c.data.mean, c.data.std, 1.0, c.dtype);
      }
    }
  }
  return w;
}

}  // namespace attnscope
