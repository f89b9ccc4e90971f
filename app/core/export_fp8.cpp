// The FP8 part of the repro script (export_fp8.h). The script's frame stays export_script.cpp's; this
// file adds the FP8 inputs (stored values, scales, originals), the two fp64 ideals and the split of
// the error into FP8's and the library's.
#include "export_fp8.h"

#include "attnscope/fp8.h"
#include "attnscope/py_text.h"
#include "dump.h"

namespace attnscope {

namespace {

const char* torch_fp8(Fp8Format f) { return f == Fp8Format::kE4M3 ? "float8_e4m3fn" : "float8_e5m2"; }

const char* granularity_note(ScaleGranularity g) {
  switch (g) {
    case ScaleGranularity::kTensor:
      return "one scale for K, one for V";
    case ScaleGranularity::kHead:
      return "one scale per KV head, for K and for V";
    case ScaleGranularity::kToken:
      return "one scale per token and KV head, for K and for V";
  }
  return "";
}

// Scales of one tensor in the shape the script reads: tensor [1], head [kv_heads], token
// [total_kv, kv_heads] gathered from the pool slots in logical order (request by request, key by key).
void write_scales(const CaseSpec& c, const PageTable& pt, const std::vector<float>& s, const std::string& dir,
                  const std::string& name) {
  const auto g = c.kv_cache.scales.granularity;
  const int Hk = c.num_kv_heads;
  if (g != ScaleGranularity::kToken) {
    write_npy_in(dir, name, s, {static_cast<int64_t>(s.size())});
    return;
  }
  std::vector<float> out;
  out.reserve(static_cast<size_t>(c.total_kv()) * Hk);
  for (int r = 0; r < static_cast<int>(c.requests.size()); ++r)
    for (int k = 0; k < c.requests[r].kv_len; ++k)
      for (int h = 0; h < Hk; ++h) out.push_back(s[scale_index(g, pt.page_of(r, k), k % pt.page_size, h, pt.page_size, Hk)]);
  write_npy_in(dir, name, out, {c.total_kv(), Hk});
}

}  // namespace

std::string fp8_case_text(const CaseSpec& c) {
  if (!c.fp8_kv()) return "";
  std::string s =
      std::string(", KV ") + fp8_name(*c.kv_cache.fp8) + " (" + granularity_name(c.kv_cache.scales.granularity) + " scales)";
  if (c.fp8_attention) s += std::string(", FP8 attention (Q ") + fp8_name(*c.kv_cache.fp8) + ")";
  return s;
}

std::string fp8_files_note(const CaseSpec& c) {
  if (!c.fp8_kv()) return "";
  std::string s = std::string(" FP8: ") +
                  (c.fp8_attention ? std::string("q.npy, k.npy and v.npy hold the stored ")
                                   : std::string("q.npy holds ") + dtype_name(c.dtype) + " values, k.npy and v.npy the stored ") +
                  fp8_name(*c.kv_cache.fp8) +
                  " values; k_scale.npy / v_scale.npy their scales (value = stored * scale; tensor [1], head [kv_heads], "
                  "token [tokens, kv_heads]); k_orig.npy / v_orig.npy";
  if (c.fp8_attention) s += ", q_orig.npy";
  s += " the values before quantisation";
  if (c.fp8_attention) s += "; q_scale.npy [1] Q's scale";
  return s +
         "; o_ / lse_ideal_dequantised.npy and o_ / lse_ideal_original.npy attnscope's two ideals (its reference over "
         "stored * scale and over the original values);";
}

std::string fp8_constants(const CaseSpec& c) {
  if (!c.fp8_kv()) return "";
  const Fp8Format f = *c.kv_cache.fp8;
  const auto g = c.kv_cache.scales.granularity;
  return py_comment("# ", "# ",
                    "FP8 KV cache (attnscope's docs/conventions.md section 10): an element's value is its stored FP8 value "
                    "times its scale. The dequantised ideal is the fp64 reference over stored * scale (what a perfect "
                    "kernel given these bytes returns): the library's distance to it is the kernel error. The original "
                    "ideal is the reference over the values before quantisation: the distance between the two ideals is "
                    "the quantisation error, FP8's and not the library's.") +
         "KV_FP8, TORCH_FP8 = \"" + fp8_name(f) + "\", \"" + torch_fp8(f) + "\"  # attnscope's name, PyTorch's dtype\n" +
         "SCALE_GRANULARITY = \"" + granularity_name(g) + "\"  # " + granularity_note(g) + "\n" + "FP8_ATTENTION = " +
         (c.fp8_attention ? "True  # Q is quantised too (q.npy stored, q_scale.npy); the output is in DTYPE\n"
                          : "False  # Q stays in DTYPE\n");
}

std::string fp8_fns(const CaseSpec& c, bool runs) {
  if (!c.fp8_kv()) return "";
  std::string py = R"PY(

def scale_of(name):
    """A scale file as an array that broadcasts over [tokens, heads, d]: tensor [1], head [kv_heads] or token
    [tokens, kv_heads] (logical order, as k.npy)."""
    s = load(name)
    if s is None:
        cannot(f"{name}.npy is missing")
    s = s.astype(np.float64)
    return s.reshape(s.shape[0], -1, 1) if s.ndim == 2 else s.reshape(1, -1, 1)


def dequantised(q, k, v):
    """The values a kernel given these bytes computes with, in fp64: stored FP8 value * its scale (exact in fp64)."""
    if FP8_ATTENTION:
        q = q.astype(np.float64) * scale_of("q_scale")
    return q, k.astype(np.float64) * scale_of("k_scale"), v.astype(np.float64) * scale_of("v_scale")


def originals(q):
    """The values before quantisation: the inputs of the original ideal."""
    return (load("q_orig") if FP8_ATTENTION else q), load("k_orig"), load("v_orig")


def max_abs(a, b):
    both = np.isfinite(a) & np.isfinite(b)
    return float(np.abs(a[both].astype(np.float64) - b[both]).max(initial=0.0))


def fp8_summary(o_lib, o_ref, o_orig):
    """The two errors apart: FP8's (quantisation) and the library's (kernel), and the total a user sees."""
    print(f"errors: quantisation {max_abs(o_ref, o_orig):.3g} (FP8's: the dequantised vs the original ideal), "
          f"kernel {max_abs(o_lib, o_ref):.3g} ({LIBRARY} vs the dequantised ideal), "
          f"total {max_abs(o_lib, o_orig):.3g} ({LIBRARY} vs the original ideal)")


def check_ideals(o_ref, lse_ref, o_orig, lse_orig):
    """--reference-only: this script's two fp64 ideals against attnscope's (its reference over stored * scale
    and over the original values)."""
    ok = check_reference(o_ref, lse_ref, "ideal_dequantised", "fp64 dequantised ideal")
    ok = check_reference(o_orig, lse_orig, "ideal_original", "fp64 original ideal") and ok
    print("quantisation error (FP8's, this script's fp64 ideals):")
    stats("dequantised vs original ideal", o_ref, o_orig)
    print("MATCH" if ok else "MISMATCH")
    return 0 if ok else 1
)PY";
  if (runs)
    py += R"PY(

def dequantised_lowp(torch, q, k, v):
    """The FP8 cache rebuilt in PyTorch: the stored values as torch.TORCH_FP8 tensors (exact, checked: each is an
    FP8 number), then dequantised to DTYPE as an eager implementation does (attnscope's cpu.lowp):
    round(float32(stored) * scale). Returns float32 arrays holding DTYPE values."""
    dev, dt, f8 = "cuda", getattr(torch, TORCH_DTYPE), getattr(torch, TORCH_FP8)

