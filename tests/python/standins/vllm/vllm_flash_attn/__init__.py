"""Stand-in for vllm.vllm_flash_attn (tests only): flash_attn_varlen_func with vLLM's signature on the
paged cache (block_table, seqused_k), computed in PyTorch by ../../attnscope_fa_standin.py."""
from attnscope_fa_standin import paged_attention


def flash_attn_varlen_func(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, seqused_k=None,
                           q_v=None, dropout_p=0.0, softmax_scale=None, causal=False, window_size=None, softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None,
                           return_softmax_lse=False, out=None, scheduler_metadata=None, q_descale=None,
                           k_descale=None, v_descale=None, num_splits=0, fa_version=2, s_aux=None):
    assert block_table is not None and seqused_k is not None, "the stand-in reads the paged cache only"
    o, lse = paged_attention(q, k, v, block_table, seqused_k, cu_seqlens_q, softmax_scale, causal, window_size, softcap)
    if out is not None:
        out.copy_(o)
        o = out
    return (o, lse) if return_softmax_lse else o
