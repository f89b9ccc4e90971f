// cpu.tiled: fp32 online softmax that executes the SplitPlan exactly: its work items (query tile x
// KV chunk), KV tiles of kKvTile keys from each chunk's start, partial states, and the merge in
// chunk order. P is rounded to the dtype before P.V, as a tensor-core kernel feeds P to the MMA.
// It shows split effects without a GPU and is the CPU twin of cuda.flash. A sink starts each row's
// state (m = the sink, d = 1) in its output or its first KV chunk, whose partial then carries it through
// the merge. The per-row arithmetic is in tiled_row.cpp, shared with the softmax step-through.
#include <cmath>
#include <limits>

#include "attnscope/softmax_state.h"
#include "tiled_row.h"

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
    const int Hq = c.num_qo_heads, Hk = c.num_kv_heads, G = c.group_size(), Dv = c.head_dim_vo;
    const TiledArith a(c, p, w);

    // split: partial rows [o_indptr[u] + q * chunks + chunk] x heads, normalised O and base-2 LSE
    const int64_t prow = sp.split_kv ? sp.o_indptr.back() : 0;
    std::vector<float> part_o(static_cast<size_t>(prow) * Hq * Dv, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> part_lse(static_cast<size_t>(prow) * Hq, std::numeric_limits<float>::quiet_NaN());

    parallel_for(static_cast<int64_t>(sp.items.size()) * Hk, 1, opt, [&](int64_t i) {
      const WorkItem& it = sp.items[i / Hk];
      const int kvh = static_cast<int>(i % Hk);
      RowScratch scratch;
      scratch.share_k_rows = it.row_end - it.row_begin > 1;
      for (int row = it.row_begin; row < it.row_end; ++row) {
        const int ql = row / G;           // query within the unit
        const int h = kvh * G + row % G;  // qo head
        const RowState st = tiled_item_row(a, it, row, kvh, scratch);
        if (sp.split_kv) {
          const int64_t pr = sp.o_indptr[it.unit] + static_cast<int64_t>(ql) * sp.unit_chunks[it.unit] + it.kv_chunk;
          part_lse[pr * Hq + h] = tiled_partial(a, st, part_o.data() + (pr * Hq + h) * Dv);
        } else {
          const int64_t t = a.unit_tok[it.unit] + ql;
          res.lse[t * Hq + h] = tiled_final(a, st, res.o.data() + (t * Hq + h) * Dv);
        }
      }
    });
    if (!sp.split_kv) return res;

    // merge: every query row folds its partials in chunk order 0..n-1
    parallel_for(static_cast<int64_t>(p.units.size()), 1, opt, [&](int64_t u) {
      const int chunks = sp.unit_chunks[u];
      std::vector<float> acc(Dv);
      for (int ql = 0; ql < p.units[u].q_len; ++ql) {
        const int64_t t = a.unit_tok[u] + ql;
        const int64_t first = sp.o_indptr[u] + static_cast<int64_t>(ql) * chunks;
        for (int h = 0; h < Hq; ++h) {
          float lse = part_lse[first * Hq + h];
          const float* po = part_o.data() + (first * Hq + h) * Dv;
          for (int d = 0; d < Dv; ++d) acc[d] = po[d];
          for (int k = 1; k < chunks; ++k) {
            const int64_t pr = first + k;
            tiled_fold(Dv, acc.data(), &lse, part_lse[pr * Hq + h], part_o.data() + (pr * Hq + h) * Dv);
          }
          float* out = res.o.data() + (t * Hq + h) * Dv;
          for (int d = 0; d < Dv; ++d) out[d] = round_to(c.dtype, acc[d]);
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