    def rebuild(x, name):
        t = torch.from_numpy(x).to(dev)
        x8 = t.to(f8)  # the FP8 tensor a kernel reads
        if not torch.equal(x8.float(), t):
            cannot(f"{name}.npy holds a value that is not a {KV_FP8} number")
        scale = torch.from_numpy(scale_of(name + "_scale").astype(np.float32)).to(dev)
        return (x8.float() * scale).to(dt).float().cpu().numpy()

    return (rebuild(q, "q") if FP8_ATTENTION else q), rebuild(k, "k"), rebuild(v, "v")
)PY";
  return py;
}

std::string fp8_main_body(const CaseSpec& c, const ScriptPart& p, bool family, bool runs) {
  std::string py = std::string("    # FP8: ") + (c.fp8_attention ? "q.npy, k.npy and v.npy hold" : "k.npy and v.npy hold") +
                   " the stored values; the ideals read stored * scale and the originals\n"
                   "    q, k, v = load(\"q\"), load(\"k\"), load(\"v\")\n"
                   "    if args.reference_only:\n"
                   "        return check_ideals(*reference(*dequantised(q, k, v)), *reference(*originals(q)))\n";
  if (!runs)
    return py + py_comment("    # ", "    # ", p.refusal + ". This script does not guess another formulation.") + "    cannot(" +
           py_str(p.label + " cannot express this case: " + p.refusal) + ")\n";
  const std::string& mod = p.module;
  py += mod.empty() ? "    torch = need_gpu()\n" : "    torch, " + mod + " = need_gpu()\n";
  if (family)
    py +=
        "    ql, kl, vl = dequantised_lowp(torch, q, k, v)  # round(stored * scale) in DTYPE, for the 2x rule's baseline\n"
        "    try:  # the library reads the FP8 pool itself, with its scales\n"
        "        o_lib, lse_lib = run_library(torch, " +
        mod + ", q)\n";
  else
    py += py_comment("    # ", "    # ",
                     "the library takes no FP8 tensors here: Q, K and V go in dequantised to DTYPE, round(stored * scale) "
                     "from the FP8 tensors, as an eager implementation does; its kernel error is still measured against "
                     "the dequantised ideal") +
          "    ql, kl, vl = dequantised_lowp(torch, q, k, v)\n"
          "    try:\n"
          "        o_lib, lse_lib = run_library(torch, ql, kl, vl)\n";
  py +=
      "    except Exception as e:  # the library refused the case or failed: nothing to compare\n"
      "        cannot(f\"{LIBRARY} raised {type(e).__name__}: {e}\")\n"
      "    o_ref, lse_ref = reference(*dequantised(q, k, v))  # the dequantised ideal: the baseline of the kernel error\n"
      "    o_orig, _ = reference(*originals(q))  # the original ideal\n"
      "    print(\"quantisation error (FP8's, not the library's):\")\n"
      "    stats(\"dequantised vs original ideal\", o_ref, o_orig)\n"
      "    # the 2x rule's same-precision baseline reads the same FP8 bytes, dequantised to DTYPE as cpu.lowp does\n"
      "    ok = compare(o_lib, lse_lib, o_ref, lse_ref, naive_lowp(torch, ql, kl, vl), \"the dequantised ideal (kernel "
      "error)\")\n"
      "    fp8_summary(o_lib, o_ref, o_orig)\n"
      "    print(\"MATCH\" if ok else \"MISMATCH\")\n"
      "    return 0 if ok else 1\n";
  return py;
}

