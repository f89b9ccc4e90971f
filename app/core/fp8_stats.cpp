#include "fp8_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attnscope/fp8.h"
#include "attnscope/workload.h"

namespace attnscope {

float Fp8Data::scale_at(bool v_tensor, int page, int slot, int head) const {
  const auto& s = of(v_tensor).scale;
  const int64_t i = scale_index(granularity, page, slot, head, page_size, kv_heads);
  return i < static_cast<int64_t>(s.size()) ? s[i] : NAN;
}

bool fp8_clamped(Fp8Format f, float x_over_scale) {
  const float a = std::fabs(x_over_scale);
  // e4m3: 448 and the absent 480 tie at 464 to 448 (even); e5m2: 57344 and 65536 tie at 61440 to 65536
  return f == Fp8Format::kE4M3 ? a > 464.0f : a >= 61440.0f;
}

namespace {

// One tensor's per-slot and per-channel numbers over the real elements of its pool.
void tensor_data(const CaseSpec& c, const PageTable& pt, const Fp8Data& d, const std::vector<float>& stored,
                 const std::vector<float>& orig, int dim, Fp8TensorData& t) {
  const int Hk = c.num_kv_heads, ps = pt.page_size;
  t.amax.assign(static_cast<size_t>(d.slots() * Hk), 0.f);
  t.sat.assign(t.amax.size(), 0);
  t.chan_max.assign(dim, 0.0);
  t.chan_rms.assign(dim, 0.0);
  t.chan_sat.assign(dim, 0);
  t.head_sat.assign(Hk, 0);
  std::vector<double> sq(dim, 0.0);
  int64_t rows = 0;
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
    for (int k = 0; k < c.requests[r].kv_len; ++k) {
      const int page = pt.page_of(r, k), slot = k % ps;
      for (int h = 0; h < Hk; ++h) {
        const int64_t cell = (static_cast<int64_t>(page) * ps + slot) * Hk + h;
        const float s = t.scale[scale_index(d.granularity, page, slot, h, ps, Hk)];
        const int64_t off = kv_offset(c.kv_cache.layout, page, slot, h, 0, ps, Hk, dim);
        for (int ch = 0; ch < dim; ++ch) {
          const float x = orig[off + ch];
          t.amax[cell] = std::max(t.amax[cell], std::fabs(x));
          const bool saturated = fp8_clamped(d.format, x / s);  // the quantiser's one fp32 division
          t.sat[cell] += saturated;
          t.chan_sat[ch] += saturated;
          // stored * scale is exact in double (a 4-bit significand times a 24-bit one)
          const double e = std::fabs(static_cast<double>(x) - static_cast<double>(stored[off + ch]) * s);
          t.chan_max[ch] = std::max(t.chan_max[ch], e);
          sq[ch] += e * e;
        }
        t.saturated += t.sat[cell];
        t.head_sat[h] += t.sat[cell];
        t.saturated_slots += t.sat[cell] > 0;
        ++rows;
      }
    }
  t.elements = rows * dim;
  for (int ch = 0; ch < dim; ++ch) {
    t.chan_rms[ch] = rows ? std::sqrt(sq[ch] / static_cast<double>(rows)) : 0.0;
    t.err_max = std::max(t.err_max, t.chan_max[ch]);
  }
}

}  // namespace

Fp8Data build_fp8_data(const CaseSpec& c, const PageTable& pt, int64_t max_bytes) {
  Fp8Data d;
  if (!c.fp8_kv()) {
    d.why = "this case stores its KV cache in " + std::string(dtype_name(c.dtype)) + " (/kv_cache/dtype is not FP8)";
    return d;
  }
  const int64_t bytes = workload_bytes(c, pt);
  if (bytes > max_bytes) {
    d.why = "the FP8 views regenerate the cache on the host: this case needs " + std::to_string(bytes >> 20) +
            " MiB, over the GUI's " + std::to_string(max_bytes >> 20) + " MiB for them (fewer or shorter requests show them)";
    return d;
  }
  d.format = *c.kv_cache.fp8;
  d.granularity = c.kv_cache.scales.granularity;
  d.max_finite = fp8_max(d.format);
  d.page_size = pt.page_size;
  d.num_pages = pt.num_pages;
  d.kv_heads = c.num_kv_heads;
  d.fp8_attention = c.fp8_attention.has_value();
  const Workload w = make_workload(c, pt);
  d.q_scale = w.q_scale;
  d.k.scale = w.k_scale;
  d.v.scale = w.v_scale;
  d.k.given = !c.kv_cache.scales.k.empty();
  d.v.given = !c.kv_cache.scales.v.empty();
  d.used.assign(static_cast<size_t>(d.slots()), 0);
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
    for (int k = 0; k < c.requests[r].kv_len; ++k)
      d.used[static_cast<size_t>(pt.page_of(r, k)) * pt.page_size + k % pt.page_size] = 1;
  tensor_data(c, pt, d, w.k_pool, w.k_orig, c.head_dim_qk, d.k);
  tensor_data(c, pt, d, w.v_pool, w.v_orig, c.head_dim_vo, d.v);
  d.available = true;
  return d;
}

std::string fp8_saturation_text(const Fp8Data& d) {
  if (!d.available || d.k.saturated + d.v.saturated == 0) return "";
  char buf[200];
  std::snprintf(buf, sizeof buf, "K: %lld of %lld elements saturated, V: %lld of %lld (clamped to +-%g)",
                static_cast<long long>(d.k.saturated), static_cast<long long>(d.k.elements),
                static_cast<long long>(d.v.saturated), static_cast<long long>(d.v.elements), d.max_finite);
  return buf;
}

}  // namespace attnscope
