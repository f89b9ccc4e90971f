# python.sgl_dsa's and python.vllm_dsa's piece of attnscope's Python worker (docs/python-backends.md,
# "The engines' DSA kernels"): the sparse MLA kernel SGLang's nsa backend or vLLM's FLASHMLA_SPARSE backend
# calls, on the index buffer that engine builds. backends/python/CMakeLists.txt puts this file before
# worker.py in the one script (so it imports nothing that may be missing at load); the names it uses from
# worker.py (_torch, _host_lists, _finish, Unavailable, _DEV) are looked up when called.
#
# The buffer comes from attnscope (model/src/engine_metadata_dsa.cpp, what `plan --engine sglang-nsa` /
# `vllm-flashmla-sparse` print) as b.dsa_indices [total_q, top_k] int32 token slots in the case's request
# order, -1 padded, and for vLLM b.dsa_topk_length [total_q]; the kernel is the engine's installed one.
# Not yet run against a real install of either engine: written from their sources (commits in the docs) and
# tested against a PyTorch stand-in of FlashMLA's sparse kernel (tests/python/standins).


def _dsa_sgl_kernel():
    """SGLang's kernel: nsa_backend.py's _forward_flashmla_sparse imports it from sgl_kernel.flash_mla."""
    try:
        from sgl_kernel.flash_mla import flash_mla_sparse_fwd
    except Exception as e:
        raise Unavailable("not installed: sgl_kernel (sgl_kernel.flash_mla.flash_mla_sparse_fwd: %s: %s)"
                          % (type(e).__name__, e))
    return flash_mla_sparse_fwd


def _dsa_vllm_kernel():
    """vLLM's kernel as flashmla_sparse.py's _bf16_flash_mla_kernel calls it: flash_mla_sparse_fwd from
    vllm.v1.attention.ops.flashmla (older releases: flash_mla_sparse_prefill in vllm.attention.ops.flashmla)."""
    try:
        import vllm  # noqa: F401
    except Exception as e:
        raise Unavailable("not installed: vllm (%s: %s)" % (type(e).__name__, e))
    import importlib
    errors = []
    for module, name in (("vllm.v1.attention.ops.flashmla", "flash_mla_sparse_fwd"),
                         ("vllm.attention.ops.flashmla", "flash_mla_sparse_prefill")):
        try:
            mod = importlib.import_module(module)
        except Exception as e:
            errors.append("%s: %s: %s" % (module, type(e).__name__, e))
            continue
        supported = getattr(mod, "is_flashmla_sparse_supported", None)
        if supported is not None:
            ok, why = supported()
            if not ok:
                raise Unavailable("vLLM's FlashMLA sparse kernel is not usable here: %s" % why)
        if hasattr(mod, name):
            return getattr(mod, name)
        errors.append("%s has no %s" % (module, name))
    raise Unavailable("vLLM is installed but its FlashMLA sparse kernel is not importable (%s)" % "; ".join(errors))


def _dsa_inputs(b, torch, padding, divisor_rule):
    """Q padded to the engine's head count and the pool as rows of token slots [slots, 1, 576]. Both engines
    pad the query heads for the sparse kernel: SGLang to exactly 64 (Hopper) or 128 (Blackwell), asserting the
    head count divides it; vLLM to a multiple of that (FlashMLASparseImpl.prefill_padding)."""
    heads = b.num_qo_heads
    if divisor_rule and heads % padding and padding % heads:
        raise Unavailable("SGLang's _forward_flashmla_sparse pads %d query heads to %d, which it asserts they divide"
                          % (heads, padding))
    padded = (heads + padding - 1) // padding * padding if heads % padding else heads
    q = b.q
    if padded != heads:
        q = torch.zeros((b.total_q, padded, b.head_dim_qk), dtype=b.q.dtype, device=_DEV)
        q[:, :heads] = b.q
    # the NHD pool [pages, page_size, 1, 576] viewed as token rows: row page * page_size + offset is that slot
    kv = b.k_cache.reshape(-1, 1, b.head_dim_qk)
    return q, kv, padded


def gpu_dsa(engine):
    def prepare(b):
        torch = _torch()
        fn = _dsa_sgl_kernel() if engine == "sglang" else _dsa_vllm_kernel()
        if b.storage != "paged" or b.layout != "NHD":
            raise Unavailable("the engines' sparse kernels read a paged NHD pool; this case's is %s %s"
                              % (b.storage, b.layout))
        major = torch.cuda.get_device_capability()[0]
        if engine == "sglang":  # nsa_backend.py: 128 if device_sm_major >= 10 else 64
            padding = 128 if major >= 10 else 64
        else:  # flashmla_sparse.py: 128 on the SM100 family, else 64
            padding = 128 if major == 10 else 64
        q, kv, padded = _dsa_inputs(b, torch, padding, engine == "sglang")
        indices = b.dsa_indices.reshape(b.total_q, 1, -1)  # [s_q, h_kv = 1, topk], as both engines pass it
        h = _host_lists(b)
        if engine == "sglang":
            def go():
                return fn(q=q, kv=kv, indices=indices, sm_scale=b.sm_scale, d_v=b.head_dim_vo)
        else:
            import inspect
            try:
                takes_length = "topk_length" in inspect.signature(fn).parameters
            except (TypeError, ValueError):
                takes_length = False
            extra = {"topk_length": b.dsa_topk_length} if takes_length else {}

            def go():
                return fn(q, kv, indices, b.sm_scale, **extra)
        fin = _finish(b, torch, h)

        def finish(ret):
            out = ret[0] if isinstance(ret, (tuple, list)) else ret
            # O only: FlashMLA's sparse lse is base 2 in one release and undocumented in others
            return fin(out[:, :b.num_qo_heads], None)[0]
        return go, finish
    return prepare


def _cpu_dsa(engine):
    def adapter(b):
        _dsa_sgl_kernel() if engine == "sglang" else _dsa_vllm_kernel()  # "not installed: ..." first
        torch = _torch()
        raise Unavailable("python.%s runs on PyTorch's CUDA tensors; PyTorch %s here has no CUDA device, or this "
                          "build of attnscope has none" % ("sgl_dsa" if engine == "sglang" else "vllm_dsa",
                                                           torch.__version__))
    return adapter


DSA_GPU_ADAPTERS = {"sgl_dsa": gpu_dsa("sglang"), "vllm_dsa": gpu_dsa("vllm")}
DSA_CPU_ADAPTERS = {"sgl_dsa": _cpu_dsa("sglang"), "vllm_dsa": _cpu_dsa("vllm")}
