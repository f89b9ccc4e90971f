"""Stand-in for sgl_kernel.flash_mla (tests only): flash_mla_sparse_fwd with FlashMLA's signature, computed
in PyTorch by ../attnscope_mla_standin.py."""
from attnscope_mla_standin import sparse_mla


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512):
    return sparse_mla(q, kv, indices, sm_scale, d_v)
