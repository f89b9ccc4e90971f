"""A stand-in for the engines' FlashAttention builds, in PyTorch, for attnscope's GPU tests of
python.sgl_fa3 / python.vllm_fa (the real packages are too large for the test machine). It reads the
paged cache the way FlashAttention's paged kernels do: page_table / block_table rows of page indices,
cache_seqlens / seqused_k keys per request, cu_seqlens_q query offsets, bottom-right causal and
(left, right) windows, softcap. Put on the worker's path only by tests/gpu/test_python_gpu.cpp."""
import torch


def paged_attention(q, k_cache, v_cache, table, seqlens, cu_seqlens_q, softmax_scale, causal, window_size, softcap):
    """out [total_q, heads, dv] in q's dtype, lse [heads, total_q] float32 (FlashAttention's varlen layout)."""
    total_q, hq, _ = q.shape
    page, hk = k_cache.shape[1], k_cache.shape[2]
    out = torch.zeros((total_q, hq, v_cache.shape[-1]), device=q.device, dtype=q.dtype)
    lse = torch.full((hq, total_q), -float("inf"), device=q.device, dtype=torch.float32)
    cu, lens = cu_seqlens_q.tolist(), seqlens.tolist()
    left, right = (window_size[0], window_size[1]) if window_size is not None else (-1, -1)
    for r in range(len(lens)):
        s, e, kv = cu[r], cu[r + 1], lens[r]
        pages = table[r, :(kv + page - 1) // page].long()
        k = k_cache[pages].reshape(-1, hk, k_cache.shape[-1])[:kv].float().repeat_interleave(hq // hk, 1)
        v = v_cache[pages].reshape(-1, hk, v_cache.shape[-1])[:kv].float().repeat_interleave(hq // hk, 1)
        sc = torch.einsum("qhd,khd->hqk", q[s:e].float(), k) * softmax_scale
        if softcap and softcap > 0:
            sc = softcap * torch.tanh(sc / softcap)
        qi = torch.arange(e - s, device=q.device)[:, None] + kv - (e - s)  # bottom-right aligned
        ki = torch.arange(kv, device=q.device)[None, :]
        ok = torch.ones_like(qi - ki, dtype=torch.bool)
        if causal:
            ok &= ki <= qi
        if left >= 0:
            ok &= ki >= qi - left
        if right >= 0 and not causal:
            ok &= ki <= qi + right
        sc = sc.masked_fill(~ok[None], -float("inf"))
        m = sc.amax(-1, keepdim=True).clamp_min(-1e30)
        p = torch.exp(sc - m)
        den = p.sum(-1, keepdim=True)
        out[s:e] = torch.einsum("hqk,khd->qhd", p / den.clamp_min(1e-30), v).to(q.dtype)
        lse[:, s:e] = torch.where(den[..., 0] > 0, torch.log(den[..., 0]) + m[..., 0], -float("inf"))
    return out, lse
