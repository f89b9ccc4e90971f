// The repro script generator (export_script.h). The script is written for a person reading a bug
// report: only the branches the case needs are emitted, with its numbers filled in, and every
// translation from attnscope's conventions to the library's is a comment next to the argument. A
// family with a script writer of its own (BackendFamily::script_part) writes its library call; the
// app writes the frame around it and the PyTorch SDPA / flex_attention calls of the others.
#include "export_script.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "attnscope/mask.h"
#include "attnscope/py_text.h"
#include "attnscope/registry.h"
#include "dump.h"
#include "export_fp8.h"
#include "export_shapes.h"
#include "expr_numpy.h"
#include "repro.h"

#ifndef ATTNSCOPE_VERSION
#define ATTNSCOPE_VERSION "0.0.0"
#endif
#ifndef ATTNSCOPE_COMMIT
#define ATTNSCOPE_COMMIT "unknown"
#endif

namespace attnscope {

namespace {

template <class T, class F>
std::vector<std::string> strs(const std::vector<T>& v, F fmt) {
  std::vector<std::string> out;
  for (const T& x : v) out.push_back(fmt(x));
  return out;
}
// One number per request.
template <class F>
std::vector<std::string> per_request(const CaseSpec& c, F field) {
  return strs(c.requests, [&](const RequestSpec& r) { return std::to_string(field(r)); });
}
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

const char* torch_dtype(DType t) { return t == DType::kBf16 ? "bfloat16" : t == DType::kFp16 ? "float16" : "float32"; }

bool has_padding(const CaseSpec& c) {
  return std::any_of(c.requests.begin(), c.requests.end(), [](const RequestSpec& r) { return r.pad_start.has_value(); });
}
bool has_prefix_lens(const CaseSpec& c) {
  return c.attention.prefix_lm ||
         std::any_of(c.requests.begin(), c.requests.end(), [](const RequestSpec& r) { return r.prefix_len.has_value(); });
}
bool has_documents(const CaseSpec& c) {
  return std::any_of(c.requests.begin(), c.requests.end(), [](const RequestSpec& r) { return !r.doc_starts.empty(); });
}

// What the script runs, and why it may refuse to: the family's part, or the app's PyTorch writer.
struct Choice {
  ScriptApi api;
  ScriptPart part;
};

Choice choose(const CaseSpec& c, const Plan& p, const std::string& target) {
  Choice ch{script_api(c, target), {}};
  if (ch.api == ScriptApi::kFamily) {
    ch.part = family_of(target)->script_part(c, p, target);
  } else if (ch.api == ScriptApi::kSinksTorch) {
    ch.part.label = "PyTorch (sinks)";
    ch.part.library =
        "PyTorch eager attention with the sink column, upcast to float32 (gpt-oss's formulation; neither SDPA nor flex_attention "
        "takes a sink)";
  } else if (ch.api == ScriptApi::kSdpa) {
    ch.part.label = "SDPA";
    ch.part.library = "PyTorch torch.nn.functional.scaled_dot_product_attention, one request at a time";
  } else {
    ch.part.label = "flex_attention";
    ch.part.library =
        "PyTorch flex_attention (compiled), the batch packed as one sequence; soft-cap / ALiBi need its score_mod, "
        "which SDPA has not";
  }
  return ch;
}

// The ground truth a script's --reference-only compares with (the case format's reference).
std::string reference_id() { return backend_for_role(Role::kReference); }

std::string case_line(const CaseSpec& c) {
  std::ostringstream o;
  o << c.requests.size() << (c.requests.size() == 1 ? " request, " : " requests, ") << c.total_q() << " query / " << c.total_kv()
    << " kv tokens, heads " << c.num_qo_heads << " qo / " << c.num_kv_heads << " kv, head_dim ";
  o << (c.head_dim_qk == c.head_dim_vo ? std::to_string(c.head_dim_qk)
                                       : std::to_string(c.head_dim_qk) + " qk / " + std::to_string(c.head_dim_vo) + " vo")
    << ", " << dtype_name(c.dtype) << fp8_case_text(c) << ", ";
  if (c.kv_cache.storage == KvStorage::kRagged) o << "ragged KV";
  if (c.kv_cache.storage == KvStorage::kPaged)
    o << "paged KV (page " << c.kv_cache.page_size << ", " << layout_name(c.kv_cache.layout) << ", "
      << alloc_name(c.kv_cache.allocation) << (c.kv_cache.poison_unused ? ", unused slots NaN" : "") << ")";
  o << ", " << (c.attention.causal ? "causal" : "non-causal");
  if (c.attention.window) o << ", window " << *c.attention.window;
  if (c.attention.local_chunk) o << ", local chunk " << *c.attention.local_chunk;
  if (c.attention.prefix_lm) o << ", prefix-LM";
  if (has_documents(c)) o << ", documents";
  if (has_padding(c)) o << ", padding";
  if (c.attention.soft_cap) o << ", soft-cap " << py_float(*c.attention.soft_cap);
  if (c.attention.alibi) o << ", ALiBi";
  o << shapes_case_text(c) << ", sm_scale " << py_float(c.sm_scale_or_default());
  return o.str();
}

std::string target_status(const Session& s, const std::string& target) {
  const Result* r = s.result(target);
  if (!r || r->ok()) return r ? "ok" : "not run";
  return std::string(status_name(r->status)) + (r->message.empty() ? "" : ": " + py_one_line(r->message));
}

std::string header(const Session& s, const std::string& target, const Choice& ch) {
  const CaseSpec& c = s.spec();
  const Environment& e = s.env;
  std::ostringstream o;
  o << "#!/usr/bin/env python3\n"
    << "# attnscope repro: " << py_one_line(c.name.empty() ? "(unnamed case)" : c.name) << "\n";
  if (!c.description.empty()) o << py_comment("#   ", "#   ", c.description);
  std::string where = "host " + e.host + ", " + e.cpu + ", ";
  if (e.devices.empty()) where += "no GPU (" + e.device_error + ")";
  for (size_t i = 0; i < e.devices.size(); ++i)
    where += (i ? "; " : "") + e.devices[i].name + " (" + std::to_string(e.devices[i].sm_count) + " SMs, cc " +
             std::to_string(e.devices[i].cc_major) + "." + std::to_string(e.devices[i].cc_minor) + ")";
  o << "#\n"
    << py_comment("# case      ", "#           ", case_line(c))
    << py_comment("# target    ", "#           ",
                  "attnscope's " + target + " (" + target_status(s, target) + "), reproduced with " + ch.part.library)
    << py_comment("# recorded  ", "#           ",
                  "attnscope " + e.version + " (commit " + ATTNSCOPE_COMMIT + "), " + e.build + "; " + where);
  o << py_comment("# files     ", "#           ",
                  "q.npy [" + std::to_string(c.total_q()) + ", " + std::to_string(c.num_qo_heads) + ", " +
                      std::to_string(c.head_dim_qk) + "], k.npy / v.npy [" + std::to_string(c.total_kv()) + ", " +
                      std::to_string(c.num_kv_heads) + ", d]: float32 holding " +
                      (c.fp8_kv() ? std::string("the values named below") : dtype_name(c.dtype) + std::string(" values")) +
                      ", token by token, request after request; o_<backend>.npy / lse_<backend>.npy (natural log) of "
                      "each backend attnscope ran (NaN rows: not computed);" +
                      fp8_files_note(c) + sparse_files_note(c) + ch.part.files_note);
  o << "#           case.json replays everything with `attnscope-cli run case.json`\n"
    << "# usage     python3 repro.py                   runs " << ch.part.label << " on the GPU and compares\n"
    << "#           python3 repro.py --reference-only  numpy only: this script's fp64 "
    << (c.fp8_kv() ? "ideals vs attnscope's two" : "reference vs attnscope's " + reference_id()) << "\n"
    << "# exit      0 match, 1 mismatch, 2 cannot run here (no GPU, library missing, case not expressible)\n";
  return o.str();
}

std::string constants(const Session& s, const std::string& target, const Choice& ch) {
  const CaseSpec& c = s.spec();
  double twice_atol = 1e-5;  // attnscope's default rounding floor of the 2x rule, or the case's own
  for (const auto& k : c.comparisons)
    if (k.backend == target && k.rule == CompareRule::kTwiceLowp) twice_atol = k.atol;
  std::ostringstream o;
  o << "\nimport argparse\nimport os\nimport sys\n\ntry:\n    import numpy as np\nexcept ImportError:\n"
    << "    print(\"cannot run: needs numpy\")\n    sys.exit(2)\n\n"
    << "HERE = os.path.dirname(os.path.abspath(__file__))\n"
    << "TARGET = " << py_str(target) << "  # attnscope's backend whose recorded output this reproduces\n"
    << "TARGET_STATUS = " << py_str(target_status(s, target)) << "\n"
    << "LIBRARY = " << py_str(ch.part.label) << "\n"
    << "DTYPE, TORCH_DTYPE = \"" << dtype_name(c.dtype) << "\", \"" << torch_dtype(c.dtype) << "\"\n"
    << "# per request: new query tokens, and keys (cached prefix + new); the queries are the last Q_LEN keys\n"
    << py_assign("Q_LEN", per_request(c, [](const RequestSpec& r) { return r.q_len; }))
    << py_assign("KV_LEN", per_request(c, [](const RequestSpec& r) { return r.kv_len; }))
    << "NUM_QO_HEADS, NUM_KV_HEADS = " << c.num_qo_heads << ", " << c.num_kv_heads
    << "  # GQA: query head h reads KV head h // GROUP\n"
    << "GROUP = NUM_QO_HEADS // NUM_KV_HEADS\n"
    << "HEAD_DIM_QK, HEAD_DIM_VO = " << c.head_dim_qk << ", " << c.head_dim_vo << "\n"
    << "SM_SCALE = " << py_float(c.sm_scale_or_default())
    << (c.attention.sm_scale ? "  # the case's attention.sm_scale\n" : "  # 1 / sqrt(HEAD_DIM_QK)\n");
  if (c.attention.window) o << "WINDOW = " << *c.attention.window << "  # sliding window: visible keys, the query included\n";
  if (c.attention.local_chunk) o << "LOCAL_CHUNK = " << *c.attention.local_chunk << "  # chunked local attention (Llama-4)\n";
  if (has_prefix_lens(c))
    o << (c.attention.prefix_lm ? "# prefix-LM: keys below PREFIX_LEN[r] are visible to every query of request r\n"
                                : "# each request's prefix_len (the mask_mod reads it)\n")
      << py_assign("PREFIX_LEN", per_request(c, [](const RequestSpec& r) { return r.prefix_len.value_or(0); }));
  if (c.attention.mask_mod) o << "MASK_MOD = " << py_str(*c.attention.mask_mod) << "  # attnscope's expression, in allowed()\n";
  if (has_documents(c))
    o << "# packed documents: the first key of each document of each request ([0]: one document)\n"
      << py_assign("DOC_STARTS", strs(c.requests, [](const RequestSpec& r) {
                     return r.doc_starts.empty() ? std::string("[0]")
                                                 : py_list(strs(r.doc_starts, [](int x) { return std::to_string(x); }), 0);
                   }));
  if (has_padding(c))
    o << "# padding: positions from PAD_START[r] on are seen by no query and their queries see nothing (KV_LEN[r]: none)\n"
      << py_assign("PAD_START", per_request(c, [](const RequestSpec& r) { return r.pad_start.value_or(r.kv_len); }));
  if (c.attention.soft_cap) o << "SOFT_CAP = " << py_float(*c.attention.soft_cap) << "  # s = SOFT_CAP * tanh(s / SOFT_CAP)\n";
  if (c.attention.alibi) {
    std::vector<double> v;
    for (int h = 0; h < c.num_qo_heads; ++h) v.push_back(alibi_slope(h, c.num_qo_heads));
    o << "# ALiBi: s += ALIBI_SLOPES[h] * (k - q_abs), slopes 2^(-8 (h + 1) / n) (interpolated when n is no power of 2)\n"
      << py_assign("ALIBI_SLOPES", strs(v, py_float));
  }
  o << shapes_constants(c) << fp8_constants(c);
  if (ch.part.refusal.empty()) o << ch.part.constants;
  o << "TWICE_ATOL = " << py_float(twice_atol) << "  # rounding floor of the 2x rule\n";
  return o.str();
}

// allowed(): attnscope's mask (mask.h visible_range), one line per ingredient the case has; and
// requests(), which walks the batch.
std::string batch_fns(const CaseSpec& c) {
  std::ostringstream o;
  o << "\n\ndef allowed(r, q_abs, k):\n"
    << "    \"\"\"attnscope's mask of request r: may the query at absolute position q_abs [q, 1] see key k [1, k]?\n"
    << "    The queries are the last Q_LEN[r] of the KV_LEN[r] keys: q_abs = KV_LEN[r] - Q_LEN[r] + query index.\"\"\"\n";
  o << (!c.attention.causal     ? "    m = np.ones((q_abs.shape[0], k.shape[1]), dtype=bool)  # non-causal: every key visible\n"
        : c.attention.prefix_lm ? "    m = (k <= q_abs) | (k < PREFIX_LEN[r])  # causal (bottom-right aligned), and the prefix\n"
                                : "    m = k <= q_abs  # causal, bottom-right aligned\n");
  if (c.attention.window) o << "    m &= k > q_abs - WINDOW  # sliding window\n";
  if (c.attention.local_chunk) o << "    m &= k // LOCAL_CHUNK == q_abs // LOCAL_CHUNK  # the query's attention chunk\n";
  if (has_documents(c))
    o << "    doc = np.asarray(DOC_STARTS[r])\n"
      << "    m &= np.searchsorted(doc, k, side=\"right\") == np.searchsorted(doc, q_abs, side=\"right\")  # same document\n";
  if (has_padding(c)) o << "    m &= (k < PAD_START[r]) & (q_abs < PAD_START[r])  # padding\n";
  o << tree_mask_line(c);
  if (c.attention.mask_mod) {
    // attnscope evaluates a mask_mod with h = 0 (the case rules refuse one that reads h) and the
    // request's own document starts (none: doc() is 0)
    o << "    # the case's mask_mod (MASK_MOD, evaluated by mask_mod() as attnscope does), ANDed with the mask above\n"
      << "    value = mask_mod(r, 0, q_abs, k, Q_LEN[r], KV_LEN[r], " << (has_prefix_lens(c) ? "PREFIX_LEN[r]" : "0") << ", "
      << (has_documents(c) ? "DOC_STARTS[r]" : "[]") << ", NUM_QO_HEADS)\n"
      << "    m &= np.broadcast_to((value != 0) & (value == value), m.shape)  # non-zero allows, NaN does not\n";
  }
  o << "    return m\n" << tree_fn(c) << sparse_fn(c);
  if (c.attention.mask_mod) {
    const Expr e = Expr::parse(*c.attention.mask_mod, Expr::Kind::kMask);
    o << expr_numpy_helpers(e) << "\n\n" << expr_numpy_def(e, "mask_mod");
  }
  o << R"PY(

def requests():
    """Per request: its index, its rows of q.npy, its rows of k.npy / v.npy, q_abs [q, 1], keys [1, k]."""
    qo = ko = 0
    for r, (ql, kl) in enumerate(zip(Q_LEN, KV_LEN)):
        yield r, slice(qo, qo + ql), slice(ko, ko + kl), np.arange(kl - ql, kl)[:, None], np.arange(kl)[None, :]
        qo, ko = qo + ql, ko + kl
)PY";
  return o.str();
}

// reference(): the fp64 ground truth (numpy); naive_lowp(): the same in the case dtype (PyTorch),
// the baseline of the 2x rule. The logit transforms are emitted only when the case has them.
std::string reference_fns(const CaseSpec& c, bool with_naive) {
  std::string logits, t_logits;
  if (c.attention.soft_cap) {
    logits += "            s = SOFT_CAP * np.tanh(s / SOFT_CAP)  # soft-cap, before ALiBi and the mask\n";
    t_logits += "        s = SOFT_CAP * torch.tanh(s / SOFT_CAP)\n";
  }
  if (c.attention.alibi) {
    logits += "            s = s + ALIBI_SLOPES[h] * (kk - q_abs)  # ALiBi, absolute positions\n";
    t_logits +=
        "        bias = torch.tensor(ALIBI_SLOPES, device=dev)[:, None, None] * torch.from_numpy(kk - q_abs).to(dev)\n"
        "        s = (s.float() + bias).to(dt)  # the ALiBi bias in float32, as kernels add it\n";
  }
  const bool sinks = c.has_sinks();
  // gpt-oss's eager form: the sink as one more score column in the dtype, its probability dropped
  const std::string sink_col = sinks ? "        s = torch.cat([s, torch.tensor(SINKS, device=dev).to(dt)[:, None, "
                                       "None].expand(-1, s.shape[1], 1)], dim=-1)\n"
                                     : "";
  const std::string sink_drop = sinks ? "        p = p[..., :-1]  # the sink column has no value\n" : "";
  const std::string gqa = c.group_size() > 1
                              ? "        ki, vi = ki.repeat_interleave(GROUP, dim=0), vi.repeat_interleave(GROUP, dim=0)  # GQA\n"
                              : "";
  const std::string naive = R"PY(

def naive_lowp(torch, q, k, v):
    """The same attention done eagerly in the case dtype by PyTorch (FlashAttention's attention_ref
    with upcast=False): the same-precision baseline of the 2x rule."""
    dev, dt = "cuda", getattr(torch, TORCH_DTYPE)
    out = []
    for r, qs, ks, q_abs, kk in requests():
        # [heads, tokens, d]
        qi, ki, vi = (torch.from_numpy(x).to(dev, dt).transpose(0, 1) for x in (q[qs], k[ks], v[ks]))
$(GQA)        s = (qi * SM_SCALE) @ ki.transpose(1, 2)
$(T_LOGITS)        s = s.masked_fill(~torch.from_numpy(allowed(r, q_abs, kk)).to(dev), float("-inf"))
$(SINK_COL)        p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a query that sees no key: 0
$(SINK_DROP)        out.append((p @ vi).transpose(0, 1))
    return torch.cat(out).float().cpu().numpy()
)PY";
  return py_fill(
      R"PY(

def reference(q, k, v):
    """fp64 attention on the inputs as stored: O [tokens, heads, HEAD_DIM_VO] and LSE in natural log.
    A query that sees no key gets O = 0 and LSE = -inf (as attnscope, FlashAttention and FlashInfer)."""
    o = np.zeros((q.shape[0], NUM_QO_HEADS, HEAD_DIM_VO))
    lse = np.full((q.shape[0], NUM_QO_HEADS), -np.inf)
    for r, qs, ks, q_abs, kk in requests():
        mask = allowed(r, q_abs, kk)
        live = $(LIVE)
        for h in range(NUM_QO_HEADS):
            s = (q[qs, h].astype(np.float64) @ k[ks, h // GROUP].astype(np.float64).T) * SM_SCALE
$(LOGITS)            s = np.where(mask, s, -np.inf)[live]
            mx = s.max(axis=1, keepdims=True)
$(SINK_MX)            p = np.exp(s - mx)
            den = p.sum(axis=1)
$(SINK_DEN)
            o[qs, h][live] = (p @ v[ks, h // GROUP].astype(np.float64)) / den[:, None]
            lse[qs, h][live] = mx[:, 0] + np.log(den)
    return o, lse
$(NAIVE))PY",
      {{"NAIVE", with_naive ? py_fill(naive, {{"SINK_COL", sink_col}, {"SINK_DROP", sink_drop}}) : ""},
       {"GQA", gqa},
       {"LOGITS", logits},
       {"T_LOGITS", t_logits},
       {"LIVE", sinks ? "np.ones(mask.shape[0], dtype=bool)  # with a sink every row has a denominator" : "mask.any(axis=1)"},
       {"SINK_MX", sinks ? "            mx = np.maximum(mx, SINKS[h])  # the sink is one more term\n" : ""},
       {"SINK_DEN",
        sinks ? "            den = den + np.exp(SINKS[h] - mx[:, 0])  # no value vector: O's numerator skips it\n" : ""}});
}

// Loading, statistics, the comparisons of a library run (compare) and of --reference-only.
std::string report_fns(bool with_compare) {
  const std::string compare = R"PY(

def compare(o_lib, lse_lib, o_ref, lse_ref, o_lowp, ref_label="the fp64 reference"):
    """The library against the fp64 reference under the 2x rule, and against attnscope's recorded
    TARGET under attnscope's default rule allclose(rtol=1e-2, atol=1e-3). True when both hold."""
    print(f"{LIBRARY} vs {ref_label}:")
    err, bad = stats(LIBRARY, o_lib, o_ref)
    lowp_err, _ = stats(f"naive {DTYPE} (PyTorch eager)", o_lowp, o_ref)
    if lse_lib is not None:
        stats(f"{LIBRARY} LSE", lse_lib, lse_ref)
    bound = 2 * lowp_err + TWICE_ATOL
    ok = err <= bound and bad == 0
    print(f"  max|A - ref| <= 2 max|naive - ref| + {TWICE_ATOL:g}: max abs {err:.3g} {'<=' if ok else '>'} bound "
          f"{bound:.3g} (lowp max abs {lowp_err:.3g})" + (f"; {bad} NaN/Inf mismatches" if bad else ""))
    masked = np.isneginf(lse_ref)  # rows with no visible key: O = 0 and LSE = -inf in attnscope
    if masked.any():
        m = o_lib[masked]
        differ = int((m != 0).any(axis=-1).sum())
        worst = float(np.abs(np.nan_to_num(m, nan=np.inf)).max(initial=0.0))
        print(f"  fully masked (token, head) rows: {int(masked.sum())}; attnscope's O = 0 there, {LIBRARY} differs "
              f"on {differ}" + (f" (max |O| {worst:.3g})" if differ else ""))
    rec = load("o_" + TARGET)
    if rec is None:
        print(f"attnscope's {TARGET} did not run where this was exported ({TARGET_STATUS})")
        return ok
    rows = computed_rows(TARGET)
    print(f"{LIBRARY} vs attnscope's recorded {TARGET}:")
    err, bad = stats(LIBRARY, o_lib[rows], rec[rows])
    outside = int((~(np.abs(o_lib[rows] - rec[rows]) <= 1e-3 + 1e-2 * np.abs(rec[rows]))).sum())
    print(f"  allclose(rtol=0.01, atol=0.001): {outside} of {rec[rows].size} elements outside; max abs {err:.3g}")
    return ok and outside == 0 and bad == 0
)PY";
  return py_fill(R"PY(

def load(name):
    path = os.path.join(HERE, name + ".npy")
    return np.load(path) if os.path.exists(path) else None


def cannot(why):
    print(f"cannot run: {why}")
    sys.exit(2)


def stats(label, a, b):
    """attnscope's statistics of a against the baseline b: max abs and relative L2 over the pairs where
    both are finite, the share of identical values, NaN/Inf mismatches (equal infinities agree)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    bad = int((~both & ~(np.isinf(a) & (a == b))).sum())
    err, ref = np.abs(a[both] - b[both]), b[both]
    max_abs = float(err.max()) if err.size else 0.0
    den = float((ref * ref).sum())
    rel_l2 = float(np.sqrt((err * err).sum() / den)) if den > 0 else (float("inf") if max_abs > 0 else 0.0)
    same = 100.0 * float((a == b).sum()) / max(a.size, 1)
    print(f"  {label:<32} max abs {max_abs:<9.3g} rel L2 {rel_l2:<9.3g} identical {same:.0f}%"
          + (f"  NaN/Inf mismatches {bad}" if bad else ""))
    return max_abs, bad


def computed_rows(backend):
    """(token, head) rows a recorded backend computed: all, or those the case sampled (reference.sample_rows)."""
    return ~np.isnan(load("lse_" + backend))
$(COMPARE)

def check_reference(o_ref, lse_ref, name="$(REF)", label="fp64 reference"):
    """--reference-only: this script's reference against attnscope's recorded `name` ($(REF)). Both are
    fp64 computations stored as float32, so they agree to float32 rounding, far below any kernel's error."""
    rec_o, rec_lse = load("o_" + name), load("lse_" + name)
    if rec_o is None:
        cannot(f"attnscope's {name} did not run for this export (no o_{name}.npy)")
    rows = computed_rows(name)
    print(f"{label} vs attnscope's {name} on {int(rows.sum())} of {rows.size} (token, head) rows:")
    # rounded to float32 as attnscope stores it, so "identical" counts equal bits
    o_err, o_bad = stats("O", o_ref[rows].astype(np.float32), rec_o[rows])
    l_err, l_bad = stats("LSE", lse_ref[rows].astype(np.float32), rec_lse[rows])
    finite = np.isfinite(lse_ref[rows])
    o_tol = 1e-6 * max(1.0, float(np.abs(o_ref[rows]).max(initial=0.0)))
    l_tol = 1e-6 * max(1.0, float(np.abs(lse_ref[rows][finite]).max(initial=0.0)))
    ok = o_err <= o_tol and l_err <= l_tol and o_bad == 0 and l_bad == 0
    print(f"  float32 rounding bound: O {o_tol:.3g}, LSE {l_tol:.3g}")
    return ok
)PY",
                 {{"COMPARE", with_compare ? compare : ""}, {"REF", reference_id()}});
}

std::string sdpa_fn(const CaseSpec& c, const std::string& target) {
  // a backend whose library is one of SDPA's own backends pins SDPA to it
  const BackendInfo* info = backend_info(target);
  const std::string pinned = info ? info->script_sdpa_backend : "";
  std::string call = "F.scaled_dot_product_attention(qi, ki, vi, attn_mask=attn_mask, scale=SM_SCALE)";
  std::string run = "        o = " + call + "\n";
  if (!pinned.empty()) {
    run.clear();
    std::istringstream note(info->script_sdpa_note);
    for (std::string line; std::getline(note, line);) run += "        # " + py_one_line(line) + "\n";
    run += "        with sdpa_kernel(SDPBackend." + pinned + "):\n            o = " + call + "\n";
  }
  std::string pad;
  if (has_padding(c))
    pad =
        "        # padding queries see no key: attnscope gives O = 0; SDPA's math backend gives 0 since PyTorch 2.5,\n"
        "        # other SDPA kernels may give NaN (counted below as NaN/Inf mismatches) or finite values (the\n"
        "        # PyTorch 2.11 run on an H100 gave non-zero O there: compare() counts those rows)\n";
  return py_fill(R"PY(

def run_library(torch, q, k, v):
    """PyTorch's scaled_dot_product_attention, one request at a time. Returns O and no LSE (SDPA has none)."""
    import torch.nn.functional as F
$(IMPORT)    dev, dt = "cuda", getattr(torch, TORCH_DTYPE)
    out = []
    for r, qs, ks, q_abs, kk in requests():
        qi, ki, vi = (torch.from_numpy(x).to(dev, dt).transpose(0, 1)[None] for x in (q[qs], k[ks], v[ks]))
$(GQA)        mask = allowed(r, q_abs, kk)
        # SDPA's is_causal is top-left aligned and attnscope's causal bottom-right (they agree only when
        # q_len == kv_len): the mask goes in as an explicit boolean attn_mask (True = attend), or none
        # when every key is visible
$(PAD)        attn_mask = None if mask.all() else torch.from_numpy(mask).to(dev)
$(RUN)        out.append(o[0].transpose(0, 1))
    return torch.cat(out).float().cpu().numpy(), None
)PY",
                 {{"IMPORT", !pinned.empty() ? "    from torch.nn.attention import SDPBackend, sdpa_kernel\n" : ""},
                  {"GQA", c.group_size() > 1
                              ? "        ki, vi = ki.repeat_interleave(GROUP, dim=1), vi.repeat_interleave(GROUP, dim=1)  # GQA\n"
                              : ""},
                  {"PAD", pad},
                  {"RUN", run}});
}

