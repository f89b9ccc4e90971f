// MLA's tensors: docs/conventions.md section 13.
#include "attnscope/mla.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mla_workload.h"
#include "on_cores.h"

namespace attnscope {

MlaGen mla_gen(const CaseSpec& c) {
  const MlaSpec& m = *c.mla;
  MlaGen g;
  g.rank = m.kv_lora_rank;
  g.rope = m.rope_dim;
  g.nope = m.qk_nope_dim;
  g.vdim = m.v_head_dim;
  g.heads = c.num_qo_heads;
  g.inv_sqrt_rank = 1.0 / std::sqrt(static_cast<double>(m.kv_lora_rank));
  g.mean = c.data.mean;
  g.std = c.data.std;
  g.weight_seed = c.data.seed;
  g.dt = c.dtype;
  return g;
}

std::vector<float> mla_latent_rows(const MlaGen& g, uint64_t seed, int64_t k0, int count) {
  std::vector<float> rows(static_cast<size_t>(count) * g.latent());
  for (int i = 0; i < count; ++i)
    for (int d = 0; d < g.latent(); ++d) rows[static_cast<size_t>(i) * g.latent() + d] = mla_latent(g, seed, k0 + i, d);
  return rows;
}

MlaWeights mla_weights(const MlaGen& g, bool uk, bool uv) {
  MlaWeights w;
  if (uk) w.w_uk.resize(static_cast<size_t>(g.heads) * g.nope * g.rank);
  if (uv) w.w_uv.resize(static_cast<size_t>(g.heads) * g.vdim * g.rank);
  // a (tensor, head) block per index: every weight is a pure function of its place
  on_cores(2 * static_cast<size_t>(g.heads), [&](size_t i) {
    const bool is_uk = i < static_cast<size_t>(g.heads);
    const int h = static_cast<int>(is_uk ? i : i - g.heads), rows = is_uk ? g.nope : g.vdim;
    std::vector<float>& out = is_uk ? w.w_uk : w.w_uv;
    if (out.empty()) return;
    float* dst = out.data() + static_cast<size_t>(h) * rows * g.rank;
    for (int n = 0; n < rows; ++n)
      for (int d = 0; d < g.rank; ++d) *dst++ = mla_weight(g, is_uk ? TensorId::kWuk : TensorId::kWuv, h, n, d);
  });
  return w;
}

CaseSpec mla_other_form(const CaseSpec& c) {
  CaseSpec o = c;
  o.mla->absorbed = !c.mla->absorbed;
  o.num_kv_heads = o.mla->absorbed ? 1 : o.num_qo_heads;
  o.head_dim_qk = o.mla->qk_dim();
  o.head_dim_vo = o.mla->vo_dim();
  o.backends.clear();
  o.comparisons.clear();
  return o;
}

std::vector<double> mla_project_output(const CaseSpec& c, const std::vector<float>& o_lat) {
  const MlaGen g = mla_gen(c);
  const MlaWeights w = mla_weights(g, false, true);
  const int64_t rows = static_cast<int64_t>(o_lat.size()) / (static_cast<int64_t>(g.heads) * g.rank);
  std::vector<double> out(static_cast<size_t>(rows) * g.heads * g.vdim);
  for (int64_t t = 0; t < rows; ++t)
    for (int h = 0; h < g.heads; ++h) {
      const float* x = o_lat.data() + (t * g.heads + h) * g.rank;
      for (int j = 0; j < g.vdim; ++j) {
        const float* wr = w.w_uv.data() + (static_cast<size_t>(h) * g.vdim + j) * g.rank;
        double s = 0;
        for (int d = 0; d < g.rank; ++d) s += static_cast<double>(wr[d]) * x[d];
        out[(t * g.heads + h) * g.vdim + j] = s;
      }
    }
  return out;
}

std::vector<float> mla_query_row(const CaseSpec& c, int r, int t, int h) {
  const MlaGen g = mla_gen(c);
  std::vector<float> qg(g.q_dim()), row(c.head_dim_qk);
  for (int i = 0; i < g.q_dim(); ++i)
    qg[i] = gen_value(c.request_seed(r), TensorId::kQ, q_index(c, r, t, h, i), g.mean, g.std, 1.0, g.dt);
  if (!c.mla->absorbed) return qg;
  for (int d = 0; d < g.rank; ++d)
    row[d] = mla_dot_f(
        g, g.nope, [&](int n) { return mla_weight(g, TensorId::kWuk, h, n, d); }, [&](int n) { return qg[n]; });
  for (int j = 0; j < g.rope; ++j) row[g.rank + j] = qg[g.nope + j];
  return row;
}

std::vector<float> mla_key_row(const CaseSpec& c, int r, int k, int h) {
  const MlaGen g = mla_gen(c);
  const int64_t pos = c.key_source.position(k);
  const std::vector<float> lat = mla_latent_rows(g, c.key_seed(r, pos), pos, 1);
  if (c.mla->absorbed) return lat;
  std::vector<float> row(c.head_dim_qk);
  for (int n = 0; n < g.nope; ++n)
    row[n] = mla_dot_f(
        g, g.rank, [&](int d) { return mla_weight(g, TensorId::kWuk, h, n, d); }, [&](int d) { return lat[d]; });
  for (int j = 0; j < g.rope; ++j) row[g.nope + j] = lat[g.rank + j];
  return row;
}

namespace {

// Q rows of request r: the generator's [q_nope ; q_pe] (non-absorbed), or [W_uk^T q_nope ; q_pe].
void mla_queries(const CaseSpec& c, const MlaGen& g, const MlaWeights& w, int r, float* q) {
  const int H = c.num_qo_heads, Dq = c.head_dim_qk, Dg = g.q_dim();
  const uint64_t seed = c.request_seed(r);
  std::vector<float> qg(Dg);
  for (int t = 0; t < c.requests[r].q_len; ++t)
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < Dg; ++i) qg[i] = gen_value(seed, TensorId::kQ, q_index(c, r, t, h, i), g.mean, g.std, 1.0, g.dt);
      float* row = q + (static_cast<size_t>(t) * H + h) * Dq;
      if (!c.mla->absorbed) {
        for (int i = 0; i < Dg; ++i) row[i] = qg[i];
        continue;
      }
      const float* wk = w.w_uk.data() + static_cast<size_t>(h) * g.nope * g.rank;
      for (int d = 0; d < g.rank; ++d) row[d] = mla_dot(g, g.nope, wk + d, g.rank, qg.data(), 1);
      for (int j = 0; j < g.rope; ++j) row[g.rank + j] = qg[g.nope + j];
    }
}

}  // namespace

