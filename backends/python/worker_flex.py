# python.flex_attention's pieces of attnscope's Python worker (docs/python-backends.md): the case's
# mask_mod and ALiBi as PyTorch, the mask_mod over the packed batch, and the BlockMask summary for the
# Mask tab. backends/python/CMakeLists.txt puts this file before worker.py in the one script the worker
# runs (so it imports nothing that may be missing: worker.py says so first); the names it uses from
# worker.py (np, _host_lists, last_block_mask) are looked up when called.
import sys
import traceback


# ---- the case's expressions for FlexAttention: its mask_mod as PyTorch (attnscope's expr_to_torch text:
# names b, h, q_idx (absolute query position), kv_idx, q_len, kv_len, prefix_len and the helpers _b,
# _doc, _alibi), ALiBi slopes (a score_mod attnscope lowered to ALiBi included)

def _expr_fn(text):
    """The expression text attnscope wrote (from its parsed expression: names, numbers, operators) as a
    function of the expression's variables and helpers."""
    import torch
    ns = {"torch": torch}
    exec(compile("def _e(b, h, q_idx, kv_idx, q_len, kv_len, prefix_len, score, _b, _doc, _alibi):\n"
                 "    return " + text + "\n", "<attnscope mask_mod>", "exec"), ns)
    return ns["_e"]


class _Mods:
    """The mask_mod and ALiBi of a case on `dev`: mask(r, q_abs, kv_pos) -> bool tensor (None without a
    mask_mod), alibi(h, q_abs, kv_pos) -> the bias (None without ALiBi). r, q_abs, kv_pos: tensors or ints."""

    def __init__(self, b, torch, dev):
        self.torch, self.mask, self.alibi = torch, None, None
        meta_docs = getattr(b, "doc_starts", None)
        if getattr(b, "mask_mod", None):
            expr = _expr_fn(b.mask_mod)
            lens = [int(b.cu_seqlens_k[r + 1] - b.cu_seqlens_k[r]) for r in range(b.num_requests)]
            qlens = [int(b.cu_seqlens_q[r + 1] - b.cu_seqlens_q[r]) for r in range(b.num_requests)]
            # doc(x) of request r for every key position (x is clamped into [0, kv_len): the same index)
            doc_at = np.concatenate([np.searchsorted(np.asarray(d or [0]), np.arange(n), side="right") - 1 if d
                                     else np.zeros(n, np.int64) for d, n in zip(meta_docs, lens)] + [np.zeros(1, np.int64)])
            doc_at = torch.tensor(np.maximum(doc_at, 0), device=dev)
            kv_off = torch.tensor(np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64), device=dev)
            klen = torch.tensor(lens, device=dev)
            qlen = torch.tensor(qlens, device=dev)
            prefix = torch.tensor(b.prefix_lens, device=dev)

            def _b(x):
                x = torch.as_tensor(x)
                return (x != 0) & (x == x)  # non-zero allows, NaN does not

            def doc_of(r):
                def _doc(x):
                    x = torch.as_tensor(x)
                    f = torch.floor(x).long() if x.is_floating_point() else x.long()
                    f = torch.minimum(torch.clamp(f, min=0), klen[r] - 1)
                    return doc_at[kv_off[r] + f]
                return _doc
            _alibi = _alibi_fn(torch, b.num_qo_heads)

            def mask(r, qa, kv):
                return _b(expr(r, 0, qa, kv, qlen[r], klen[r], prefix[r], 0.0, _b, doc_of(r), _alibi))
            self.mask = mask
        if getattr(b, "alibi_slopes", None):
            slopes = torch.tensor(b.alibi_slopes, device=dev, dtype=torch.float64 if dev == "cpu" else torch.float32)

            def alibi(h, qa, kv):
                return slopes[h] * (kv - qa)
            self.alibi = alibi