int write_fp8_npys(const Session& s, const Workload& w, const std::string& dir) {
  const CaseSpec& c = s.spec();
  if (!c.fp8_kv()) return 0;
  const PageTable& pt = s.plan.pages;
  const int64_t T = c.total_q(), K = c.total_kv();
  write_scales(c, pt, w.k_scale, dir, "k_scale.npy");
  write_scales(c, pt, w.v_scale, dir, "v_scale.npy");
  write_npy_in(dir, "k_orig.npy", logical_kv(c, pt, w.k_orig, c.head_dim_qk), {K, c.num_kv_heads, c.head_dim_qk});
  write_npy_in(dir, "v_orig.npy", logical_kv(c, pt, w.v_orig, c.head_dim_vo), {K, c.num_kv_heads, c.head_dim_vo});
  int files = 4;
  if (c.fp8_attention) {
    write_npy_in(dir, "q_orig.npy", w.q_orig, {T, c.num_qo_heads, c.head_dim_qk});
    write_npy_in(dir, "q_scale.npy", std::vector<float>{w.q_scale}, {1});
    files += 2;
  }
  for (const auto& [name, r] :
       {std::pair{"ideal_dequantised", s.dequantised_ideal}, std::pair{"ideal_original", s.original_ideal}}) {
    if (!r || !r->ok()) continue;
    write_npy_in(dir, std::string("o_") + name + ".npy", r->o, {T, c.num_qo_heads, c.head_dim_vo});
    write_npy_in(dir, std::string("lse_") + name + ".npy", r->lse, {T, c.num_qo_heads});
    files += 2;
  }
  return files;
}

}  // namespace attnscope