void make_mla_workload(const CaseSpec& c, const PageTable& pt, Workload& w) {
  const MlaGen g = mla_gen(c);
  const bool absorbed = c.mla->absorbed;
  const MlaWeights wt = mla_weights(g, true, !absorbed);  // the absorbed form's Q needs W_uk; its pool neither
  const int Hk = c.num_kv_heads, Dq = c.head_dim_qk, Dv = c.head_dim_vo, ps = pt.page_size;
  const KvLayout lay = c.kv_cache.layout;
  const std::vector<KeyBlock> blocks = key_blocks(c, 64, true);
  on_cores(blocks.size(), [&](size_t i) {  // each block writes its own rows: the same bits on any core count
    const KeyBlock b = blocks[i];
    if (b.begin < 0) return mla_queries(c, g, wt, b.r, w.q.data() + w.q_indptr[b.r] * c.num_qo_heads * Dq);
    const int nk = b.end - b.begin, lw = g.latent();
    std::vector<float> lat(static_cast<size_t>(nk) * lw);  // the block's latent rows, [key][latent]
    for (int j = 0; j < nk; ++j) {
      const int64_t pos = c.key_source.position(b.begin + j);  // the key's place in the unpartitioned case
      const std::vector<float> row = mla_latent_rows(g, c.key_seed(b.r, pos), pos, 1);
      std::copy(row.begin(), row.end(), lat.begin() + static_cast<ptrdiff_t>(j) * lw);
    }
    auto at = [&](std::vector<float>& pool, int j, int h, int dim) {
      const int k = b.begin + j;
      return pool.data() + kv_offset(lay, pt.page_of(b.r, k), k % ps, h, 0, ps, Hk, dim);
    };
    for (int h = 0; h < Hk; ++h) {
      if (absorbed) {  // one latent head: K is the row, V its ckv part
        for (int j = 0; j < nk; ++j) {
          std::copy_n(lat.data() + static_cast<size_t>(j) * lw, Dq, at(w.k_pool, j, h, Dq));
          std::copy_n(lat.data() + static_cast<size_t>(j) * lw, Dv, at(w.v_pool, j, h, Dv));
        }
        continue;
      }
      // each weight row against the block's keys in turn: W is read once per block, not once per key
      for (int n = 0; n < g.nope; ++n) {
        const float* wr = wt.w_uk.data() + (static_cast<size_t>(h) * g.nope + n) * g.rank;
        for (int j = 0; j < nk; ++j)
          at(w.k_pool, j, h, Dq)[n] = mla_dot(g, g.rank, wr, 1, lat.data() + static_cast<size_t>(j) * lw, 1);
      }
      for (int j = 0; j < nk; ++j)
        for (int e = 0; e < g.rope; ++e) at(w.k_pool, j, h, Dq)[g.nope + e] = lat[static_cast<size_t>(j) * lw + g.rank + e];
      for (int v = 0; v < g.vdim; ++v) {
        const float* wr = wt.w_uv.data() + (static_cast<size_t>(h) * g.vdim + v) * g.rank;
        for (int j = 0; j < nk; ++j)
          at(w.v_pool, j, h, Dv)[v] = mla_dot(g, g.rank, wr, 1, lat.data() + static_cast<size_t>(j) * lw, 1);
      }
    }
  });
}

}  // namespace attnscope