std::string flex_fn(const CaseSpec& c) {
  std::string mods, positions;
  if (c.attention.soft_cap) mods += "        score = SOFT_CAP * torch.tanh(score / SOFT_CAP)  # soft-cap\n";
  if (c.attention.alibi) {
    positions =
        "    # absolute positions of every packed query and key within its request, for ALiBi\n"
        "    q_pos = torch.from_numpy(np.concatenate([qa[:, 0] for _, _, _, qa, _ in requests()])).to(dev)\n"
        "    k_pos = torch.from_numpy(np.concatenate([kk[0] for _, _, _, _, kk in requests()])).to(dev)\n"
        "    slopes = torch.tensor(ALIBI_SLOPES, device=dev)\n";
    mods += "        score = score + slopes[h] * (k_pos[kv_idx] - q_pos[q_idx])  # ALiBi, absolute positions\n";
  }
  return py_fill(R"PY(

def run_library(torch, q, k, v):
    """PyTorch's flex_attention (compiled) on the whole batch packed as one sequence: the block mask keeps
    each query inside its request, the score_mod applies the logit transforms. Returns O and LSE."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as e:
        cannot(f"needs flex_attention (PyTorch >= 2.5) for the score_mod: {e}")
    dev, dt = "cuda", getattr(torch, TORCH_DTYPE)
    dense = np.zeros((q.shape[0], k.shape[0]), dtype=bool)  # [all queries, all keys]
    for r, qs, ks, q_abs, kk in requests():
        dense[qs, ks] = allowed(r, q_abs, kk)
    dense = torch.from_numpy(dense).to(dev)
$(POSITIONS)
    def mask_mod(b, h, q_idx, kv_idx):
        return dense[q_idx, kv_idx]

    def score_mod(score, b, h, q_idx, kv_idx):  # score = q . k * SM_SCALE
$(MODS)        return score

    block_mask = create_block_mask(mask_mod, None, None, q.shape[0], k.shape[0], device=dev)
    qt, kt, vt = (torch.from_numpy(x).to(dev, dt).transpose(0, 1)[None] for x in (q, k, v))  # [1, heads, tokens, d]
    o, lse = torch.compile(flex_attention)(qt, kt, vt, score_mod=score_mod, block_mask=block_mask, scale=SM_SCALE,
                                           enable_gqa=True, return_lse=True)
    # flex_attention's LSE is natural log, as attnscope's; a query that sees no key gets O = 0, LSE = -inf
    return o[0].transpose(0, 1).float().cpu().numpy(), lse[0].transpose(0, 1).float().cpu().numpy()
)PY",
                 {{"POSITIONS", positions}, {"MODS", mods}});
}

// need_gpu(): PyTorch with CUDA, and the family's module when it has one.
std::string need_fn(const ScriptPart& part) {
  const bool mod = !part.module.empty();
  return py_fill(
      py_fill(R"PY(

def need_gpu():
    """$(WHAT) and a CUDA device, or exit 2."""
    try:
$(IMPORT)        import torch
    except Exception as e:
        cannot(f"needs $(NEEDS): {e}")
    if not torch.cuda.is_available():
        cannot("needs a CUDA device (torch.cuda.is_available() is False)")
$(VERSION)    print(f"{LIBRARY}: PyTorch {torch.__version__}, {torch.cuda.get_device_name()}")
    return $(RETURN)
)PY",
              {{"WHAT", mod ? part.module_title + ", PyTorch" : "PyTorch"},
               {"IMPORT", mod ? "        import $(MOD)\n" : ""},
               {"NEEDS", mod ? "$(PKG)==$(PIN) and PyTorch with CUDA\"\n               f\" (pip install $(PKG)==$(PIN))"
                             : "PyTorch with CUDA"},
               {"VERSION", mod ? "    if $(MOD).__version__ != \"$(PIN)\":\n"
                                 "        print(f\"note: $(MOD) {$(MOD).__version__} is installed; attnscope compiled $(PIN)\")\n"
                               : ""},
               {"RETURN", mod ? "torch, $(MOD)" : "torch"}}),
      {{"MOD", part.module}, {"PKG", part.package}, {"PIN", part.pin}});
}

std::string main_fn(const CaseSpec& c, const Choice& ch) {
  const ScriptPart& p = ch.part;
  const std::string& mod = p.module;
  std::string gpu;
  if (c.fp8_kv()) {
    gpu = fp8_main_body(c, p, ch.api == ScriptApi::kFamily, p.refusal.empty());
  } else {
    gpu =
        "    q, k, v = load(\"q\"), load(\"k\"), load(\"v\")\n"
        "    if args.reference_only:\n"
        "        ok = check_reference(*reference(q, k, v))\n"
        "        print(\"MATCH\" if ok else \"MISMATCH\")\n"
        "        return 0 if ok else 1\n";
    if (!p.refusal.empty())
      gpu += py_comment("    # ", "    # ", p.refusal + ". This script does not guess another formulation.") + "    cannot(" +
             py_str(p.label + " cannot express this case: " + p.refusal) + ")\n";
    else
      gpu += (mod.empty() ? "    torch = need_gpu()\n" : "    torch, " + mod + " = need_gpu()\n") +
             "    try:\n        o_lib, lse_lib = run_library(" +
             (mod.empty() ? "torch, q, k, v)\n" : "torch, " + mod + ", q)\n") +
             "    except Exception as e:  # the library refused the case or failed: nothing to compare\n"
             "        cannot(f\"{LIBRARY} raised {type(e).__name__}: {e}\")\n"
             "    o_ref, lse_ref = reference(q, k, v)\n"
             "    ok = compare(o_lib, lse_lib, o_ref, lse_ref, naive_lowp(torch, q, k, v))\n"
             "    print(\"MATCH\" if ok else \"MISMATCH\")\n"
             "    return 0 if ok else 1\n";
  }
  return py_fill(R"PY(

def main():
    ap = argparse.ArgumentParser(description="attnscope repro: exit 0 match, 1 mismatch, 2 cannot run here")
    ap.add_argument("--reference-only", action="store_true",
                    help="numpy only: this script's fp64 reference against attnscope's recorded $(REF)")
    args = ap.parse_args()
$(GPU)

if __name__ == "__main__":
    sys.exit(main())
)PY",
                 {{"GPU", gpu}, {"REF", reference_id()}});
}

}  // namespace

std::string script_target(const std::vector<std::string>& backends, const std::optional<std::string>& requested) {
  if (requested) {
    if (std::find(backends.begin(), backends.end(), *requested) != backends.end()) return *requested;
    throw std::invalid_argument("--script-backend: \"" + *requested + "\" is not a backend of this run (" + join(backends) + ")");
  }
  if (backends.empty()) throw std::invalid_argument("--export-script: this run has no backends");
  for (const auto& b : backends)
    if (const BackendFamily* f = family_of(b); f && f->script_part) return b;
  for (const auto& b : backends)
    if (const BackendInfo* i = backend_info(b); !i || i->role == Role::kNone || i->role == Role::kPlanTwin) return b;
  return backends.front();
}

ScriptApi script_api(const CaseSpec& c, const std::string& target) {
  if (c.has_sinks()) return ScriptApi::kSinksTorch;  // no library of the script takes them
  if (const BackendFamily* f = family_of(target); f && f->script_part) return ScriptApi::kFamily;
  return c.attention.soft_cap || c.attention.alibi ? ScriptApi::kFlexAttention : ScriptApi::kSdpa;
}

// The scripts write attnscope's mask and logit in numpy / PyTorch from the case's fields; they do
// not translate expressions, so a case with one is refused rather than scripted without it.
// The session as a script writes it: a mask_mod stays (allowed() evaluates it in numpy); a score_mod
// of the soft-cap / ALiBi forms becomes those parameters, which every library path of the script
// passes natively; any other score_mod is refused.
CaseSpec script_case(const CaseSpec& c) {
  CaseSpec out = c;
  const auto& a = c.attention;
  if (c.has_sinks() && c.fp8_kv())  // the FP8 scripts' references have no sink term
    throw std::invalid_argument(
        "the repro script does not write attention sinks with an FP8 KV cache; export the case instead (run --export FILE), "
        "which replays it bit for bit");
  if (!a.score_mod) return out;
  const auto lowered = lower_score_mod(Expr::parse(*a.score_mod, Expr::Kind::kScore));
  if (!lowered)
    throw std::invalid_argument("the repro script writes a score_mod only of the forms " +
                                std::string(lowered_score_forms_text()) + ", not \"" + *a.score_mod +
                                "\"; export the case instead (run --export FILE), which replays it bit for bit");
  out.attention.score_mod.reset();
  out.attention.soft_cap = lowered->soft_cap;
  out.attention.alibi = lowered->alibi;
  return out;
}

static Session script_session(const Session& s) {
  Session ls = s;
  ls.file.spec = script_case(s.spec());
  return ls;
}

std::string make_repro_script(const Session& s_in, const std::string& target) {
  const Session s = script_session(s_in);
  const CaseSpec& c = s.spec();
  const Choice ch = choose(c, s.plan, target);
  const bool runs = ch.part.refusal.empty();
  std::string py = header(s, target, ch) + constants(s, target, ch) + batch_fns(c);
  if (runs)
    py += (ch.api == ScriptApi::kSdpa            ? sdpa_fn(c, target)
           : ch.api == ScriptApi::kFlexAttention ? flex_fn(c)
           : ch.api == ScriptApi::kSinksTorch    ? sinks_run_fn(c)
                                                 : ch.part.run_library) +
          need_fn(ch.part);
  return py + reference_fns(c, runs) + report_fns(runs) + fp8_fns(c, runs) + main_fn(c, ch);
}

int export_script(const Session& s, const std::string& dir, const std::string& target) {
  script_session(s);  // refuses a score_mod the script cannot write, before anything is written
  prepare_output_dir(dir);
  const CaseSpec& c = s.spec();
  const Workload w = make_workload(c, s.plan.pages);
  int files = write_input_npys(c, s.plan.pages, w, dir);
  files += write_result_npys(s, dir);
  files += write_fp8_npys(s, w, dir);
  if (s.plan.sparse) {  // the selection the plan made into the mask bits: allowed() reads it (sparse_kept)
    std::vector<int> idx;
    for (const SparseSelection& sel : *s.plan.sparse) idx.insert(idx.end(), sel.idx.begin(), sel.idx.end());
    write_npy_in(dir, "sparse_indices.npy", idx, {c.total_q(), c.sparse->top_k});
    ++files;
  }
  const Choice ch = choose(script_case(c), s.plan, target);
  if (ch.part.write_arrays) {
    const ScriptNpyWriter out{[&](const std::string& name, const std::vector<float>& data, const std::vector<int64_t>& shape) {
                                write_npy_in(dir, name, data, shape);
                              },
                              [&](const std::string& name, const std::vector<int>& data, const std::vector<int64_t>& shape) {
                                write_npy_in(dir, name, data, shape);
                              }};
    files += ch.part.write_arrays(c, s.plan, w, out);
  }
  const std::string case_text = case_file_to_json(make_repro(s)).dump(2) + "\n", script = make_repro_script(s, target);
  write_file_in(dir, "case.json", {case_text});
  write_file_in(dir, "repro.py", {script});
  return files + 2;
}

}  // namespace attnscope
