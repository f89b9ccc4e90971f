#!/usr/bin/env python3
"""FlashAttention-2 in-process (flash_attn.varlen / flash_attn.kvcache) beside its peers, in one run on one GPU.

Prefill: every prefill case given runs `attnscope-cli bench --backends flash_attn.varlen,cuda.flash` on a
ragged copy of it (flash_attn_varlen_func reads K/V as one ragged tensor; PyTorch's SDPA reads contiguous
[batch, heads, seq, dim] tensors, so a paged case's SDPA time is a contiguous-cache time either way), and
PyTorch's SDPA with the FlashAttention-2 backend (and compiled flex_attention where SDPA cannot express
the mask) on the same shapes, through tests/peer/bench_table.py's sdpa_times (CUDA events, 3 warm-ups,
median of --reps). Cases FA2 refuses (mask_mod, documents) are listed with the refusal.

Decode: every decode case given runs `--backends flash_attn.kvcache,flashinfer.decode,cuda.flash` three
ways: as given (page 16: flash_attn.kvcache refuses it), paged with 256-token pages (the page size FA2's
paged cache needs; FA2 always runs its split-KV kernel there), and contiguous (ragged storage: a
[batch, seqlen_k] cache), each with FA2's own num_splits (printed from the backend's message), then
with /split/planner fixed to force splits.

usage: python3 bench/fa2_bench.py --cli build/app/attnscope-cli --prefill bench/prefill-*.json \\
           --decode bench/decode-paged.json [--reps 30] [--json-out RUN.json]
"""
import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "peer"))
import bench_table  # noqa: E402  (sdpa_times, time_cuda)


def bench(cli, case, backends, reps):
    """({backend: median ms or status}, the first backend's num_splits note) from attnscope-cli bench --json."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(case, f)
        path = f.name
    r = subprocess.run([cli, "bench", path, "--json", "--reps", str(reps), "--backends", ",".join(backends)],
                       capture_output=True, text=True)
    os.unlink(path)
    try:
        rep = json.loads(r.stdout)
    except json.JSONDecodeError:
        return {b: "bench failed: " + r.stderr.strip()[:200] for b in backends}, ""
    out = {x["backend"]: (x["median_ms"] if x["status"] == "ok" else x["status"]) for x in rep["rows"]}
    note = next((x.get("note", "") for x in rep["rows"] if x["backend"] == backends[0]), "")
    m = re.search(r"num_splits=[^;]*", note)
    return out, (m.group(0) if m else "")


def fmt(v):
    return f"{v:.4f}" if isinstance(v, float) else "refused" if v else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default="build/app/attnscope-cli")
    ap.add_argument("--prefill", nargs="*", default=[])
    ap.add_argument("--decode", nargs="*", default=[])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json-out")
    a = ap.parse_args()
    import torch

    dev = torch.cuda.get_device_name(0)
    rows = []
    print(f"Device: {dev}; PyTorch {torch.__version__}; CUDA events, median of {a.reps} after 3 warm-ups.\n")
    print("| prefill case | flash_attn.varlen | cuda.flash | SDPA FA2 | flex (compiled) | flash_attn.varlen / SDPA FA2 |")
    print("|---|---|---|---|---|---|")
    for path in a.prefill:
        case = json.load(open(path))
        rag = copy.deepcopy(case)
        rag["kv_cache"] = {"storage": "ragged"}
        rag.pop("comparisons", None)
        t, _ = bench(a.cli, rag, ["flash_attn.varlen", "cuda.flash"], a.reps)
        exprs = None
        if "mask_mod" in case.get("attention", {}) or "score_mod" in case.get("attention", {}):
            pj = subprocess.run([a.cli, "plan", path, "--json"], capture_output=True, text=True)
            exprs = json.loads(pj.stdout).get("expressions")
        peers = bench_table.sdpa_times(torch, case, a.reps, exprs) if not isinstance(t.get("flash_attn.varlen"), str) else {}
        fa, sd = t.get("flash_attn.varlen"), peers.get("sdpa_fa2")
        ratio = f"{fa / sd:.3f}" if isinstance(fa, float) and isinstance(sd, float) else "-"
        print(f"| {case['name']} | {fmt(fa)} | {fmt(t.get('cuda.flash'))} | {fmt(sd)} | {fmt(peers.get('flex_compiled'))} | {ratio} |",
              flush=True)
        if isinstance(fa, str):
            print(f"|   (refused: {fa[:160]}) | | | | | |")
        rows.append({"case": case["name"], "kind": "prefill", "attnscope": t, "peers": peers})
    print("\n| decode case | storage | FA2 num_splits | flash_attn.kvcache | flashinfer.decode | cuda.flash | kvcache / flashinfer.decode |")
    print("|---|---|---|---|---|---|---|")
    for path in a.decode:
        case = json.load(open(path))
        case.pop("comparisons", None)
        variants = []
        paged = copy.deepcopy(case)
        paged["kv_cache"] = dict(case.get("kv_cache", {}), storage="paged", page_size=256)
        variants.append(("paged, page 256", paged))
        contig = copy.deepcopy(case)
        contig["kv_cache"] = {"storage": "ragged"}
        variants.append(("contiguous", contig))
        for name, v in list(variants):
            forced = copy.deepcopy(v)
            # 8 splits of the longest request (fixed_split_size counts pages, tokens when ragged)
            kv = max(r["kv_len"] for r in v["requests"])
            ps = v["kv_cache"].get("page_size", 1) if v["kv_cache"]["storage"] == "paged" else 1
            forced["split"] = {"planner": "fixed", "fixed_split_size": max(1, -(-kv // (8 * ps)))}
            variants.append((name + ", num_splits forced", forced))
        for name, v in variants:
            t, splits = bench(a.cli, v, ["flash_attn.kvcache", "flashinfer.decode", "cuda.flash"], a.reps)
            fa, fi = t.get("flash_attn.kvcache"), t.get("flashinfer.decode")
            ratio = f"{fa / fi:.3f}" if isinstance(fa, float) and isinstance(fi, float) else "-"
            print(f"| {case['name']} | {name} | {splits} | {fmt(fa)} | {fmt(fi)} | {fmt(t.get('cuda.flash'))} | {ratio} |", flush=True)
            rows.append({"case": case["name"], "kind": "decode", "variant": name, "num_splits": splits, "attnscope": t})
    print("\nTimes in ms. Ratios below 1.0: flash_attn.* is faster.")
    if a.json_out:
        json.dump({"device": dev, "torch": torch.__version__, "reps": a.reps, "rows": rows}, open(a.json_out, "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
