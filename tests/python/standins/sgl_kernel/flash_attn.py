"""Stand-in for sgl_kernel.flash_attn (tests only): flash_attn_with_kvcache with sgl-kernel's
signature, computed in PyTorch by ../attnscope_fa_standin.py."""
from attnscope_fa_standin import paged_attention


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, scheduler_metadata=None,
                            num_splits=0, pack_gqa=None, sm_margin=0, return_softmax_lse=False, sinks=None):
    assert k is None and v is None and cu_seqlens_k_new is None, "the stand-in appends no new keys"
    out, lse = paged_attention(q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, softmax_scale, causal,
                               window_size, softcap)
    return (out, lse) if return_softmax_lse else out
