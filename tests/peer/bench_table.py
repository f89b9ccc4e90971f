#!/usr/bin/env python3
"""Benchmark table: every GPU backend of attnscope beside PyTorch's SDPA, in one run on one GPU.

For each case file it runs `attnscope-cli bench CASE --json` (cuda.flash and every flashinfer.* and
cudnn.* backend, CUDA events, median of --reps after 3 warm-ups), then times PyTorch's
scaled_dot_product_attention on the same shapes and dtype with the FlashAttention-2 backend and the
cuDNN backend (CUDA events, the same warm-up and median), and prints one Markdown table of times
and ratios. docs/performance.md's benchmark tables are this script's output.

SDPA's cuDNN path skips the softmax statistics when nothing needs gradients; attnscope's backends
always return the LSE. So the cuDNN call is timed twice: as F.scaled_dot_product_attention runs it
(sdpa_cudnn), and with the LSE computed (sdpa_cudnn_lse, aten._scaled_dot_product_cudnn_attention
with compute_log_sumexp=True): the same outputs as cudnn.sdpa, the like-for-like peer.

PyTorch runs on contiguous [batch, heads, seq, dim] tensors (its API has no paged KV), so its time
is a lower bound for the same work on a paged cache. Shapes the SDPA backends cannot run are shown
as "-" with the reason in the JSON.

A second table is issue 10's: cuda.flash against the peer that issue names for each shape, measured in the same
run: SDPA FlashAttention-2 for prefill, compiled flex_attention where SDPA cannot express the mask, SDPA cuDNN for
decode (single-token queries); the ratio is the peer's time over cuda.flash's (>= 1.0: cuda.flash is as fast).

usage: python3 tests/peer/bench_table.py --cli build/app/attnscope-cli bench/prefill-*.json bench/decode-paged.json
       python3 tests/peer/bench_table.py --from-json RUN.json   (the tables again from a saved --json-out; no GPU)
"""
import argparse
import json
import subprocess
import sys

ATTNSCOPE = ["cuda.flash", "flashinfer.prefill", "flashinfer.prefill_sm90", "flashinfer.decode", "cudnn.sdpa"]
PEERS = ["sdpa_fa2", "sdpa_cudnn", "sdpa_cudnn_lse", "flex_compiled"]


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


