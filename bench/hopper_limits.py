"""Prints bench/hopper-limits.sh's table from its `attnscope-cli bench --json` files (one per row).

Every figure is a median of the run's repetitions; "of copy" divides by the device copy bandwidth that
the same bench run measured; ratios compare backends of the same run. Standard library only.
"""
import json
import os
import sys


def load(d, name):
    p = os.path.join(d, name + ".json")
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def row(b, backend):
    for r in (b or {}).get("rows", []):
        if r["backend"] == backend:
            return r
    return None


def cell(b, backend, what):
    r = row(b, backend)
    if r is None:
        return "not run"
    if r["status"] != "ok":
        return r["status"] + (": " + r["note"][:80] if r.get("note") else "")
    ms = r["median_ms"]
    if what == "gbps":
        return "%.3f ms = %.0f GB/s (%.0f%% of copy)" % (ms, r["kv_gbps"], 100 * r["copy_share"])
    return "%.3f ms = %.0f TF/s" % (ms, r["tflops"])


def ms(b, backend):
    r = row(b, backend)
    return r["median_ms"] if r and r["status"] == "ok" else None


def ratio(a, b, fmt="%.2fx"):
    return fmt % (a / b) if a and b else "n/a"


def main(d):
    runs = {n: load(d, n) for n in ("dec-bf16", "dec-fp8", "mla", "pre-causal", "pre-full", "sinks-on", "sinks-off")}
    first = next((b for b in runs.values() if b), None)
    if first is None:
        print("hopper-limits: no bench run produced a result")
        return 1
    copies = ", ".join("%.0f" % b["copy_gbps"] for b in runs.values() if b and b.get("copy_gbps"))
    print("device: %s; device copy bandwidth per run (GB/s, read + write): %s" % (first["device"], copies))
    print()
    print("| shape | attnscope (cuda.flash) | peers, same run | ratio |")
    print("|---|---|---|---|")
    b = runs["dec-bf16"]
    print("| decode 64 x 8192, 32/8 heads, d128, bf16, page 16 | %s | flashinfer.decode %s | %s of flashinfer.decode's time |"
          % (cell(b, "cuda.flash", "gbps"), cell(b, "flashinfer.decode", "gbps"), ratio(ms(b, "cuda.flash"), ms(b, "flashinfer.decode"))))
    f = runs["dec-fp8"]
    print("| same, FP8 e4m3 KV (tensor scales) | %s | flashinfer.decode %s | %s faster than its bf16 |"
          % (cell(f, "cuda.flash", "gbps"), cell(f, "flashinfer.decode", "gbps"), ratio(ms(b, "cuda.flash"), ms(f, "cuda.flash"))))
    m = runs["mla"]
    print("| MLA absorbed decode 64 x 4096, 128 heads, page 64 | %s | flashinfer.mla_sm90 %s | cuda.flash takes %s of its time |"
          % (cell(m, "cuda.flash", "gbps"), cell(m, "flashinfer.mla_sm90", "gbps"), ratio(ms(m, "cuda.flash"), ms(m, "flashinfer.mla_sm90"))))
    for name, label in (("pre-causal", "prefill 4 x 4096, 16 heads, d128, causal"), ("pre-full", "same, non-causal")):
        p = runs[name]
        best = min((x for x in (ms(p, "cudnn.sdpa"), ms(p, "python.fa3")) if x), default=None)
        print("| %s | %s | cudnn.sdpa %s; python.fa3 (FlashAttention-3) %s | %s of the better peer's speed |"
              % (label, cell(p, "cuda.flash", "tflops"), cell(p, "cudnn.sdpa", "tflops"), cell(p, "python.fa3", "tflops"),
                 ratio(best, ms(p, "cuda.flash"))))
    on, off = runs["sinks-on"], runs["sinks-off"]
    for backend in ("cuda.flash", "flashinfer.prefill"):
        a, z = ms(on, backend), ms(off, backend)
        cost = "%+.1f%%" % (100 * (a / z - 1)) if a and z else "n/a"
        print("| gpt-oss prefill 4 x 4096, 64/8 heads, d64, window 128, sinks on / off: %s | %s / %s | | sink cost %s |"
              % (backend, "%.3f ms" % a if a else "n/a", "%.3f ms" % z if z else "n/a", cost))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
