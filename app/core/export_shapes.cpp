// Repro-script parts for sinks, trees and MLA: export_shapes.h.
#include "export_shapes.h"

#include <sstream>

#include "attnscope/py_text.h"
#include "attnscope/workload.h"

namespace attnscope {

std::string shapes_constants(const CaseSpec& c) {
  std::ostringstream o;
  if (c.has_trees()) {
    std::vector<std::string> v;
    for (const auto& r : c.requests) {
      std::vector<std::string> p;
      for (int x : r.tree_parents) p.push_back(std::to_string(x));
      v.push_back(r.tree_parents.empty() ? "None" : py_list(p, 0));
    }
    o << "# speculative-decoding trees: per request the parent of each new token (-1: the prefix), or None\n"
      << py_assign("TREE_PARENTS", v);
  }
  if (c.has_sinks()) {
    std::vector<std::string> v;
    for (float s : sink_logits(c)) v.push_back(py_float(s));
    o << "# attention sinks: one logit per query head in the denominator, no value (natural log, scaled-logit units)\n"
      << py_assign("SINKS", v);
  }
  if (c.mla)
    o << "# MLA " << (c.mla->absorbed ? "absorbed" : "non-absorbed") << " form (docs/conventions.md section 13): kv_lora_rank "
      << c.mla->kv_lora_rank << ", rope_dim " << c.mla->rope_dim << ", qk_nope_dim " << c.mla->qk_nope_dim << ", v_head_dim "
      << c.mla->v_head_dim
      << (c.mla->absorbed ? "; k.npy holds each token's latent row [ckv ; kpe], v.npy its ckv part\n"
                          : "; k.npy / v.npy hold the up-projected per-head K and V\n");
  return o.str();
}

std::string tree_mask_line(const CaseSpec& c) {
  return std::string(c.has_trees() ? "    m &= tree_visible(r, q_abs, k)  # the request's draft tree\n" : "") +
         (c.is_sparse() ? "    m &= sparse_kept(r, q_abs, k)  # DeepSeek sparse attention: the tokens each query keeps\n" : "");
}

std::string sparse_files_note(const CaseSpec& c) {
  return c.is_sparse() ? " sparse_indices.npy [" + std::to_string(c.total_q()) + ", " + std::to_string(c.sparse->top_k) +
                             "] int32: each query's kept tokens (logical indices, -1 padding);"
                       : "";
}

std::string sparse_fn(const CaseSpec& c) {
  if (!c.is_sparse()) return "";
  return R"PY(

SPARSE_INDICES = None


def sparse_kept(r, q_abs, k):
    """DeepSeek sparse attention: the tokens each query of request r keeps (sparse_indices.npy, one row of
    top_k logical token indices per query token, -1 padding), ANDed with the causal mask above."""
    global SPARSE_INDICES
    if SPARSE_INDICES is None:
        SPARSE_INDICES = np.load(os.path.join(HERE, "sparse_indices.npy"))
    first = sum(Q_LEN[:r])
    keep = np.zeros((Q_LEN[r], KV_LEN[r]), dtype=bool)
    for i, row in enumerate(SPARSE_INDICES[first:first + Q_LEN[r]]):
        keep[i, row[row >= 0]] = True
    return keep[q_abs[:, 0] - (KV_LEN[r] - Q_LEN[r])][:, k[0]]
)PY";
}

std::string tree_fn(const CaseSpec& c) {
  if (!c.has_trees()) return "";
  return R"PY(

def tree_visible(r, q_abs, k):
    """Speculative-decoding tree of request r: new token i sees every prefix key, its own key and its
    ancestors' (TREE_PARENTS[r][i]: -1 attaches to the prefix), never a sibling branch."""
    parents = TREE_PARENTS[r]
    if parents is None:
        return np.ones((q_abs.shape[0], k.shape[1]), dtype=bool)
    prefix = KV_LEN[r] - Q_LEN[r]
    sees = np.zeros((Q_LEN[r], KV_LEN[r]), dtype=bool)
    sees[:, :prefix] = True
    for i in range(Q_LEN[r]):
        a = i
        while a >= 0:
            sees[i, prefix + a] = True
            a = parents[a]
    return sees[q_abs[:, 0] - prefix][:, k[0]]
)PY";
}

std::string shapes_case_text(const CaseSpec& c) {
  std::string s;
  if (c.has_sinks()) s += ", attention sinks";
  if (c.has_trees()) s += ", speculative-decoding trees";
  if (c.is_sparse()) s += ", DeepSeek sparse attention (top_k " + std::to_string(c.sparse->top_k) + ")";
  if (c.mla) s += std::string(", MLA ") + (c.mla->absorbed ? "absorbed" : "non-absorbed");
  return s;
}

std::string sinks_run_fn(const CaseSpec& c) {
  std::string logits;
  if (c.attention.soft_cap)
    logits += "        s = SOFT_CAP * torch.tanh(s / SOFT_CAP)  # soft-cap: the scores only, not the sink\n";
  if (c.attention.alibi)
    logits += "        s = s + torch.tensor(ALIBI_SLOPES, device=dev)[:, None, None] * torch.from_numpy(kk - q_abs).to(dev)\n";
  return py_fill(R"PY(

def run_library(torch, q, k, v):
    """PyTorch eager attention with attention sinks, upcast to float32 (FlashAttention's attention_ref
    with upcast=True, plus gpt-oss's sink column): the sink logit joins each row's softmax as one more
    column and its probability is dropped before P @ V. Returns O and LSE (natural log)."""
    dev = "cuda"
    sinks = torch.tensor(SINKS, device=dev, dtype=torch.float32)[:, None, None]
    out, lses = [], []
    for r, qs, ks, q_abs, kk in requests():
        qi, ki, vi = (torch.from_numpy(x).to(dev, torch.float32).transpose(0, 1) for x in (q[qs], k[ks], v[ks]))
        ki, vi = ki.repeat_interleave(GROUP, dim=0), vi.repeat_interleave(GROUP, dim=0)  # GQA
        s = (qi @ ki.transpose(1, 2)) * SM_SCALE
$(LOGITS)        s = s.masked_fill(~torch.from_numpy(allowed(r, q_abs, kk)).to(dev), float("-inf"))
        s = torch.cat([s, sinks.expand(-1, s.shape[1], 1)], dim=-1)  # the sink column
        lse = torch.logsumexp(s, dim=-1)
        p = torch.softmax(s, dim=-1)[..., :-1]  # the sink has no value vector
        out.append((p @ vi).transpose(0, 1))
        lses.append(lse.transpose(0, 1))
    return torch.cat(out).cpu().numpy(), torch.cat(lses).cpu().numpy()
)PY",
                 {{"LOGITS", logits}});
}

}  // namespace attnscope
