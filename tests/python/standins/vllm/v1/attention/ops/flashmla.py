"""Stand-in for vllm.v1.attention.ops.flashmla (tests only): is_flashmla_sparse_supported and
flash_mla_sparse_fwd with a topk_length (the valid entries per row), computed in PyTorch by
attnscope_mla_standin.py at the stand-ins' root."""
from attnscope_mla_standin import sparse_mla


def is_flashmla_sparse_supported():
    return True, None


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, topk_length=None):
    return sparse_mla(q, kv, indices, sm_scale, d_v, topk_length)
