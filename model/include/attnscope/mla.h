// MLA's tensors (docs/conventions.md section 13): the latent cache row of a token, the seeded
// up-projections W_uk / W_uv, and the forms' derived Q, K and V. Every element is a fixed-order sum
// of exactly rounded double operations, so the host and the GPU generators agree bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "attnscope/case_spec.h"
#include "attnscope/gen.h"

namespace attnscope {

// The generator's parameters an MLA element depends on, without the CaseSpec (the device kernels take it).
struct MlaGen {
  int rank = 512, rope = 64, nope = 128, vdim = 128, heads = 1;
  double inv_sqrt_rank = 0;  // 1 / sqrt(rank), the up-projections' scale
  double mean = 0, std = 1;
  uint64_t weight_seed = 1;  // data.seed: the matrices are the model's, shared by every request
  DType dt = DType::kBf16;
  AS_HD int latent() const { return rank + rope; }
  AS_HD int q_dim() const { return nope + rope; }
};
MlaGen mla_gen(const CaseSpec& c);

// Element d of token k's latent row [ckv ; kpe]: the K generator's stream of one latent head.
AS_HD inline float mla_latent(const MlaGen& g, uint64_t seed, int64_t k, int d) {
  return gen_value(seed, TensorId::kK, static_cast<uint64_t>(k) * g.latent() + d, g.mean, g.std, 1.0, g.dt);
}
// W_uk[h][n][d] (n < nope) or W_uv[h][n][d] (n < vdim), d < rank: N(0, 1 / rank) rounded to the dtype.
AS_HD inline float mla_weight(const MlaGen& g, TensorId t, int h, int n, int d) {
  const int rows = t == TensorId::kWuk ? g.nope : g.vdim;
  const uint64_t idx = (static_cast<uint64_t>(h) * rows + n) * g.rank + d;
  return round_to(g.dt, static_cast<float>(AS_DMUL(static_cast<double>(gen_standard(g.weight_seed, t, idx)), g.inv_sqrt_rank)));
}
// sum_d a(d) * b(d) over n terms in a fixed order: 8 interleaved double partial sums (the products of
// two dtype values are exact) added pairwise, then rounded to the dtype. a / b: callables of d.
template <class A, class B>
AS_HD inline float mla_dot_f(const MlaGen& g, int n, A a, B b) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int d = 0; d < n; ++d) acc[d & 7] = AS_DADD(acc[d & 7], AS_DMUL(static_cast<double>(a(d)), static_cast<double>(b(d))));
  const double s = AS_DADD(AS_DADD(AS_DADD(acc[0], acc[1]), AS_DADD(acc[2], acc[3])),
                           AS_DADD(AS_DADD(acc[4], acc[5]), AS_DADD(acc[6], acc[7])));
  return round_to(g.dt, static_cast<float>(s));
}
// The same over two strided arrays; unit strides run in blocks of 8 (the same order: partial j takes
// terms j, j + 8, ...), which the host compiler vectorises.
AS_HD inline float mla_dot(const MlaGen& g, int n, const float* a, int sa, const float* b, int sb) {
  if (sa != 1 || sb != 1)
    return mla_dot_f(
        g, n, [=](int d) { return a[d * sa]; }, [=](int d) { return b[d * sb]; });
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int d = 0;
  for (; d + 8 <= n; d += 8)
    for (int j = 0; j < 8; ++j) acc[j] = AS_DADD(acc[j], AS_DMUL(static_cast<double>(a[d + j]), static_cast<double>(b[d + j])));
  for (; d < n; ++d) acc[d & 7] = AS_DADD(acc[d & 7], AS_DMUL(static_cast<double>(a[d]), static_cast<double>(b[d])));
  const double s = AS_DADD(AS_DADD(AS_DADD(acc[0], acc[1]), AS_DADD(acc[2], acc[3])),
                           AS_DADD(AS_DADD(acc[4], acc[5]), AS_DADD(acc[6], acc[7])));
  return round_to(g.dt, static_cast<float>(s));
}

// The latent rows of `count` tokens of request seed `seed` starting at key k0, [count][latent()].
std::vector<float> mla_latent_rows(const MlaGen& g, uint64_t seed, int64_t k0, int count);
// The up-projections of every head: [heads][nope][rank] and [heads][vdim][rank]; each only where asked
// (the absorbed form's inputs need W_uk alone), else empty.
struct MlaWeights {
  std::vector<float> w_uk, w_uv;
};
MlaWeights mla_weights(const MlaGen& g, bool uk, bool uv);

// The same model in the other form (absorbed <-> non-absorbed): head dims and KV heads follow, every
// other field (requests, seeds, masks, scale) stays, backends and comparisons are dropped.
CaseSpec mla_other_form(const CaseSpec& c);

// The absorbed form's latent output O_lat [tokens][heads][rank] projected through W_uv to the
// non-absorbed output [tokens][heads][vdim], in double (for diffing the two forms).
std::vector<double> mla_project_output(const CaseSpec& absorbed, const std::vector<float>& o_latent);

// One row of the workload without building it (the GUI's pair inspector): query token t of request r,
// head h ([head_dim_qk]); key k's K row for head h (the latent when absorbed). Same bits as make_workload.
std::vector<float> mla_query_row(const CaseSpec& c, int r, int t, int h);
std::vector<float> mla_key_row(const CaseSpec& c, int r, int k, int h);

}  // namespace attnscope
