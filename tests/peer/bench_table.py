#!/usr/bin/env python3
"""Benchmark table: every GPU backend of attnscope beside PyTorch's SDPA, in one run on one GPU.

For each case file it runs `attnscope-cli bench CASE --json` (cuda.flash and every flashinfer.* and
cudnn.* backend, CUDA events, median of --reps after 3 warm-ups), then times PyTorch's
scaled_dot_product_attention on the same shapes and dtype with the FlashAttention-2 backend and the
cuDNN backend (CUDA events, the same warm-up and median), and prints one Markdown table of times
and ratios. The README's benchmark table is this script's output.

PyTorch runs on contiguous [batch, heads, seq, dim] tensors (its API has no paged KV), so its time
is a lower bound for the same work on a paged cache. Shapes the SDPA backends cannot run are shown
as "-" with the reason in the JSON.

usage: python3 tests/peer/bench_table.py --cli build/app/attnscope-cli bench/prefill-*.json bench/decode-paged.json
"""
import argparse
import json
import subprocess
import sys

ATTNSCOPE = ["cuda.flash", "flashinfer.prefill", "flashinfer.prefill_sm90", "flashinfer.decode", "cudnn.sdpa"]


def time_cuda(torch, fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def sdpa_times(torch, case, reps):
    """PyTorch SDPA on the case's shapes: {"sdpa_fa2": ms or reason, "sdpa_cudnn": ...}."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    reqs = case["requests"]
    qs, ks = {r["q_len"] for r in reqs}, {r["kv_len"] for r in reqs}
    att = case.get("attention", {})
    out = {}
    if len(qs) != 1 or len(ks) != 1:
        return {k: "ragged batch: SDPA needs one length" for k in ("sdpa_fa2", "sdpa_cudnn")}
    if att.get("window") or att.get("soft_cap") or att.get("alibi") or att.get("local_chunk") or att.get("prefix_lm"):
        return {k: "mask or logit transform SDPA cannot express" for k in ("sdpa_fa2", "sdpa_cudnn")}
    ql, kl = qs.pop(), ks.pop()
    causal = att.get("causal", True) and ql > 1
    if causal and ql != kl:
        return {k: "causal with q_len != kv_len: SDPA's is_causal is top-left aligned" for k in ("sdpa_fa2", "sdpa_cudnn")}
    B, hq, hk = len(reqs), case["heads"]["qo"], case["heads"]["kv"]
    d = case["head_dim"]["qk"]
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[case.get("dtype", "bf16")]
    g = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(B, hq, ql, d, device="cuda", dtype=dt, generator=g)
    k = torch.randn(B, hk, kl, d, device="cuda", dtype=dt, generator=g)
    v = torch.randn(B, hk, kl, d, device="cuda", dtype=dt, generator=g)
    for name, be in (("sdpa_fa2", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hk)
                out[name] = time_cuda(torch, fn, reps)
        except RuntimeError as e:
            out[name] = "not run: " + str(e).splitlines()[0][:160]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--cli", default="build/app/attnscope-cli")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json-out", help="write every number and reason here")
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"bench_table needs PyTorch: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_table needs a CUDA device", file=sys.stderr)
        return 2
    rows, dev = [], torch.cuda.get_device_name(0)
    for path in a.cases:
        case = json.load(open(path))
        r = subprocess.run([a.cli, "bench", path, "--json", "--reps", str(a.reps)], capture_output=True, text=True)
        try:
            rep = json.loads(r.stdout)
        except json.JSONDecodeError:
            print(f"{path}: attnscope-cli bench failed: {r.stderr.strip()[:300]}", file=sys.stderr)
            continue
        row = {"case": case["name"], "path": path, "attnscope_device": rep["device"], "flops": rep["flops"], "times": {}, "reasons": {}}
        for x in rep["rows"]:
            if x["status"] == "ok":
                row["times"][x["backend"]] = x["median_ms"]
            else:
                row["reasons"][x["backend"]] = x["status"]
        for k, v in sdpa_times(torch, case, a.reps).items():
            (row["times"] if isinstance(v, float) else row["reasons"])[k] = v
        rows.append(row)
        print(f"{case['name']}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in row["times"].items()), file=sys.stderr, flush=True)

    cols = ATTNSCOPE + ["sdpa_fa2", "sdpa_cudnn"]
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else "none"
    print(f"\nDevice: {dev}; PyTorch {torch.__version__} (its cuDNN {cudnn}); CUDA events, median of {a.reps} after 3 warm-ups; bf16.\n")
    print("| case | " + " | ".join(cols) + " | best attnscope / best SDPA (time) | fastest |")
    print("|---|" + "---|" * (len(cols) + 2))
    for row in rows:
        t = row["times"]
        cells = [f"{t[c]:.3f}" if c in t else "-" for c in cols]
        ours = [t[c] for c in ATTNSCOPE if c in t]
        theirs = [t[c] for c in ("sdpa_fa2", "sdpa_cudnn") if c in t]
        ratio = f"{min(ours) / min(theirs):.2f}" if ours and theirs else "-"
        fastest = min(t, key=t.get) if t else "-"
        print(f"| {row['case']} | " + " | ".join(cells) + f" | {ratio} | {fastest} |")
    print("\nTimes in ms (lower is better); the ratio is attnscope's fastest backend time over PyTorch's fastest "
          "SDPA time on the same shapes (below 1.0: attnscope's backend is faster). '-': not run (reasons in --json-out).")
    if a.json_out:
        json.dump({"device": dev, "torch": torch.__version__, "reps": a.reps, "rows": rows}, open(a.json_out, "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
