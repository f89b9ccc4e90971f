#!/usr/bin/env python3
# attnscope repro: gqa-decode-long
#   GQA decode (32 qo / 8 kv heads) at long context through FlashInfer's prefill planner: the worked
#   example of conventions.md section 4 (tile 16, chunk 24 pages, chunks [3, 8, 2, 19], 32 work
#   items).
#
# case      4 requests, 4 query / 11500 kv tokens, heads 32 qo / 8 kv, head_dim 128, bf16, paged KV
#           (page 16, NHD, contiguous), causal, sm_scale 0.08838834764831843
# target    attnscope's flashinfer.prefill (no device: no CUDA device: CUDA driver version is
#           insufficient for CUDA runtime version), reproduced with FlashInfer 0.7.2.post1
#           BatchPrefillWithPagedKVCacheWrapper, backend "fa2"
# recorded  attnscope 0.1.0 (commit b9546776c08a), g++ 12.2.0, release, CUDA backends compiled; host
#           vm, Intel(R) Xeon(R) Processor, no GPU (no CUDA device: CUDA driver version is
#           insufficient for CUDA runtime version)
# files     q.npy [4, 32, 128], k.npy / v.npy [11500, 8, d]: float32 holding bf16 values, token by
#           token, request after request; o_<backend>.npy / lse_<backend>.npy (natural log) of each
#           backend attnscope ran (NaN rows: not computed); k_cache.npy / v_cache.npy: attnscope's
#           paged pool; qo_indptr, kv_indptr, kv_indices, kv_last_page_len.npy: its page table;
#           case.json replays everything with `attnscope-cli run case.json`
# usage     python3 repro.py                   runs FlashInfer prefill (fa2) on the GPU and compares
#           python3 repro.py --reference-only  numpy only: this script's fp64 reference vs attnscope's cpu.reference
# exit      0 match, 1 mismatch, 2 cannot run here (no GPU, library missing, case not expressible)

import argparse
import os
import sys

try:
    import numpy as np
except ImportError:
    print("cannot run: needs numpy")
    sys.exit(2)

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = "flashinfer.prefill"  # attnscope's backend whose recorded output this reproduces
TARGET_STATUS = "no device: no CUDA device: CUDA driver version is insufficient for CUDA runtime version"
LIBRARY = "FlashInfer prefill (fa2)"
DTYPE, TORCH_DTYPE = "bf16", "bfloat16"
# per request: new query tokens, and keys (cached prefix + new); the queries are the last Q_LEN keys
Q_LEN = [1, 1, 1, 1]
KV_LEN = [1000, 3000, 500, 7000]
NUM_QO_HEADS, NUM_KV_HEADS = 32, 8  # GQA: query head h reads KV head h // GROUP
GROUP = NUM_QO_HEADS // NUM_KV_HEADS
HEAD_DIM_QK, HEAD_DIM_VO = 128, 128
SM_SCALE = 0.08838834764831843  # 1 / sqrt(HEAD_DIM_QK)
TWICE_ATOL = 1e-05  # rounding floor of the 2x rule


def allowed(r, q_abs, k):
    """attnscope's mask of request r: may the query at absolute position q_abs [q, 1] see key k [1, k]?
    The queries are the last Q_LEN[r] of the KV_LEN[r] keys: q_abs = KV_LEN[r] - Q_LEN[r] + query index."""
    m = k <= q_abs  # causal, bottom-right aligned
    return m


def requests():
    """Per request: its index, its rows of q.npy, its rows of k.npy / v.npy, q_abs [q, 1], keys [1, k]."""
    qo = ko = 0
    for r, (ql, kl) in enumerate(zip(Q_LEN, KV_LEN)):
        yield r, slice(qo, qo + ql), slice(ko, ko + kl), np.arange(kl - ql, kl)[:, None], np.arange(kl)[None, :]
        qo, ko = qo + ql, ko + kl


def run_library(torch, flashinfer, q):
    """FlashInfer's wrapper on the paged cache attnscope ran: the same pool, physical page ids, layout and
    page table, planned with the same arguments. Returns O and LSE (natural log)."""
    dev, dt = "cuda", getattr(torch, TORCH_DTYPE)
    # attnscope's pool as its kernels read it: [pages, page_size, kv_heads, dim] (NHD); page 0 is
    # vLLM's null page, never referenced
    k_cache, v_cache = (torch.from_numpy(load(n)).to(dev, dt) for n in ("k_cache", "v_cache"))
    # FlashInfer's CSR page table, int32: qo_indptr (query rows), kv_indptr (pages), kv_indices
    # (physical page ids in key order), kv_last_page_len (tokens in each last page)
    qo_indptr, kv_indptr, kv_indices, kv_last_page_len = (
        torch.from_numpy(load(n)).to(dev) for n in ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len"))
    workspace = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)  # 128 MB, as FlashInfer recommends
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
        workspace, kv_layout="NHD", backend="fa2",  # the kernel of attnscope's flashinfer.prefill
    )
    wrapper.plan(
        qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
        num_qo_heads=NUM_QO_HEADS, num_kv_heads=NUM_KV_HEADS,
        head_dim_qk=HEAD_DIM_QK, head_dim_vo=HEAD_DIM_VO, page_size=16,
        causal=True,  # bottom-right aligned within each request, as attnscope's
        window_left=-1,  # no sliding window
        logits_soft_cap=0.0,  # no soft-cap
        pos_encoding_mode="NONE",
        sm_scale=SM_SCALE, q_data_type=dt, kv_data_type=dt,
        # /split/partials fp32 has no FlashInfer equivalent: FlashInfer rounds split-KV partials to
        # the dtype
    )
    o, lse = wrapper.run(torch.from_numpy(q).to(dev, dt), (k_cache, v_cache), return_lse=True)
    # FlashInfer's LSE is base 2 (it keeps the running max in log2 units); attnscope's is natural log
    lse = lse.float().cpu().numpy().astype(np.float64) * np.log(2)
    return o.float().cpu().numpy(), lse