def flex_time(torch, case, reps, exprs=None):
    """Compiled flex_attention on a uniform batch with attnscope's window and soft-cap, or its
    mask_mod / score_mod (exprs: the plan JSON's "expressions", attnscope's PyTorch translation).

    attnscope's window W counts the query itself (key k visible iff q - W < k <= q, with q_len ==
    kv_len); its soft-cap is cap * tanh(scaled score / cap): flex's score is already scaled. With
    q_len == kv_len attnscope's absolute positions are flex's q_idx / kv_idx."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as e:
        return f"not run: {e}"
    reqs, att = case["requests"], case.get("attention", {})
    ql, kl = reqs[0]["q_len"], reqs[0]["kv_len"]
    exprs = exprs or {}
    if any(r["q_len"] != ql or r["kv_len"] != kl or "doc_starts" in r or "prefix_len" in r for r in reqs):
        return "not run: this script translates uniform batches without documents or prefixes"
    if ql != kl or (not att.get("causal", True) and "mask_mod" not in exprs):
        return "not run: this script translates only causal batches or mask_mods, with q_len == kv_len"
    W, cap = att.get("window"), att.get("soft_cap")
    B, hq, hk = len(reqs), case["heads"]["qo"], case["heads"]["kv"]
    d = case["head_dim"]["qk"] if isinstance(case["head_dim"], dict) else case["head_dim"]
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[case.get("dtype", "bf16")]
    g = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(B, hq, ql, d, device="cuda", dtype=dt, generator=g)
    k = torch.randn(B, hk, kl, d, device="cuda", dtype=dt, generator=g)
    v = torch.randn(B, hk, kl, d, device="cuda", dtype=dt, generator=g)

    def mask_mod(b, h, q_idx, kv_idx):
        m = kv_idx <= q_idx
        return m & (q_idx - kv_idx < W) if W else m

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    if exprs:
        # attnscope's translation: fully parenthesised torch code over these names
        env = {"torch": torch, "q_len": ql, "kv_len": kl, "prefix_len": 0, "_b": lambda x: torch.as_tensor(x) != 0}
        slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / hq) for i in range(hq)], device="cuda")
        env["_alibi"] = lambda h: slopes[torch.as_tensor(h).long()]
        causal_and = "(kv_idx <= q_idx) & " if att.get("causal", True) else ""
        if "mask_mod" in exprs:
            exec(f"def mask_mod(b, h, q_idx, kv_idx):\n    return {causal_and}_b({exprs['mask_mod']['torch']})\n", env)
            mask_mod = env["mask_mod"]
        if "score_mod" in exprs:
            exec(f"def score_mod(score, b, h, q_idx, kv_idx):\n    return {exprs['score_mod']['torch']}\n", env)
            score_mod, cap = env["score_mod"], True

    try:
        bm = create_block_mask(mask_mod, B, None, ql, kl, device="cuda")
        fa = torch.compile(flex_attention, dynamic=False)
        fn = lambda: fa(q, k, v, score_mod=score_mod if cap else None, block_mask=bm, enable_gqa=hq != hk)
        return time_cuda(torch, fn, reps)
    except Exception as e:  # compilation needs Triton and a C compiler
        return "not run: " + (str(e).splitlines() or [type(e).__name__])[0][:160]


def sdpa_times(torch, case, reps, exprs=None):
    """PyTorch SDPA on the case's shapes: {"sdpa_fa2": ms or reason, "sdpa_cudnn": ...}."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    reqs = case["requests"]
    qs, ks = {r["q_len"] for r in reqs}, {r["kv_len"] for r in reqs}
    att = case.get("attention", {})
    out = {}
    if len(qs) != 1 or len(ks) != 1:
        return {k: "ragged batch: SDPA needs one length" for k in PEERS}
    if exprs:
        # a mask_mod or score_mod: SDPA has no such thing; compiled flex_attention runs the same expression
        out = {k: "mask_mod / score_mod: SDPA cannot express it" for k in PEERS if k != "flex_compiled"}
        out["flex_compiled"] = flex_time(torch, case, reps, exprs)
        return out
    if att.get("alibi") or att.get("local_chunk") or att.get("prefix_lm"):
        return {k: "mask or logit transform this script does not translate" for k in PEERS}
    if att.get("window") or att.get("soft_cap"):
        # SDPA has neither; compiled flex_attention expresses both
        out = {k: "mask or logit transform SDPA cannot express" for k in PEERS if k != "flex_compiled"}
        out["flex_compiled"] = flex_time(torch, case, reps)
        return out
    out["flex_compiled"] = "only timed for cases SDPA cannot express (window, soft-cap)"
    ql, kl = qs.pop(), ks.pop()
    causal = att.get("causal", True) and ql > 1
    if causal and ql != kl:
        return {k: "causal with q_len != kv_len: SDPA's is_causal is top-left aligned" for k in PEERS}
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
    try:
        # the cuDNN kernel with its softmax statistics (logsumexp) written, as cudnn.sdpa always does
        lse = lambda: torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False)
        res = lse()
        if res[1].numel() < B * hq * ql:
            raise RuntimeError(f"no LSE returned ({tuple(res[1].shape)})")
        out["sdpa_cudnn_lse"] = time_cuda(torch, lse, reps)
    except RuntimeError as e:
        out["sdpa_cudnn_lse"] = "not run: " + str(e).splitlines()[0][:160]
    return out


def issue10_peer(row):
    """The peer issue 10 measures cuda.flash against on this row: (name, ms), or (None, None)."""
    t = row["times"]
    decode = row.get("decode", row["case"].startswith("decode"))
    for name in (["sdpa_cudnn"] if decode else ["sdpa_fa2", "flex_compiled"]):
        if name in t:
            return name, t[name]
    return None, None


