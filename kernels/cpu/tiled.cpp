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
      std::vector<float> o(Dv), s(kKvTile);
      for (int row = it.row_begin; row < it.row_end; ++row) {
        const int ql = row / G;                 // query within the unit
        const int h = kvh * G + row % G;        // qo head
        const int qa = q_abs_of(m, un.q_begin + ql);
        const int64_t t = unit_tok[it.unit] + ql;
        const float* qv = w.q_row(t, h, c);
        const float slope = c.attention.alibi ? static_cast<float>(alibi_slope(h, Hq)) : 0.f;
        int lo, hi;
        visible_range(m, qa, &lo, &hi);
        float mx = -INFINITY, den = 0.f;
        std::fill(o.begin(), o.end(), 0.f);
        for (int k0 = it.kv_begin; k0 < it.kv_end; k0 += kKvTile) {
          const int k1 = std::min(k0 + kKvTile, it.kv_end);
          float tile_max = -INFINITY;
          for (int k = k0; k < k1; ++k) {
            float x = -INFINITY;
            if (k >= lo && k < hi) {
              const float* kr = kv.k(un.request, k, kvh);
              float dot = 0.f;
              for (int d = 0; d < Dq; ++d) dot += qv[d] * kr[d];
              x = dot * scale;
              if (cap > 0) x = cap * std::tanh(x / cap);
              if (c.attention.alibi) x += slope * static_cast<float>(k - qa);
              x *= log2e;  // base 2 from here on
            }
            s[k - k0] = x;
            tile_max = std::max(tile_max, x);
          }
          const float m_new = std::max(mx, tile_max);
          if (m_new == -INFINITY) continue;  // nothing visible yet: exp2(-inf - -inf) would be NaN
          const float corr = std::exp2(mx - m_new);  // 0 when mx was -inf
          den *= corr;
          for (float& x : o) x *= corr;
          for (int k = k0; k < k1; ++k) {
            const float pk = std::exp2(s[k - k0] - m_new);
            if (pk == 0.f) continue;
            den += pk;  // the row sum uses fp32 P, as FA2 does
            const float pr = round_to(dt, pk);  // P enters the MMA in the dtype
            const float* vr = kv.v(un.request, k, kvh);
            for (int d = 0; d < Dv; ++d) o[d] += pr * vr[d];
          }
          mx = m_new;
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