def _alibi_fn(torch, n):
    """alibi(x) of attnscope's expressions: the slope of head int(x) of n (mask.h's alibi_slope)."""
    p = 1
    while p * 2 <= n:
        p *= 2

    def _alibi(x):
        h = torch.as_tensor(x)
        h = h.trunc() if h.is_floating_point() else h
        return torch.where(h < p, torch.exp2(-8.0 * (h + 1) / p), torch.exp2(-8.0 * (2 * (h - p) + 1) / (2 * p)))
    return _alibi


def _packed_mask_mod(b, torch, dev, mods, h=None):
    """FlexAttention's mask_mod over the batch packed as one sequence: a query sees keys of its own request
    inside its row's key range (attnscope's built-in mask, docs/architecture.md) where the case's mask_mod
    (if any) allows. Returns (mask_mod, q_abs, kv_pos) as tensors on dev."""
    h = h or _host_lists(b)
    B = b.num_requests
    qlens = torch.tensor([h["cu_seqlens_q"][r + 1] - h["cu_seqlens_q"][r] for r in range(B)], device=dev)
    klens = torch.tensor(h["cache_seqlens"], device=dev)
    q_req = torch.repeat_interleave(torch.arange(B, device=dev), qlens)
    kv_req = torch.repeat_interleave(torch.arange(B, device=dev), klens)
    kv_pos = torch.arange(b.total_kv, device=dev) - torch.tensor(h["cu_seqlens_k"][:-1], device=dev)[kv_req]
    lo, hi = (torch.as_tensor(np.asarray(x, np.int64), device=dev) if isinstance(x, np.ndarray) else x.long()
              for x in (b.mask_lo, b.mask_hi))
    qa = torch.as_tensor(np.asarray(b.q_abs, np.int64), device=dev) if isinstance(b.q_abs, np.ndarray) else b.q_abs.long()

    def mask_mod(bi, hd, qi, ki):
        m = (q_req[qi] == kv_req[ki]) & (kv_pos[ki] >= lo[qi]) & (kv_pos[ki] < hi[qi])
        if mods.mask is not None:
            m = m & mods.mask(q_req[qi], qa[qi], kv_pos[ki])
        return m
    return mask_mod, qa, kv_pos


def _cpu_block_mask(b, torch, mods):
    """The BlockMask python.flex_attention's compiled path would build, made on the CPU (for the Mask tab
    where there is no CUDA device)."""
    global last_block_mask
    try:
        from torch.nn.attention.flex_attention import create_block_mask
        mask_mod, _, _ = _packed_mask_mod(b, torch, "cpu", mods)
        last_block_mask = create_block_mask(mask_mod, None, None, b.total_q, b.total_kv, device="cpu")
    except Exception:
        traceback.print_exc(file=sys.stderr)
        last_block_mask = None


def block_mask_summary(max_rows=512, max_cols=512):
    """The last BlockMask for the reply's header (the Mask tab draws it): its block size, the packed
    batch's lengths and, per query block of the first head, the partial (kv_num_blocks / kv_indices) and
    full (full_kv_num_blocks / full_kv_indices) KV blocks; "clipped" when larger than max_rows x max_cols."""
    bm = last_block_mask
    if bm is None:
        return None

    def rows(num, idx):
        if num is None:
            return []
        n = num[0, 0].tolist()[:max_rows]
        ix = idx[0, 0][:max_rows, :max_cols].tolist()
        return [row[:k] for row, k in zip(ix, n)]
    partial, full = rows(bm.kv_num_blocks, bm.kv_indices), rows(bm.full_kv_num_blocks, bm.full_kv_indices)
    q_blocks, kv_blocks = bm.kv_num_blocks.shape[-1], bm.kv_indices.shape[-1]
    return {"block_size": list(bm.BLOCK_SIZE), "seq_lengths": list(bm.seq_lengths), "q_blocks": q_blocks,
            "kv_blocks": kv_blocks, "kv_indices": partial, "full_kv_indices": full,
            "clipped": q_blocks > max_rows or kv_blocks > max_cols}