def render(rows, dev, torch_version, cudnn, reps, before=None):
    """Both Markdown tables of a run (stdout); before: an earlier run's rows by case name, for issue 10's "before"
    column (how docs/performance.md's table shows what moved)."""
    cols = ATTNSCOPE + PEERS
    print(f"\nDevice: {dev}; PyTorch {torch_version} (its cuDNN {cudnn}); CUDA events, median of {reps} after 3 warm-ups; bf16.\n")
    print("| case | " + " | ".join(cols) + " | cudnn.sdpa / sdpa_cudnn_lse | best attnscope / best SDPA (time) | fastest |")
    print("|---|" + "---|" * (len(cols) + 3))
    for row in rows:
        t = row["times"]
        cells = [f"{t[c]:.3f}" if c in t else "-" for c in cols]
        ours = [t[c] for c in ATTNSCOPE if c in t]
        theirs = [t[c] for c in PEERS if c in t]
        ratio = f"{min(ours) / min(theirs):.2f}" if ours and theirs else "-"
        same = f"{t['cudnn.sdpa'] / t['sdpa_cudnn_lse']:.2f}" if "cudnn.sdpa" in t and "sdpa_cudnn_lse" in t else "-"
        fastest = min(t, key=t.get) if t else "-"
        print(f"| {row['case']} | " + " | ".join(cells) + f" | {same} | {ratio} | {fastest} |")
    print("\nTimes in ms (lower is better). cudnn.sdpa / sdpa_cudnn_lse: the same cuDNN work (O and LSE) through "
          "attnscope and through PyTorch. The last ratio is attnscope's fastest backend time over PyTorch's fastest "
          "SDPA time on the same shapes, with or without LSE (below 1.0: attnscope's backend is faster). "
          "'-': not run (reasons in --json-out).")
    extra = " before: cuda.flash ms, ratio |" if before is not None else ""
    print("\n| case | cuda.flash ms | TFLOP/s | issue 10 peer | peer ms | cuda.flash speed / peer |" + extra)
    print("|---|---|---|---|---|---|" + ("---|" if before is not None else ""))
    for row in rows:
        t = row["times"]
        peer, peer_ms = issue10_peer(row)
        was = ""
        if before is not None:
            old = before.get(row["case"])
            old_peer, old_peer_ms = issue10_peer(old) if old else (None, None)
            if old and "cuda.flash" in old["times"] and old_peer is not None:
                old_ms = old["times"]["cuda.flash"]
                was = f" {old_ms:.3f}, {old_peer_ms / old_ms:.2f} |"
            else:
                was = " - |"
        if "cuda.flash" not in t or peer is None:
            print(f"| {row['case']} | {t.get('cuda.flash', '-')} | - | - | - | - |" + was)
            continue
        ms = t["cuda.flash"]
        tflops = f"{row['flops'] / ms / 1e9:.0f}" if row.get("flops") else "-"
        print(f"| {row['case']} | {ms:.3f} | {tflops} | {peer} | {peer_ms:.3f} | {peer_ms / ms:.2f} |" + was)
    print("\nIssue 10's ratio: the peer's time over cuda.flash's on the same shapes in the same run (>= 1.0: cuda.flash "
          "is at the peer's speed or better). Peers: sdpa_fa2 (prefill), flex_compiled (masks SDPA cannot express), "
          "sdpa_cudnn (decode)." + (" Before: the same columns in the earlier run given by --before ('-': not in it)."
                                    if before is not None else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--from-json", help="print the tables of a saved --json-out run (no GPU, no PyTorch)")
    ap.add_argument("--cli", default="build/app/attnscope-cli")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json-out", help="write every number and reason here")
    ap.add_argument("--before", help="an earlier saved run (--json-out): issue 10's table gets its cuda.flash time and ratio")
    a = ap.parse_args()
    before = None
    if a.before:
        try:
            before = {r["case"]: r for r in json.load(open(a.before))["rows"]}
        except (OSError, ValueError, KeyError) as e:
            ap.error(f"--before {a.before}: not a saved run ({e})")
    if a.from_json:
        run = json.load(open(a.from_json))
        render(run["rows"], run["device"], run["torch"], run.get("cudnn", "?"), run["reps"], before)
        return 0
    if not a.cases:
        ap.error("give case files, or --from-json RUN.json")
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
        decode = all(r.get("q_len", 1) == 1 for r in case.get("requests", [])) if case.get("requests") else False
        row = {"case": case["name"], "path": path, "decode": decode, "attnscope_device": rep["device"], "flops": rep["flops"],
               "times": {}, "reasons": {}}
        for x in rep["rows"]:
            if x["status"] == "ok":
                row["times"][x["backend"]] = x["median_ms"]
            else:
                row["reasons"][x["backend"]] = x["status"]
        exprs = None
        if "mask_mod" in case.get("attention", {}) or "score_mod" in case.get("attention", {}):
            pj = subprocess.run([a.cli, "plan", path, "--json"], capture_output=True, text=True)
            exprs = json.loads(pj.stdout).get("expressions")
        for k, v in sdpa_times(torch, case, a.reps, exprs).items():
            (row["times"] if isinstance(v, float) else row["reasons"])[k] = v
        rows.append(row)
        print(f"{case['name']}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in row["times"].items()), file=sys.stderr, flush=True)

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else "none"
    render(rows, dev, torch.__version__, cudnn, a.reps, before)
    if a.json_out:
        json.dump({"device": dev, "torch": torch.__version__, "cudnn": cudnn, "reps": a.reps, "rows": rows}, open(a.json_out, "w"),
                  indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
