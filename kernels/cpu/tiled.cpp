// cpu.tiled: fp32 online softmax that executes the SplitPlan exactly: its work items (query tile x
// KV chunk), KV tiles of kKvTile keys from each chunk's start, partial states, and the merge in
// chunk order. P is rounded to the dtype before P.V, as a tensor-core kernel feeds P to the MMA.
// It shows split effects without a GPU and is the CPU twin of cuda.flash.
#include <cmath>
#include <limits>

#include "attnscope/softmax_state.h"
#include "cpu_common.h"

namespace attnscope::cpu {
namespace {

class Tiled final : public Backend {
 public:
  std::string id() const override { return "cpu.tiled"; }
  std::string describe() const override { return "fp32 online softmax following the split plan (tiles, chunks, merge)"; }
  std::string check(const CaseSpec&) const override { return ""; }

  Result run(const CaseSpec& c, const Plan& p, const Workload& w, const RunOptions& opt) override {
    Result res = poisoned_result(id(), c);
    const SplitPlan& sp = p.split;
    const int Hq = c.num_qo_heads, Hk = c.num_kv_heads, G = c.group_size(), Dq = c.head_dim_qk, Dv = c.head_dim_vo;
    const DType dt = c.dtype;
    const float scale = static_cast<float>(c.sm_scale_or_default());
    const float log2e = static_cast<float>(kLog2e);
    const float scale_log2 = scale * log2e;
    const bool plain = !c.attention.soft_cap && !c.attention.alibi;
    const float cap = c.attention.soft_cap ? static_cast<float>(*c.attention.soft_cap) : 0.f;
    const KvAccess kv{c, p.pages, w};

    const std::vector<int64_t> unit_tok = unit_first_tokens(c, p);
    // split: partial rows [o_indptr[u] + q * chunks + chunk] x heads, normalised O and base-2 LSE
    const int64_t prow = sp.split_kv ? sp.o_indptr.back() : 0;
    std::vector<float> part_o(static_cast<size_t>(prow) * Hq * Dv, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> part_lse(static_cast<size_t>(prow) * Hq, std::numeric_limits<float>::quiet_NaN());

    parallel_for(static_cast<int64_t>(sp.items.size()) * Hk, 1, opt, [&](int64_t i) {
      const WorkItem& it = sp.items[i / Hk];
      const int kvh = static_cast<int>(i % Hk);
      const WorkUnit& un = p.units[it.unit];
      const RowMask& m = p.masks[un.request];
      std::vector<float> s(kKvTile);
      std::vector<std::vector<float>> way_o(sp.kv_warp_split, std::vector<float>(Dv));
      std::vector<float> way_m(sp.kv_warp_split), way_d(sp.kv_warp_split);
      for (int row = it.row_begin; row < it.row_end; ++row) {
        const int ql = row / G;           // query within the unit
        const int h = kvh * G + row % G;  // qo head
        const int qa = q_abs_of(m, un.q_begin + ql);
        const int64_t t = unit_tok[it.unit] + ql;
        const float* qv = w.q_row(t, h, c);
        const float slope = c.attention.alibi ? static_cast<float>(alibi_slope(h, Hq)) : 0.f;
        int lo, hi;
        visible_range(m, qa, &lo, &hi);
        // W ways: way w takes keys [w * kKvTile / W, (w + 1) * kKvTile / W) of every KV tile (the
        // kernel's key-split warps), each with its own online state; merged in way order below.
        const int W = sp.kv_warp_split, per = kKvTile / W;
        for (int w = 0; w < W; ++w) {
          float& mx = way_m[w];
          float& den = way_d[w];
          std::vector<float>& o = way_o[w];
          mx = -INFINITY;
          den = 0.f;
          std::fill(o.begin(), o.end(), 0.f);
          for (int t0 = it.kv_begin; t0 < it.kv_end; t0 += kKvTile) {
            const int k0 = t0 + w * per;
            const int k1 = std::min(k0 + per, it.kv_end);
            float tile_max = -INFINITY;
            for (int k = k0; k < k1; ++k) {
              float x = -INFINITY;
              if (k >= lo && k < hi) {
                const float* kr = kv.k(un.request, k, kvh);
                float dot = 0.f;
                for (int d = 0; d < Dq; ++d) dot += qv[d] * kr[d];
                if (plain) {
                  x = dot * scale_log2;  // one rounding, as the kernel's plain path
                } else {
                  x = dot * scale;
                  if (cap > 0) x = cap * std::tanh(x / cap);
                  if (c.attention.alibi) x += slope * static_cast<float>(k - qa);
                  x *= log2e;  // base 2 from here on
                }
              }
              s[k - k0] = x;
              tile_max = std::max(tile_max, x);
            }
            const float m_new = std::max(mx, tile_max);
            if (m_new == -INFINITY) continue;          // nothing visible yet: exp2(-inf - -inf) would be NaN
            const float corr = std::exp2(mx - m_new);  // 0 when mx was -inf
            den *= corr;
            for (float& x : o) x *= corr;
            for (int k = k0; k < k1; ++k) {
              const float pk = std::exp2(s[k - k0] - m_new);
              if (pk == 0.f) continue;
              den += pk;                          // the row sum uses fp32 P, as FA2 does
              const float pr = round_to(dt, pk);  // P enters the MMA in the dtype
              const float* vr = kv.v(un.request, k, kvh);
              for (int d = 0; d < Dv; ++d) o[d] += pr * vr[d];
            }
            mx = m_new;
          }
        }
        // merge the ways in order: M = max m_w, scale_w = exp2(m_w - M)
        float mx = way_m[0], den = way_d[0];
        std::vector<float>& o = way_o[0];
        if (W > 1) {
          float M = -INFINITY;
          for (int w = 0; w < W; ++w) M = std::max(M, way_m[w]);
          std::vector<float> sc(W);
          den = 0.f;
          for (int w = 0; w < W; ++w) {
            sc[w] = way_m[w] == -INFINITY ? 0.f : std::exp2(way_m[w] - M);
            den += way_d[w] * sc[w];
          }
          for (int d = 0; d < Dv; ++d) {
            float a = 0.f;
            for (int w = 0; w < W; ++w) a += way_o[w][d] * sc[w];
            o[d] = a;
          }
          mx = M;
        }
        const bool empty = den == 0.f;
        const float lse2 = empty ? -INFINITY : mx + std::log2(den);
        if (sp.split_kv) {
          const int64_t pr = sp.o_indptr[it.unit] + static_cast<int64_t>(ql) * sp.unit_chunks[it.unit] + it.kv_chunk;
          float* po = part_o.data() + (pr * Hq + h) * Dv;
          for (int d = 0; d < Dv; ++d) {
            const float v = empty ? 0.f : o[d] / den;
            po[d] = c.split.partials == PartialPrecision::kDtype ? round_to(dt, v) : v;
          }
          part_lse[pr * Hq + h] = lse2;
        } else {
          float* out = res.o.data() + (t * Hq + h) * Dv;
          for (int d = 0; d < Dv; ++d) out[d] = empty ? 0.f : round_to(dt, o[d] / den);
          res.lse[t * Hq + h] = lse2_to_e(lse2);
        }
      }
    });
    if (!sp.split_kv) return res;

    // merge: every query row folds its partials in chunk order 0..n-1
    parallel_for(static_cast<int64_t>(p.units.size()), 1, opt, [&](int64_t u) {
      const int chunks = sp.unit_chunks[u];
      std::vector<float> acc(Dv);
      for (int ql = 0; ql < p.units[u].q_len; ++ql) {
        const int64_t t = unit_tok[u] + ql;
        const int64_t first = sp.o_indptr[u] + static_cast<int64_t>(ql) * chunks;
        for (int h = 0; h < Hq; ++h) {
          float lse = part_lse[first * Hq + h];
          const float* po = part_o.data() + (first * Hq + h) * Dv;
          for (int d = 0; d < Dv; ++d) acc[d] = po[d];
          for (int k = 1; k < chunks; ++k) {
            const int64_t pr = first + k;
            float wa, wb, l;
            merge_weights(lse, part_lse[pr * Hq + h], &wa, &wb, &l);
            const float* pb = part_o.data() + (pr * Hq + h) * Dv;
            for (int d = 0; d < Dv; ++d) acc[d] = wa * acc[d] + wb * pb[d];
            lse = l;
          }
          float* out = res.o.data() + (t * Hq + h) * Dv;
          for (int d = 0; d < Dv; ++d) out[d] = round_to(dt, acc[d]);
          res.lse[t * Hq + h] = lse2_to_e(lse);
        }
      }
    });
    return res;
  }
};

}  // namespace
}  // namespace attnscope::cpu

namespace attnscope {
std::unique_ptr<Backend> make_cpu_tiled() { return std::make_unique<cpu::Tiled>(); }
}  // namespace attnscope
