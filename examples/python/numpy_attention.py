"""A plain NumPy attention over attnscope's paged KV cache: the python: backend contract
(docs/python-backends.md) in full, and what CI runs beside cpu.reference.

    attnscope-cli run examples/python/numpy-attention.json --allow-python

attnscope calls attention(batch) once per run; `batch` holds the case's inputs as NumPy arrays
(read-only) and its scalars. It returns O [total_q, num_qo_heads, head_dim_vo] and, optionally,
the LSE [total_q, num_qo_heads] (natural log, -inf for a row that sees no key).
"""
import numpy as np

# On the GPU path (PyTorch with CUDA in the worker) ask for host NumPy copies instead of CUDA tensors.
ATTNSCOPE_INPUTS = "numpy"


def request_kv(batch, cache, r):
    """Request r's keys (or values) in key order, [kv_len, num_kv_heads, dim], read through its pages."""
    kv_len = int(batch.cache_seqlens[r])
    if batch.storage == "ragged":  # one contiguous [tokens, heads, dim] run per request
        return cache[batch.cu_seqlens_k[r]:batch.cu_seqlens_k[r + 1]]
    ps = batch.page_size
    pages = batch.block_table[r, :(kv_len + ps - 1) // ps]
    x = cache[pages]  # NHD: [pages, page_size, heads, dim]; HND: [pages, heads, page_size, dim]
    if batch.layout == "HND":
        x = x.transpose(0, 2, 1, 3)
    return x.reshape(-1, x.shape[2], x.shape[3])[:kv_len]


def attention(batch):
    o = np.zeros((batch.total_q, batch.num_qo_heads, batch.head_dim_vo), np.float32)
    lse = np.full((batch.total_q, batch.num_qo_heads), -np.inf, np.float32)
    group = batch.num_qo_heads // batch.num_kv_heads
    for r in range(batch.num_requests):
        rows = slice(batch.cu_seqlens_q[r], batch.cu_seqlens_q[r + 1])
        q = batch.q[rows].astype(np.float64)                                     # [q_len, Hq, Dqk]
        k = np.repeat(request_kv(batch, batch.k_cache, r), group, axis=1).astype(np.float64)
        v = np.repeat(request_kv(batch, batch.v_cache, r), group, axis=1).astype(np.float64)
        s = np.einsum("qhd,khd->hqk", q, k) * batch.sm_scale                     # [Hq, q_len, kv_len]
        if batch.soft_cap > 0:
            s = batch.soft_cap * np.tanh(s / batch.soft_cap)
        # every built-in mask is one key interval per query row: [mask_lo, mask_hi)
        keys = np.arange(k.shape[0])
        lo, hi = batch.mask_lo[rows, None], batch.mask_hi[rows, None]
        s = np.where((keys >= lo) & (keys < hi), s, -np.inf)
        m = s.max(axis=2, keepdims=True)
        m_safe = np.where(np.isfinite(m), m, 0.0)
        p = np.exp(s - m_safe)
        denom = p.sum(axis=2, keepdims=True)                                     # 0 for a fully masked row
        out = np.einsum("hqk,khd->qhd", p / np.where(denom > 0, denom, 1.0), v)
        o[rows] = out.astype(np.float32)
        with np.errstate(divide="ignore"):
            lse[rows] = (np.log(denom) + m_safe)[:, :, 0].T.astype(np.float32)
    return o, lse
