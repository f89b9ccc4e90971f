// merge.py for a partitioned case (export_merge.h).
#include "export_merge.h"

#include <cmath>
#include <fstream>
#include <stdexcept>

#include "attnscope/partition.h"
#include "attnscope/registry.h"
#include "npy.h"

namespace attnscope {

namespace {

const char* kMergePy = R"PY(
import os, sys
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
load = lambda n: np.load(os.path.join(HERE, n + ".npy"))
parts = [(load(f"part{k}_o"), load(f"part{k}_lse")) for k in range(NUM_PARTS)]
o_merged, lse_merged, o_ref = load("o_merged"), load("lse_merged"), load("o_ref")
LOG2E = np.float32(1.4426950408889634)

def merge_numpy(read_base):
    """attnscope's merge: partials folded in order, weights in base 2, O rounded once at the end."""
    def lse2(s):  # the partial's LSE as the merge reads it, in base-2 units
        return (s * LOG2E if read_base == "e" else s).astype(np.float32)
    o = parts[0][0].astype(np.float32).copy()
    l = lse2(parts[0][1])
    for ob, sb in parts[1:]:
        lb = lse2(sb)
        m = np.maximum(l, lb)
        safe = np.where(np.isneginf(m), 0, m)
        ea, eb = np.exp2(l - safe), np.exp2(lb - safe)
        s = ea + eb
        wa = np.where(np.isneginf(m), 0, ea / np.where(s == 0, 1, s)).astype(np.float32)
        wb = np.where(np.isneginf(m), 0, eb / np.where(s == 0, 1, s)).astype(np.float32)
        o = (wa[..., None] * o + wb[..., None] * ob).astype(np.float32)
        l = np.where(np.isneginf(m), -np.inf, m + np.log2(np.where(s == 0, 1, s))).astype(np.float32)
    return to_dtype(o)

def to_dtype(o):
    """O rounded to the case dtype once, as attnscope's merge does (bf16 / fp16 round to nearest even)."""
    if DTYPE == "fp16":
        return o.astype(np.float16).astype(np.float32)
    if DTYPE == "bf16":
        u = o.astype(np.float32).view(np.uint32)
        r = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)).astype(np.uint32)
        return np.where(np.isnan(o), o, r.view(np.float32))
    return o

def report(name, o):
    d_att = np.nanmax(np.abs(o - o_merged)) if o.size else 0.0
    d_ref = np.nanmax(np.abs(o - o_ref)) if o.size else 0.0
    print(f"  {name:<40} vs attnscope's merge {d_att:.3e}   vs the reference {d_ref:.3e}")
    return d_att, d_ref

print(f"{TARGET}: {NUM_PARTS} partials, LSE in base {NATIVE} (its descriptor); attnscope merged reading base {READ}")
res = {b: report(f"numpy merge reading base {b}", merge_numpy(b)) for b in ("e", "2")}
try:
    import torch, flashinfer
    v = torch.from_numpy(np.stack([p[0] for p in parts], axis=1)).cuda()   # [rows, states, heads, dim]
    s = torch.from_numpy(np.stack([p[1] for p in parts], axis=1)).cuda()   # [rows, states, heads]
    s2 = s * float(LOG2E) if NATIVE == "e" else s                          # FlashInfer reads log2
    vm, _ = flashinfer.merge_states(v.to(torch.bfloat16).contiguous(), s2.float().contiguous())
    report("FlashInfer's merge_states (log2)", vm.float().cpu().numpy())
except Exception as e:  # no PyTorch, FlashInfer or GPU here: the NumPy merges stand alone
    print(f"  FlashInfer's merge_states: not run ({type(e).__name__}: {e})")
best_ref = min(res, key=lambda b: res[b][1])
print(f"the reference agrees with the merge reading base {best_ref}; the partials' own base is {NATIVE}")
# attnscope's merge is reproduced when the base it read gives its output (fma and numpy's op order: a few ulps)
ok = res[READ][0] <= TOL
print(("reproduced" if ok else "NOT reproduced") + f": attnscope's merge = the merge reading base {READ} within {TOL:g}")
sys.exit(0 if ok else 1)
)PY";

const Result& partitioned(const Session& s, const std::string& target) {
  const Result* r = s.result(target);
  if (!r || !r->ok() || !r->partition)
    throw std::runtime_error("--export-script: " + target + " has no partitioned result here (" +
                             (!r ? std::string("not run")
                              : r->message.rfind(status_name(r->status), 0) == 0
                                  ? r->message
                                  : std::string(status_name(r->status)) + ": " + r->message) +
                             "); name another with --script-backend");
  return *r;
}

}  // namespace

std::string make_merge_script(const Session& s, const std::string& target) {
  const Result& r = partitioned(s, target);
  std::string py = "#!/usr/bin/env python3\n# attnscope merge repro: " + s.spec().name + ", " + target +
                   " (docs/partitions.md). numpy; FlashInfer's merge where torch + flashinfer + a GPU are here.\n";
  py += "TARGET = \"" + target + "\"\nNUM_PARTS = " + std::to_string(r.partition->parts.size()) + "\nNATIVE = \"" +
        lse_base_name(r.partition->native) + "\"\nREAD = \"" + lse_base_name(r.partition->read) + "\"\n";
  // numpy's op order and its lack of fma move O by an ulp of the dtype at most, near |O| <= 4
  py += std::string("DTYPE = \"") + dtype_name(s.spec().dtype) + "\"\n";
  py += std::string("TOL = ") +
        (s.spec().dtype == DType::kFp32   ? "1e-5"
         : s.spec().dtype == DType::kFp16 ? "1e-3"
                                          : "8e-3") +
        "\n";
  return py + kMergePy;
}

int export_merge_script(const Session& s, const std::string& dir, const std::string& target) {
  const Result& r = partitioned(s, target);
  const Result* ref = s.result(backend_for_role(Role::kReference));
  if (!ref || !ref->ok())
    throw std::runtime_error("--export-script: the merge script needs the reference's answer; it did not run");
  const CaseSpec& c = s.spec();
  const int64_t T = c.total_q(), H = c.num_qo_heads, D = c.head_dim_vo;
  int n = 0;
  for (size_t k = 0; k < r.partition->parts.size(); ++k) {
    const PartitionPart& p = r.partition->parts[k];
    std::vector<float> lse = p.lse;  // natural log in attnscope: back to the library's own base
    if (r.partition->native == LseBase::k2)
      for (float& x : lse) x = x == -INFINITY ? x : x * static_cast<float>(kLog2e);
    write_npy(dir + "/part" + std::to_string(k) + "_o.npy", p.o, {T, H, D});
    write_npy(dir + "/part" + std::to_string(k) + "_lse.npy", lse, {T, H});
    n += 2;
  }
  write_npy(dir + "/o_merged.npy", r.o, {T, H, D});
  write_npy(dir + "/lse_merged.npy", r.lse, {T, H});
  write_npy(dir + "/o_ref.npy", ref->o, {T, H, D});
  std::ofstream f(dir + "/merge.py");
  f << make_merge_script(s, target);
  if (!f) throw std::runtime_error("--export-script: cannot write " + dir + "/merge.py");
  return n + 4;
}

}  // namespace attnscope
