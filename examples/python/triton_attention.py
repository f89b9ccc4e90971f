"""A small flash-attention kernel in Triton over attnscope's paged KV cache, as a user might be writing
one: one program per (query token, query head) walks the keys its row sees in blocks of BLOCK_N,
finding each key's page through the block table, with an online softmax (docs/python-backends.md).

    attnscope-cli run examples/python/triton-beside-cuda.json --allow-python

It needs PyTorch with CUDA and Triton in attnscope's Python worker: there `batch` holds CUDA tensors
that are views of attnscope's own device buffers (CUDA IPC, no copy). It returns O and the LSE.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_attention(Q, K, V, O, LSE, BT, REQ, LO, HI, sm_scale, soft_cap,
                   s_qt, s_qh, s_kp, s_ks, s_kh, s_vp, s_vs, s_vh, s_bt, s_ot, s_oh,
                   GROUP: tl.constexpr, PAGE: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                   BD: tl.constexpr, BDV: tl.constexpr, BLOCK_N: tl.constexpr, HAS_CAP: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    r = tl.load(REQ + t)
    lo = tl.load(LO + t)  # the keys [lo, hi) of its request this row sees (every built-in mask)
    hi = tl.load(HI + t)
    kh = h // GROUP
    d = tl.arange(0, BD)
    dv = tl.arange(0, BDV)
    q = tl.load(Q + t * s_qt + h * s_qh + d, mask=d < D, other=0.0).to(tl.float32)
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([BDV], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        valid = n < hi
        page = tl.load(BT + r * s_bt + n // PAGE, mask=valid, other=0).to(tl.int64)
        slot = n % PAGE
        k = tl.load(K + page[:, None] * s_kp + slot[:, None] * s_ks + kh * s_kh + d[None, :],
                    mask=valid[:, None] & (d[None, :] < D), other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], 1) * sm_scale
        if HAS_CAP:  # soft_cap * tanh(s / soft_cap), tanh(x) = 1 - 2 / (exp(2x) + 1)
            s = soft_cap * (1.0 - 2.0 / (tl.exp(2.0 * s / soft_cap) + 1.0))
        s = tl.where(valid, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        v = tl.load(V + page[:, None] * s_vp + slot[:, None] * s_vs + kh * s_vh + dv[None, :],
                    mask=valid[:, None] & (dv[None, :] < DV), other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        l_i = l_i * alpha + tl.sum(p, 0)
        m_i = m_new
    seen = l_i > 0
    o = tl.where(seen, acc / tl.where(seen, l_i, 1.0), 0.0)  # a row that sees no key: O 0, LSE -inf
    tl.store(O + t * s_ot + h * s_oh + dv, o, mask=dv < DV)
    tl.store(LSE + t * tl.num_programs(1) + h, tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), -float("inf")))


def attention(batch):
    b = batch
    k, v, bt, page = b.k_cache, b.v_cache, b.block_table, b.page_size
    if b.storage == "ragged":  # token indices in the block table, pages of one token
        k, v, page = k[:, None], v[:, None], 1
    if b.layout == "HND":  # [pages, heads, slot, dim]: the same kernel with the slot and head strides swapped
        k, v = k.transpose(1, 2), v.transpose(1, 2)
    qlens = (b.cu_seqlens_q[1:] - b.cu_seqlens_q[:-1]).long()
    req = torch.repeat_interleave(torch.arange(b.num_requests, device=b.q.device, dtype=torch.int32), qlens,
                                  output_size=b.total_q)
    o = torch.empty((b.total_q, b.num_qo_heads, b.head_dim_vo), device=b.q.device, dtype=torch.float32)
    lse = torch.empty((b.total_q, b.num_qo_heads), device=b.q.device, dtype=torch.float32)
    grid = (b.total_q, b.num_qo_heads)
    _row_attention[grid](
        b.q, k, v, o, lse, bt, req, b.mask_lo, b.mask_hi, b.sm_scale, float(b.soft_cap),
        b.q.stride(0), b.q.stride(1), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        bt.stride(0), o.stride(0), o.stride(1),
        GROUP=b.num_qo_heads // b.num_kv_heads, PAGE=page, D=b.head_dim_qk, DV=b.head_dim_vo,
        BD=triton.next_power_of_2(b.head_dim_qk), BDV=triton.next_power_of_2(b.head_dim_vo), BLOCK_N=64,
        HAS_CAP=b.soft_cap > 0)
    return o, lse
