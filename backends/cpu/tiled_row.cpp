// cpu.tiled's arithmetic for one row (see tiled_row.h). Every operation is in the order and
// precision cuda.flash uses: scores in fp32 (q.k on the plain path, its sm_scale * log2(e) fused into
// exp2's argument), exp2 per KV tile against the running max, the row sum from fp32 P, P rounded to the dtype before
// P.V, the key-split ways merged in way order, partials merged in chunk order.
#include "tiled_row.h"

#include <cmath>
#include <cstring>

#include "attnscope/softmax_state.h"

namespace attnscope::cpu {

namespace {

std::vector<float> head_of(const std::vector<float>& o) {
  return std::vector<float>(o.begin(), o.begin() + std::min<size_t>(o.size(), kTraceHeadValues));
}

double norm_of(const std::vector<float>& o) {
  double s = 0;
  for (float x : o) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

}  // namespace

TiledArith::TiledArith(const CaseSpec& c_, const Plan& p_, const Workload& w_)
    : c(c_),
      p(p_),
      w(w_),
      kv{c_, p_.pages, w_},
      dt(c_.dtype),
      G(c_.group_size()),
      Hq(c_.num_qo_heads),
      Dq(c_.head_dim_qk),
      Dv(c_.head_dim_vo),
      scale(static_cast<float>(c_.sm_scale_or_default())),
      scale_log2(scale * static_cast<float>(kLog2e)),
      cap(c_.attention.soft_cap ? static_cast<float>(*c_.attention.soft_cap) : 0.f),
      plain(!c_.attention.soft_cap && !c_.attention.alibi && !p_.score_mod),
      exp_scale(plain ? scale_log2 : 1.f),
      unit_tok(unit_first_tokens(c_, p_)) {
  const int hk = c_.num_kv_heads;
  head_exp_scale.assign(hk, exp_scale);
  head_logit_scale.assign(hk, scale);
  head_v_scale.assign(hk, 1.f);
  for (float x : sink_logits(c_)) sink2.push_back(x * static_cast<float>(kLog2e));
  if (!w_.has_scales()) return;
  // cuda.flash's FP8 kernels take per-tensor and per-head scales (the descriptor refuses per-token ones)
  const bool per_head = c_.kv_cache.scales.granularity == ScaleGranularity::kHead;
  for (int h = 0; h < hk; ++h) {
    const float ks = w_.k_scale[per_head ? h : 0];
    head_exp_scale[h] = plain ? exp_scale * ks : 1.f;
    head_logit_scale[h] = scale * ks;
    head_v_scale[h] = w_.v_scale[per_head ? h : 0];
  }
}

float tiled_score(const TiledArith& a, const float* qv, int request, int key, int h, int q_abs, float slope) {
  const float* kr = a.kv.k(request, key, h / a.G);
  float dot = 0.f;
  for (int d = 0; d < a.Dq; ++d) dot += qv[d] * kr[d];
  return tiled_score_of_dot(a, dot, request, key, h, q_abs, slope);
}

float tiled_score_of_dot(const TiledArith& a, float dot, int request, int key, int h, int q_abs, float slope) {
  if (a.plain) return dot;  // scaled inside exp2's fma, as the kernel's plain path
  float x = dot * a.head_logit_scale[h / a.G];
  if (a.cap > 0) x = a.cap * std::tanh(x / a.cap);
  if (a.c.attention.alibi) x += slope * static_cast<float>(key - q_abs);
  if (a.p.score_mod) x = static_cast<float>(apply_score_mod(a.c, a.p, request, h, q_abs, key, x));
  return x * static_cast<float>(kLog2e);  // base 2 from here on
}

float tiled_logit(const TiledArith& a, const float* qv, int request, int key, int h, int q_abs, float slope) {
  return tiled_score(a, qv, request, key, h, q_abs, slope) * a.head_exp_scale[h / a.G];
}

namespace {

// Eight float lanes (GCC / Clang vector extension: AVX registers where compiled for AVX2, two SSE
// registers otherwise). Lane-wise + and * are the scalar operations, and -ffp-contract=off keeps a
// multiply and an add two roundings, so a lane computes exactly what the scalar loop would.
typedef float Vec8 __attribute__((vector_size(32)));
inline Vec8 load8(const float* p) {
  Vec8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, Vec8 v) { std::memcpy(p, &v, sizeof v); }

// o[d] += p_k * v_k[d] for the keys in order, four keys per pass over d: each element sees the same
// adds in the same order as one key at a time (the same bits), and o is loaded and stored once per pass.
void add_pv(float* o, const float* p, const float* const* v, int n, int Dv) {
  int k = 0;
  for (; k + 4 <= n; k += 4) {
    const float p0 = p[k], p1 = p[k + 1], p2 = p[k + 2], p3 = p[k + 3];
    const float *v0 = v[k], *v1 = v[k + 1], *v2 = v[k + 2], *v3 = v[k + 3];
    for (int d = 0; d < Dv; ++d) {
      float x = o[d];
      x += p0 * v0[d];
      x += p1 * v1[d];
      x += p2 * v2[d];
      x += p3 * v3[d];
      o[d] = x;
    }
  }
  for (; k < n; ++k)
    for (int d = 0; d < Dv; ++d) o[d] += p[k] * v[k][d];
}

// The item's K and V row addresses, and with share_k_rows its K transposed: once per (item, KV head).
void prepare_item(const TiledArith& a, const WorkItem& it, int kvh, RowScratch& sc) {
  if (sc.item == &it && sc.item_kvh == kvh) return;
  const int n = it.kv_end - it.kv_begin;
  const int request = a.p.units[it.unit].request;
  sc.k_rows.resize(n);
  sc.v_rows.resize(n);
  for (int k = 0; k < n; ++k) {
    sc.k_rows[k] = a.kv.k(request, it.kv_begin + k, kvh);
    sc.v_rows[k] = a.kv.v(request, it.kv_begin + k, kvh);
  }
  sc.dots.assign(static_cast<size_t>(n) + 8, 0.f);  // a vector block may write up to 7 lanes past the last key
  if (sc.share_k_rows) {
    sc.kt_stride = static_cast<size_t>(n + 7) / 8 * 8 + 8;  // a block read from any key stays inside its column
    sc.kt.assign(sc.kt_stride * a.Dq, 0.f);
    for (int k0 = 0; k0 < n; k0 += kKvTile)  // a block of rows stays in L1 while its columns are written
      for (int d = 0; d < a.Dq; ++d) {
        float* col = sc.kt.data() + static_cast<size_t>(d) * sc.kt_stride;
        for (int k = k0; k < std::min(n, k0 + kKvTile); ++k) col[k] = sc.k_rows[k][d];
      }
  }
  sc.item = &it;
  sc.item_kvh = kvh;
}

// q . k for 8 V keys from the transposed K: lane j of acc[v] is key 8 v + j's sum over d in order from
// 0, as dot_rows' (the same bits); the V sums in flight hide the adder's latency.
template <int V>
void kt_block(const float* qv, const float* kt, size_t stride, int Dq, float* out) {
  Vec8 acc[V] = {};
  for (int d = 0; d < Dq; ++d) {
    const Vec8 q = Vec8{} + qv[d];
    const float* col = kt + static_cast<size_t>(d) * stride;
    for (int v = 0; v < V; ++v) acc[v] += q * load8(col + 8 * v);
  }
  for (int v = 0; v < V; ++v) store8(out + 8 * v, acc[v]);
}

// q . k for the item's keys [j0, j1) (offsets from kv_begin) into sc.dots[j0 .. j1) (and up to 7
// lanes past it): from the transposed K, or eight K rows at a time (dot_rows) for a one-row item.
void row_dots(const TiledArith& a, const float* qv, int j0, int j1, RowScratch& sc) {
  float* out = sc.dots.data();
  if (!sc.share_k_rows) {
    dot_rows<float>(qv, sc.k_rows.data() + j0, j1 - j0, a.Dq, out + j0);
    return;
  }
  const float* kt = sc.kt.data();
  const size_t st = sc.kt_stride;
  int j = j0;
  for (; j + 64 <= j1; j += 64) kt_block<8>(qv, kt + j, st, a.Dq, out + j);
  switch ((j1 - j + 7) / 8) {  // 57 to 63 keys left need eight vectors
    case 8:
      return kt_block<8>(qv, kt + j, st, a.Dq, out + j);
    case 7:
      return kt_block<7>(qv, kt + j, st, a.Dq, out + j);
    case 6:
      return kt_block<6>(qv, kt + j, st, a.Dq, out + j);
    case 5:
      return kt_block<5>(qv, kt + j, st, a.Dq, out + j);
    case 4:
      return kt_block<4>(qv, kt + j, st, a.Dq, out + j);
    case 3:
      return kt_block<3>(qv, kt + j, st, a.Dq, out + j);
    case 2:
      return kt_block<2>(qv, kt + j, st, a.Dq, out + j);
    case 1:
      return kt_block<1>(qv, kt + j, st, a.Dq, out + j);
    default:
      return;
  }
}

}  // namespace

RowState tiled_item_row(const TiledArith& a, const WorkItem& it, int row, int kvh, RowScratch& sc, std::vector<TileStep>* steps,
                        ChunkPartial* part) {
  const SplitPlan& sp = a.p.split;
  const WorkUnit& un = a.p.units[it.unit];
  const RowMask& m = a.p.masks[un.request];
  const int ql = row / a.G;             // query within the unit
  const int h = kvh * a.G + row % a.G;  // qo head
  const int qa = q_abs_of(m, un.q_begin + ql);
  const float* qv = a.w.q_row(a.unit_tok[it.unit] + ql, h, a.c);
  const float slope = a.c.attention.alibi ? static_cast<float>(alibi_slope(h, a.Hq)) : 0.f;
  const float es = a.head_exp_scale[kvh];
  int lo, hi;
  visible_range(m, qa, &lo, &hi);
  prepare_item(a, it, kvh, sc);
  const int kb = it.kv_begin;
  // every dot product the row's tiles read, before its online softmax: each is its own sum over d
  const int vis_lo = std::max(lo, kb), vis_hi = std::min(hi, it.kv_end);
  if (vis_lo < vis_hi) row_dots(a, qv, vis_lo - kb, vis_hi - kb, sc);
  // A masked key's score is -inf; with es finite and > 0 its fma is -inf (m_new is finite or +inf
  // there) and its P exactly 0, which the loop below skips: then only the visible keys need exp2.
  const bool skip_masked = es > 0.f && es < INFINITY;
  // W ways: way w takes keys [w * kKvTile / W, (w + 1) * kKvTile / W) of every KV tile (the
  // kernel's key-split warps), each with its own online state; merged in way order below.
  const int W = sp.kv_warp_split, per = kKvTile / W;
  sc.s.resize(kKvTile);
  sc.p.resize(kKvTile);
  sc.pv.resize(kKvTile);
  sc.way_o.resize(W);
  for (auto& o : sc.way_o) o.assign(a.Dv, 0.f);  // keeps the capacity of the previous row
  // A sink starts the row (cuda.flash's start_rows): every way's m = the sink, way 0's d = 1 (its term,
  // no value vector), in the final output or the row's first KV chunk; the online softmax and the
  // merges carry it, so the store adds nothing and a fully masked row ends with O = 0, LSE = the sink.
  const bool sink = !a.sink2.empty() && (!sp.split_kv || it.kv_chunk == 0);
  sc.way_m.assign(W, sink ? a.sink2[h] : -INFINITY);
  sc.way_d.assign(W, 0.f);
  if (sink) sc.way_d[0] = 1.f;
  sc.scale.assign(W, 1.f);
  for (int w = 0; w < W; ++w) {
    float& mx = sc.way_m[w];
    float& den = sc.way_d[w];
    std::vector<float>& o = sc.way_o[w];
    for (int t0 = it.kv_begin; t0 < it.kv_end; t0 += kKvTile) {
      const int k0 = t0 + w * per;
      const int k1 = std::min(k0 + per, it.kv_end);
      const int v0 = std::max(k0, lo), v1 = std::min(k1, hi);  // the tile's keys inside the row's range
      float tile_max = -INFINITY;
      int visible = 0;
      for (int k = k0; k < k1; ++k) sc.s[k - k0] = -INFINITY;
      for (int k = v0; k < v1; ++k) {
        if (m.bits && !mask_bit(m, qa, k)) continue;
        ++visible;
        const float dot = sc.dots[k - kb];
        const float x = a.plain ? dot : tiled_score_of_dot(a, dot, un.request, k, h, qa, slope);
        sc.s[k - k0] = x;
        tile_max = std::max(tile_max, x);
      }
      // base 2: max(score) x exp_scale is the same float as max(score x exp_scale) (monotonic rounding)
      tile_max *= es;
      const float m_new = std::max(mx, tile_max);
      TileStep st;
      if (steps) {
        st.chunk = it.kv_chunk;
        st.way = w;
        st.kv_begin = k0;
        st.kv_end = std::max(k0, k1);
        st.visible = visible;
        st.tile_max = tile_max;
        st.m_old = mx;
        st.m_new = m_new;
      }
      if (m_new == -INFINITY) {  // nothing visible yet: exp2(-inf - -inf) would be NaN
        if (steps) {
          st.skipped = true;
          st.den = den;
          st.o_head = head_of(o);
          steps->push_back(st);
        }
        continue;
      }
      const float corr = std::exp2(mx - m_new);  // 0 when mx was -inf
      den *= corr;
      for (float& x : o) x *= corr;
      const int e0 = skip_masked ? v0 : k0, e1 = skip_masked ? v1 : k1;
      float* pp = sc.p.data();
      const float** pv = sc.pv.data();
      int np = 0;
      for (int k = e0; k < e1; ++k) {
        const float sk = sc.s[k - k0];
        if (skip_masked && sk == -INFINITY) continue;          // P = 0, skipped below
        const float pk = std::exp2(std::fma(sk, es, -m_new));  // one rounding, as the kernel's FFMA
        if (pk == 0.f) continue;
        den += pk;                    // the row sum uses fp32 P, as FA2 does
        pp[np] = round_to(a.dt, pk);  // P enters the MMA in the dtype
        pv[np++] = sc.v_rows[k - kb];
      }
      add_pv(o.data(), pp, pv, np, a.Dv);
      mx = m_new;
      if (steps) {
        st.rescale = corr;
        st.den = den;
        st.o_norm = norm_of(o);
        st.o_head = head_of(o);
        steps->push_back(st);
      }
    }
  }
  // merge the ways in order: M = max m_w, scale_w = exp2(m_w - M); the result goes to way 0's
  // buffer (element d is read from every way before it is written)
  RowState r;
  r.mx = sc.way_m[0];
  r.den = sc.way_d[0];
  std::vector<float>& scale = sc.scale;
  if (W > 1) {
    float M = -INFINITY;
    for (int w = 0; w < W; ++w) M = std::max(M, sc.way_m[w]);
    r.den = 0.f;
    for (int w = 0; w < W; ++w) {
      scale[w] = sc.way_m[w] == -INFINITY ? 0.f : std::exp2(sc.way_m[w] - M);
      r.den += sc.way_d[w] * scale[w];
    }
    for (int d = 0; d < a.Dv; ++d) {
      float acc = 0.f;
      for (int w = 0; w < W; ++w) acc += sc.way_o[w][d] * scale[w];
      sc.way_o[0][d] = acc;
    }
    r.mx = M;
  }
  r.o = sc.way_o[0].data();
  r.v_scale = a.head_v_scale[kvh];
  if (part) {
    part->chunk = it.kv_chunk;
    part->kv_begin = it.kv_begin;
    part->kv_end = it.kv_end;
    part->way_m = sc.way_m;
    part->way_d = sc.way_d;
    part->way_scale = scale;
    part->m = r.mx;
    part->den = r.den;
  }
  return r;
}

float tiled_partial(const TiledArith& a, const RowState& st, float* out) {
  const bool empty = st.den == 0.f;  // no visible key and no sink (a sink starts d at 1)
  const float lse = empty ? -INFINITY : st.mx + std::log2(st.den);
  for (int d = 0; d < a.Dv; ++d) out[d] = empty ? 0.f : (st.o[d] / st.den) * st.v_scale;
  if (a.c.split.partials == PartialPrecision::kDtype)
    for (int d = 0; d < a.Dv; ++d) out[d] = round_to(a.dt, out[d]);
  return lse;
}

float tiled_final(const TiledArith& a, const RowState& st, float* out) {
  const bool empty = st.den == 0.f;
  const float lse = empty ? -INFINITY : st.mx + std::log2(st.den);
  for (int d = 0; d < a.Dv; ++d) out[d] = round_to(a.dt, empty ? 0.f : (st.o[d] / st.den) * st.v_scale);
  return lse2_to_e(lse);
}

void tiled_fold(int Dv, float* acc, float* lse, float lse_b, const float* ob, MergeStep* step) {
  float wa, wb, l;
  merge_weights(*lse, lse_b, &wa, &wb, &l);
  for (int d = 0; d < Dv; ++d) acc[d] = wa * acc[d] + wb * ob[d];
  if (step) {
    step->lse_acc = *lse;
    step->lse_chunk = lse_b;
    step->w_acc = wa;
    step->w_chunk = wb;
    step->lse_after = l;
    step->o_head.assign(acc, acc + std::min(Dv, kTraceHeadValues));
  }
  *lse = l;
}

}  // namespace attnscope::cpu