def need_gpu():
    """FlashInfer, PyTorch and a CUDA device, or exit 2."""
    try:
        import flashinfer
        import torch
    except Exception as e:
        cannot(f"needs flashinfer-python==0.7.2.post1 and PyTorch with CUDA"
               f" (pip install flashinfer-python==0.7.2.post1): {e}")
    if not torch.cuda.is_available():
        cannot("needs a CUDA device (torch.cuda.is_available() is False)")
    if flashinfer.__version__ != "0.7.2.post1":
        print(f"note: flashinfer {flashinfer.__version__} is installed; attnscope compiled 0.7.2.post1")
    print(f"{LIBRARY}: PyTorch {torch.__version__}, {torch.cuda.get_device_name()}")
    return torch, flashinfer


def reference(q, k, v):
    """fp64 attention on the inputs as stored: O [tokens, heads, HEAD_DIM_VO] and LSE in natural log.
    A query that sees no key gets O = 0 and LSE = -inf (as attnscope, FlashAttention and FlashInfer)."""
    o = np.zeros((q.shape[0], NUM_QO_HEADS, HEAD_DIM_VO))
    lse = np.full((q.shape[0], NUM_QO_HEADS), -np.inf)
    for r, qs, ks, q_abs, kk in requests():
        mask = allowed(r, q_abs, kk)
        live = mask.any(axis=1)
        for h in range(NUM_QO_HEADS):
            s = (q[qs, h].astype(np.float64) @ k[ks, h // GROUP].astype(np.float64).T) * SM_SCALE
            s = np.where(mask, s, -np.inf)[live]
            mx = s.max(axis=1, keepdims=True)
            p = np.exp(s - mx)
            den = p.sum(axis=1)
            o[qs, h][live] = (p @ v[ks, h // GROUP].astype(np.float64)) / den[:, None]
            lse[qs, h][live] = mx[:, 0] + np.log(den)
    return o, lse


def naive_lowp(torch, q, k, v):
    """The same attention done eagerly in the case dtype by PyTorch (FlashAttention's attention_ref
    with upcast=False): the same-precision baseline of the 2x rule."""
    dev, dt = "cuda", getattr(torch, TORCH_DTYPE)
    out = []
    for r, qs, ks, q_abs, kk in requests():
        # [heads, tokens, d]
        qi, ki, vi = (torch.from_numpy(x).to(dev, dt).transpose(0, 1) for x in (q[qs], k[ks], v[ks]))
        ki, vi = ki.repeat_interleave(GROUP, dim=0), vi.repeat_interleave(GROUP, dim=0)  # GQA
        s = (qi * SM_SCALE) @ ki.transpose(1, 2)
        s = s.masked_fill(~torch.from_numpy(allowed(r, q_abs, kk)).to(dev), float("-inf"))
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a query that sees no key: 0
        out.append((p @ vi).transpose(0, 1))
    return torch.cat(out).float().cpu().numpy()


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


def compare(o_lib, lse_lib, o_ref, lse_ref, o_lowp):
    """The library against the fp64 reference under the 2x rule, and against attnscope's recorded
    TARGET under attnscope's default rule allclose(rtol=1e-2, atol=1e-3). True when both hold."""
    print(f"{LIBRARY} vs the fp64 reference:")
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


def check_reference(o_ref, lse_ref):
    """--reference-only: this script's reference against attnscope's cpu.reference. Both are fp64
    computations stored as float32, so they agree to float32 rounding, far below any kernel's error."""
    rec_o, rec_lse = load("o_cpu.reference"), load("lse_cpu.reference")
    if rec_o is None:
        cannot("attnscope's cpu.reference did not run for this export (no o_cpu.reference.npy)")
    rows = computed_rows("cpu.reference")
    print(f"fp64 reference vs attnscope's cpu.reference on {int(rows.sum())} of {rows.size} (token, head) rows:")
    # rounded to float32 as attnscope stores it, so "identical" counts equal bits
    o_err, o_bad = stats("O", o_ref[rows].astype(np.float32), rec_o[rows])
    l_err, l_bad = stats("LSE", lse_ref[rows].astype(np.float32), rec_lse[rows])
    finite = np.isfinite(lse_ref[rows])
    o_tol = 1e-6 * max(1.0, float(np.abs(o_ref[rows]).max(initial=0.0)))
    l_tol = 1e-6 * max(1.0, float(np.abs(lse_ref[rows][finite]).max(initial=0.0)))
    ok = o_err <= o_tol and l_err <= l_tol and o_bad == 0 and l_bad == 0
    print(f"  float32 rounding bound: O {o_tol:.3g}, LSE {l_tol:.3g}")
    print("MATCH" if ok else "MISMATCH")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description="attnscope repro: exit 0 match, 1 mismatch, 2 cannot run here")
    ap.add_argument("--reference-only", action="store_true",
                    help="numpy only: this script's fp64 reference against attnscope's recorded cpu.reference")
    args = ap.parse_args()
    q, k, v = load("q"), load("k"), load("v")
    if args.reference_only:
        return check_reference(*reference(q, k, v))
    torch, flashinfer = need_gpu()
    try:
        o_lib, lse_lib = run_library(torch, flashinfer, q)
    except Exception as e:  # the library refused the case or failed: nothing to compare
        cannot(f"{LIBRARY} raised {type(e).__name__}: {e}")
    o_ref, lse_ref = reference(q, k, v)
    ok = compare(o_lib, lse_lib, o_ref, lse_ref, naive_lowp(torch, q, k, v))
    print("MATCH" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
