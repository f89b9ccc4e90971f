"""A stand-in for FlashMLA's sparse kernel (flash_mla_sparse_fwd), in PyTorch, for attnscope's GPU tests of
python.sgl_dsa / python.vllm_dsa (SGLang and vLLM are too large for the test machine). It reads what the
real kernel reads: q [s_q, h_q, d_qk], kv [s_kv, h_kv = 1, d_qk] rows of token slots, indices
[s_q, h_kv, topk] slots into kv with -1 (or >= s_kv) invalid, V = kv's first d_v columns; it returns
(out [s_q, h_q, d_v] in q's dtype, max_logits [s_q, h_q], lse [s_q, h_q] base 2), FlashMLA's README's
definitions. Put on the worker's path only by tests/gpu/test_python_gpu.cpp."""
import math

import torch


def sparse_mla(q, kv, indices, sm_scale, d_v, topk_length=None):
    s_q, h_q, _ = q.shape
    assert kv.dim() == 3 and kv.shape[1] == 1, "FlashMLA's sparse kernel reads one latent head"
    assert indices.shape[:2] == (s_q, 1), "indices are [s_q, h_kv = 1, topk]"
    idx = indices[:, 0, :].long()
    valid = (idx >= 0) & (idx < kv.shape[0])
    if topk_length is not None:
        valid &= torch.arange(idx.shape[1], device=idx.device)[None, :] < topk_length.long()[:, None]
    rows = kv[:, 0, :].float()[idx.clamp(0, kv.shape[0] - 1)]  # [s_q, topk, d_qk]
    logits = torch.einsum("shd,skd->shk", q.float(), rows) * (sm_scale * math.log2(math.e))
    logits = logits.masked_fill(~valid[:, None, :], -float("inf"))
    max_logits = logits.amax(-1)
    m = max_logits.clamp_min(-1e30)[..., None]
    p = torch.exp2(logits - m)
    den = p.sum(-1)
    out = torch.einsum("shk,skd->shd", p / den.clamp_min(1e-30)[..., None], rows[..., :d_v])
    lse = torch.where(den > 0, torch.log2(den) + m[..., 0], -float("inf"))
    return out.to(q.dtype), max_logits, lse
