// Host tensors of a case, from the counter-based generator.
#include "attnscope/workload.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attnscope/fp8.h"
#include "mla_workload.h"
#include "on_cores.h"

namespace attnscope {

int64_t workload_bytes(const CaseSpec& c, const PageTable& pt) {
  const int64_t slots = static_cast<int64_t>(pt.num_pages) * pt.page_size * c.num_kv_heads;
  const int64_t copies = c.fp8_kv() ? 2 : 1;  // FP8 keeps the originals beside the stored values
  return 4 * copies * (c.total_q() * c.num_qo_heads * c.head_dim_qk + slots * (c.head_dim_qk + c.head_dim_vo)) +
         (c.fp8_kv() ? 8 * slots : 0);
}

namespace {

// Scales of one tensor: the given ones, or amax / the format's max over each group's real elements.
std::vector<float> tensor_scales(const CaseSpec& c, const PageTable& pt, const std::vector<float>& pool, int dim,
                                 const std::vector<double>& given, bool poison) {
  const auto g = c.kv_cache.scales.granularity;
  const Fp8Format f = *c.kv_cache.fp8;
  const int Hk = c.num_kv_heads, ps = pt.page_size;
  const int64_t n = scale_count(g, static_cast<int64_t>(pt.num_pages) * ps, Hk);
  if (!given.empty()) {
    std::vector<float> s(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) s[i] = scale_as_float(given[g == ScaleGranularity::kTensor ? 0 : i]);
    return s;
  }
  std::vector<float> amax(static_cast<size_t>(n), 0.0f);
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
    for (int k = 0; k < c.requests[r].kv_len; ++k) {
      const int page = pt.page_of(r, k), slot = k % ps;
      for (int h = 0; h < Hk; ++h) {
        float& m = amax[scale_index(g, page, slot, h, ps, Hk)];
        const float* x = pool.data() + kv_offset(c.kv_cache.layout, page, slot, h, 0, ps, Hk, dim);
        for (int d = 0; d < dim; ++d) m = std::max(m, std::fabs(x[d]));
      }
    }
  std::vector<float> s(static_cast<size_t>(n));
  // token scales of slots no request uses are never read: NaN under poison_unused, as the pool
  for (int64_t i = 0; i < n; ++i)
    s[i] = g == ScaleGranularity::kToken && amax[i] == 0.0f && poison ? std::numeric_limits<float>::quiet_NaN()
                                                                      : scale_from_amax(amax[i], f);
  if (g == ScaleGranularity::kToken) {  // a used slot whose values are all 0 still gets scale 1
    for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
      for (int k = 0; k < c.requests[r].kv_len; ++k)
        for (int h = 0; h < Hk; ++h) {
          const int64_t i = scale_index(g, pt.page_of(r, k), k % ps, h, ps, Hk);
          if (std::isnan(s[i])) s[i] = 1.0f;
        }
  }
  return s;
}

// Replaces the real elements of `pool` by their FP8 values (x / scale, saturating, RNE).
void quantize_pool(const CaseSpec& c, const PageTable& pt, std::vector<float>& pool, int dim, const std::vector<float>& scales) {
  const auto g = c.kv_cache.scales.granularity;
  const Fp8Format f = *c.kv_cache.fp8;
  const int Hk = c.num_kv_heads, ps = pt.page_size;
  const std::vector<KeyBlock> blocks = key_blocks(c, 256, false);  // each writes its own slots
  on_cores(blocks.size(), [&](size_t i) {
    const KeyBlock b = blocks[i];
    for (int k = b.begin; k < b.end; ++k) {
      const int page = pt.page_of(b.r, k), slot = k % ps;
      for (int h = 0; h < Hk; ++h) {
        const float s = scales[scale_index(g, page, slot, h, ps, Hk)];
        float* x = pool.data() + kv_offset(c.kv_cache.layout, page, slot, h, 0, ps, Hk, dim);
        for (int d = 0; d < dim; ++d) x[d] = fp8_value(f, x[d] / s);  // quantize_fp8's division, then its value
      }
    }
  });
}

void quantize_workload(const CaseSpec& c, const PageTable& pt, Workload& w) {
  const bool poison = c.kv_cache.poison_unused;
  w.k_orig = w.k_pool;
  w.v_orig = w.v_pool;
  w.k_scale = tensor_scales(c, pt, w.k_pool, c.head_dim_qk, c.kv_cache.scales.k, poison);
  w.v_scale = tensor_scales(c, pt, w.v_pool, c.head_dim_vo, c.kv_cache.scales.v, poison);
  quantize_pool(c, pt, w.k_pool, c.head_dim_qk, w.k_scale);
  quantize_pool(c, pt, w.v_pool, c.head_dim_vo, w.v_scale);
  if (c.fp8_attention) {
    const Fp8Format f = *c.kv_cache.fp8;
    w.q_orig = w.q;
    float amax = 0.0f;
    for (float x : w.q) amax = std::max(amax, std::fabs(x));
    w.q_scale = c.fp8_attention->q_scale ? scale_as_float(*c.fp8_attention->q_scale) : scale_from_amax(amax, f);
    for (float& x : w.q) x = fp8_value(f, x / w.q_scale);  // quantize_fp8, then its value
  }
}

}  // namespace

Workload original_inputs(const Workload& w) {
  Workload o;
  o.q_indptr = w.q_indptr;
  o.q = w.q_orig.empty() ? w.q : w.q_orig;
  o.k_pool = w.k_orig.empty() ? w.k_pool : w.k_orig;
  o.v_pool = w.v_orig.empty() ? w.v_pool : w.v_orig;
  return o;
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

  if (c.is_mla()) {  // derived tensors (docs/conventions.md section 13); MLA has no FP8 or outliers
    make_mla_workload(c, pt, w);
    return w;
  }
  std::vector<double> k_scale(Dq, 1.0);
  for (int ch : c.data.outlier_channels) k_scale[ch] = c.data.outlier_scale;

  // every element is a pure function of its index (the counter-based generator), so requests and
  // blocks of keys are generated on all cores, each writing its own elements: the same bits
  const std::vector<KeyBlock> blocks = key_blocks(c, 256, true);
  auto generate = [&](const KeyBlock& b) {
    const uint64_t seed = c.request_seed(b.r);  // Q's stream; a key's is c.key_seed (cascade)
    if (b.begin < 0) {
      float* q = w.q.data() + w.q_indptr[b.r] * Hq * Dq;
      for (int t = 0; t < c.requests[b.r].q_len; ++t)
        for (int h = 0; h < Hq; ++h) {
          float* row = q + (static_cast<size_t>(t) * Hq + h) * Dq;
          const uint64_t i0 = q_index(c, b.r, t, h, 0);
          for (int d = 0; d < Dq; ++d) row[d] = gen_value(seed, TensorId::kQ, i0 + d, c.data.mean, c.data.std, 1.0, c.dtype);
        }
      return;
    }
    for (int k = b.begin; k < b.end; ++k) {
      const int page = pt.page_of(b.r, k), slot = k % ps;
      const int64_t pos = c.key_source.position(k);  // the key's place in the unpartitioned case
      const uint64_t ks = c.key_seed(b.r, pos);
      const int kp = static_cast<int>(pos);
      for (int h = 0; h < Hk; ++h) {  // a row's elements are consecutive in the pool and in the stream
        float* kr = w.k_pool.data() + kv_offset(c.kv_cache.layout, page, slot, h, 0, ps, Hk, Dq);
        float* vr = w.v_pool.data() + kv_offset(c.kv_cache.layout, page, slot, h, 0, ps, Hk, Dv);
        const uint64_t k0 = kv_index(kp, h, 0, Hk, Dq), v0 = kv_index(kp, h, 0, Hk, Dv);
        for (int d = 0; d < Dq; ++d) kr[d] = gen_value(ks, TensorId::kK, k0 + d, c.data.mean, c.data.std, k_scale[d], c.dtype);
        for (int d = 0; d < Dv; ++d) vr[d] = gen_value(ks, TensorId::kV, v0 + d, c.data.mean, c.data.std, 1.0, c.dtype);
      }
    }
  };
  on_cores(blocks.size(), [&](size_t i) { generate(blocks[i]); });
  if (c.fp8_kv()) quantize_workload(c, pt, w);
  return w;
}

std::vector<float> sink_logits(const CaseSpec& c) {
  std::vector<float> s;
  if (!c.attention.sinks) return s;
  const auto& given = c.attention.sinks->logits;
  for (int h = 0; h < c.num_qo_heads; ++h) {
    if (!given.empty()) {
      s.push_back(static_cast<float>(given[h]));
      continue;
    }
    const double z = static_cast<double>(gen_standard(c.data.seed, TensorId::kSink, static_cast<uint64_t>(h)));
    s.push_back(round_to(c.dtype, static_cast<float>(1.0 + 2.0 * z)));
  }
  return s;
}

}  // namespace attnscope
