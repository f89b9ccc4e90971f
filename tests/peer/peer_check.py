#!/usr/bin/env python3
"""Peer check: attnscope's outputs against PyTorch's scaled_dot_product_attention.

Runs `attnscope-cli run CASE --backends <GPU backends> --dump DIR` (or reads an existing dump with
--dump-dir), runs torch.nn.functional.scaled_dot_product_attention on the same inputs on the GPU,
reports the numeric agreement of every dumped backend's O (cuda.flash, flashinfer.*, cudnn.*) with
SDPA's, and times SDPA against cuda.flash measured in the same run (`attnscope-cli bench`, CUDA
events, median of --reps after warm-up). tests/peer/bench_table.py times every backend.

Masks handled: causal (bottom-right aligned, as attnscope and FlashAttention define it), non-causal,
sliding window. Other masks are reported as unsupported by this script.

usage: python3 tests/peer/peer_check.py --cli build/app/attnscope-cli --case bench/prefill-causal.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def load_dump(d):
    import numpy as np
    meta = json.load(open(os.path.join(d, "meta.json")))
    arrays = {n: np.load(os.path.join(d, n + ".npy")) for n in ("q", "k", "v")}
    outs = {}
    for f in os.listdir(d):
        if f.startswith("o_") and f.endswith(".npy"):
            outs[f[2:-4]] = np.load(os.path.join(d, f))
    return meta, arrays, outs


def sdpa_fn(torch, meta):
    """Returns f(q, k, v) -> o over the whole batch, or raises NotImplementedError."""
    import torch.nn.functional as F
    case = meta["case"]
    att = case["attention"]
    if att.get("local_chunk") or att.get("prefix_lm") or att.get("soft_cap") or att.get("alibi"):
        raise NotImplementedError("mask or logit transform not expressible in this peer script")
    for r in case["requests"]:
        if "doc_starts" in r or "pad_start" in r:
            raise NotImplementedError("document / padding masks")
    qlens, kvlens = meta["q_len"], meta["kv_len"]
    scale = meta["sm_scale"]
    causal, window = att["causal"], att.get("window")
    hq, hk = case["heads"]["qo"], case["heads"]["kv"]
    uniform = len(set(qlens)) == 1 and len(set(kvlens)) == 1 and qlens[0] == kvlens[0] and window is None

    def mask_for(ql, kl, device):
        qa = torch.arange(kl - ql, kl, device=device)[:, None]
        k = torch.arange(kl, device=device)[None, :]
        m = torch.ones(ql, kl, dtype=torch.bool, device=device)
        if causal:
            m &= k <= qa
        if window is not None:
            m &= k > qa - window
        return m

    def run(q, k, v):
        # q [T, hq, d], k/v [K, hk, d] on the GPU, dtype bf16/fp16
        if uniform:
            B, L = len(qlens), qlens[0]
            qb = q.view(B, L, hq, -1).transpose(1, 2)
            kb = k.view(B, L, hk, -1).transpose(1, 2)
            vb = v.view(B, L, hk, -1).transpose(1, 2)
            if hk != hq:
                kb = kb.repeat_interleave(hq // hk, dim=1)
                vb = vb.repeat_interleave(hq // hk, dim=1)
            o = F.scaled_dot_product_attention(qb, kb, vb, is_causal=causal, scale=scale)
            return o.transpose(1, 2).reshape(q.shape[0], hq, -1)
        outs, qo, ko = [], 0, 0
        for ql, kl in zip(qlens, kvlens):
            qi = q[qo:qo + ql].transpose(0, 1)[None]
            ki = k[ko:ko + kl].transpose(0, 1)[None]
            vi = v[ko:ko + kl].transpose(0, 1)[None]
            if hk != hq:
                ki = ki.repeat_interleave(hq // hk, dim=1)
                vi = vi.repeat_interleave(hq // hk, dim=1)
            o = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask_for(ql, kl, q.device), scale=scale)
            outs.append(o[0].transpose(0, 1))
            qo, ko = qo + ql, ko + kl
        return torch.cat(outs, 0)

    return run, uniform


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default="build/app/attnscope-cli")
    ap.add_argument("--case", help="case file (runs attnscope first)")
    ap.add_argument("--dump-dir", help="an existing dump (skips the attnscope run)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--backends", default="cuda.flash,flashinfer.prefill,flashinfer.prefill_sm90,flashinfer.decode,cudnn.sdpa",
                    help="backends whose outputs are compared with SDPA (those that cannot run the case are skipped)")
    ap.add_argument("--out", help="write the JSON result here")
    a = ap.parse_args()
    try:
        import numpy as np  # noqa: F401
        import torch
    except ImportError as e:
        print(f"peer check needs numpy and PyTorch: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("peer check needs a CUDA device for PyTorch", file=sys.stderr)
        return 2

    bench_ms = None
    d = a.dump_dir
    if not d:
        if not a.case:
            ap.error("give --case or --dump-dir")
        d = tempfile.mkdtemp(prefix="attnscope_peer_")
        # exit code 1 only means a verdict failed; the dump is written either way
        subprocess.run([a.cli, "run", a.case, "--backends", a.backends, "--dump", d], stdout=subprocess.DEVNULL)
        b = subprocess.run([a.cli, "bench", a.case, "--json", "--reps", str(a.reps)], check=True, capture_output=True, text=True)
        rows = [r for r in json.loads(b.stdout)["rows"] if r["backend"] == "cuda.flash" and r["status"] == "ok"]
        bench_ms = rows[0]["median_ms"] if rows else None
    meta, arr, outs = load_dump(d)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[meta["case"]["dtype"]]
    dev = torch.device("cuda")
    q, k, v = (torch.from_numpy(arr[n]).to(dev, dtype) for n in ("q", "k", "v"))
    try:
        fn, uniform = sdpa_fn(torch, meta)
    except NotImplementedError as e:
        print(f"unsupported by the peer script: {e}")
        return 2
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = "flash" if uniform and dtype != torch.float32 else "default"
    ctx = sdpa_kernel([SDPBackend.FLASH_ATTENTION]) if backend == "flash" else sdpa_kernel(list(SDPBackend))
    with ctx:
        o_torch = fn(q, k, v).float()
        torch.cuda.synchronize()
        # timing: CUDA events, warm-up then the median of reps
        for _ in range(3):
            fn(q, k, v)
        times = []
        for _ in range(a.reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn(q, k, v)
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1))
    times.sort()
    torch_ms = times[len(times) // 2]
    # fp32 reference on the same inputs, for scale
    o_ref = fn(q.float(), k.float(), v.float()) if q.numel() * k.shape[0] < 2**34 else None

    res = {"case": meta["case"]["name"], "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
           "sdpa_backend": backend, "torch_ms": torch_ms, "attnscope_cuda_flash_ms": bench_ms, "compare": {}}
    if bench_ms:
        res["time_ratio_torch_over_attnscope"] = torch_ms / bench_ms
    for name, o in outs.items():
        oa = torch.from_numpy(o).to(dev)
        diff = (oa - o_torch).abs()
        entry = {"max_abs_vs_sdpa": diff.max().item(), "mean_abs_vs_sdpa": diff.mean().item(),
                 "rel_l2_vs_sdpa": ((oa - o_torch).norm() / o_torch.norm()).item(),
                 "allclose_1e-2_1e-2": bool(torch.allclose(oa, o_torch, rtol=1e-2, atol=1e-2))}
        if o_ref is not None:
            entry["max_abs_vs_fp32_ref"] = (oa - o_ref).abs().max().item()
            entry["sdpa_max_abs_vs_fp32_ref"] = (o_torch - o_ref).abs().max().item()
        res["compare"][name] = entry
    print(json.dumps(res, indent=2))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
