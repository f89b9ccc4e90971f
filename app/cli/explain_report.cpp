// print_trace: one line per KV tile (per key-split way), the chunk's partial at each chunk
// boundary, the merge of the partials in chunk order, and the result beside the exact softmax.
#include "explain_report.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "attnscope/registry.h"
#include "explain.h"

namespace attnscope::cli {

namespace {

std::string g(double v, int width = 10) {
  char b[64];
  if (std::isinf(v))
    std::snprintf(b, sizeof b, "%*s", width, v > 0 ? "inf" : "-inf");
  else
    std::snprintf(b, sizeof b, "%*.5g", width, v);
  return b;
}

template <class T>
std::string head(const std::vector<T>& v, size_t n = 4) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < n; ++i) s += (i ? ", " : "") + g(v[i], 0);
  return s + (v.size() > n ? ", ...]" : "]");
}

std::string range(int a, int b) {
  char r[48];
  std::snprintf(r, sizeof r, "[%d, %d)", a, b);
  return r;
}

}  // namespace

void print_trace(std::ostream& o, const SoftmaxTrace& t) {
  o << "row     request " << t.request << ", query " << t.query << " (position " << t.q_abs << "), head " << t.head
    << " -> token " << t.token << "; visible keys " << range(t.visible_lo, t.visible_hi) << ": " << t.visible << "\n";
  o << "plan    tile " << t.tile_q << ", chunk " << t.chunk_pages << " pages, "
    << (t.split ? std::to_string(t.partials.size()) + " chunks (split-KV)" : std::string("no split"));
  if (t.kv_warp_split > 1) o << ", " << t.kv_warp_split << " key-split ways per KV tile (merged in way order)";
  o << "\n        logits in base 2: " << logit_formula(t);
  o << "\n        m: running max, d: running sum of exp2(logit - m), rescale = exp2(m_old - m_new); masked keys are -inf\n";
  size_t step = 0;
  for (const auto& p : t.partials) {
    o << "\nchunk " << p.chunk << "  keys " << range(p.kv_begin, p.kv_end) << "  work item " << p.item << "\n";
    if (t.sink2 != -INFINITY && (!t.split || p.chunk == 0))  // the sink starts this state (tiled_item_row)
      o << "  start: the sink, m = s_h x log2(e) = " << g(t.sink2, 0) << ", d = 1 (its term, no value vector"
        << (t.kv_warp_split > 1 ? "; every way starts at this m, way 0 holds d = 1" : "") << "), O = 0\n";
    o << "  way  keys            visible    tile max       m old       m new     rescale           d         |O|  O[0:4]\n";
    for (; step < t.steps.size() && t.steps[step].chunk == p.chunk; ++step) {
      const TileStep& s = t.steps[step];
      char keys[32];
      std::snprintf(keys, sizeof keys, "%-16s", range(s.kv_begin, s.kv_end).c_str());
      o << "  " << s.way << "    " << keys << g(s.visible, 7) << " " << g(s.tile_max, 11) << " " << g(s.m_old, 11) << " "
        << g(s.m_new, 11) << " " << g(s.rescale, 11) << " " << g(s.den, 11) << " " << g(s.o_norm, 11) << "  "
        << (s.skipped ? "(nothing visible yet: state unchanged)" : head(s.o_head)) << "\n";
    }
    if (p.way_m.size() > 1) {
      o << "  ways merged in order: M = max m_w = " << g(p.m, 0) << ", scales exp2(m_w - M) = " << head(p.way_scale, 8)
        << ", d = sum d_w x scale_w = " << g(p.den, 0) << "\n";
    }
    o << "  " << (t.split ? "partial" : "output ") << "  LSE2 = m + log2(d) = " << g(p.lse2, 0) << "  O = " << head(p.o_head)
      << (p.den == 0.f ? "  (no visible key: O = 0, LSE = -inf)" : "") << "\n";
  }
  if (!t.merges.empty()) {
    o << "\nmerge in chunk order (acc starts as chunk " << t.partials.front().chunk << "'s partial"
      << (t.sink2 != -INFINITY ? ", which holds the sink: counted once)\n" : ")\n");
    for (const auto& m : t.merges)
      o << "  + chunk " << m.chunk << ": LSE2 " << g(m.lse_acc, 0) << " & " << g(m.lse_chunk, 0) << " -> weights "
        << g(m.w_acc, 0) << " / " << g(m.w_chunk, 0) << ", LSE2 " << g(m.lse_after, 0) << ", O = " << head(m.o_head) << "\n";
  }
  o << "\nfinal   LSE " << g(t.lse, 0) << " (natural log)  O = " << head(t.o, 8) << "   " << backend_for_role(Role::kPlanTwin)
    << "'s bits\n";
  o << "exact   LSE " << g(t.ref_lse, 0) << "  O = " << head(t.ref_o, 8) << "   " << backend_for_role(Role::kReference)
    << " (fp64)\n";
  o << "diff    O max abs " << g(t.max_abs_diff, 0) << ", LSE " << g(t.lse_diff, 0) << "\n";
  if (t.sink != -INFINITY)
    o << "sink    logit " << g(t.sink, 0) << " (no value vector; it started the row's state, m = " << g(t.sink2, 0)
      << ", d = 1): " << g(t.sink_prob, 0) << " of the exact probability mass\n";
  if (t.sparse) {  // docs/dsa.md section 5, for this row
    const SoftmaxTrace::SparseCheck& k = *t.sparse;
    o << "\nsparse  " << k.kept << " kept, " << k.padding << " -1 padding"
      << (k.nans ? ", " + std::to_string(k.nans) + " NaN scores" : "")
      << (t.gathered.empty() ? ""
                             : "; " + backend_for_role(Role::kPlanTwin) +
                                   " visits them gathered, in rank order (the steps' key ranges are ranks)")
      << "\n  recall of mass: " << g(k.recall, 0) << " for head " << t.head << "; over the heads min " << g(k.recall_min, 0)
      << " (head " << k.recall_min_head << "), mean " << g(k.recall_mean, 0) << "\n  against dense attention over all "
      << t.q_abs + 1 << " visible keys (fp64): LSE " << g(k.dense_lse, 0)
      << " (sparse LSE = dense LSE + ln recall = " << g(k.dense_lse + std::log(k.recall), 0) << "), max |O sparse - O dense| "
      << g(k.dense_diff, 0) << "\n";
    if (k.plain_logits)
      o << "  (recall and the dense twin use the plain logits q.k x sm_scale: the case's score_mod, soft-cap or ALiBi is "
           "not in them, so the LSE identity does not hold here)\n";
    if (k.flips >= 0) o << "  FP8 indexer against its fp64 twin: " << k.flips << " of the " << k.kept << " kept tokens differ\n";
    if (!k.gpu_top_k_name.empty()) {
      o << "  " << k.gpu_top_k_name << " on the GPU, on this row's scores as fp32: ";
      if (k.gpu_top_k_differs < 0)
        o << "not run: " << k.gpu_top_k_note << "\n";
      else if (k.gpu_top_k_differs == 0)
        o << "the same " << k.kept << " kept tokens\n";
      else
        o << k.gpu_top_k_differs << " of the " << k.kept << " kept tokens differ"
          << (k.gpu_top_k_tie ? " (a tie at the top_k-th score: either tied token may be kept)" : "") << "\n";
    }
  }
}

}  // namespace attnscope::cli
