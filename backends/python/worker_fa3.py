# python.fa3's piece of attnscope's Python worker (docs/python-backends.md, "FlashAttention-3"): FA3 from
# the fa3-fwd wheel (module fa3_fwd_interface), forward only, built without paged KV, local attention,
# fp16 and the backward. backends/python/CMakeLists.txt puts this file before worker.py in the one script
# (so it imports nothing that may be missing); the names it uses from worker.py (_torch, _host_lists,
# _t_request_kv, Unavailable, _DEV) are looked up when called.

FA3_PIP = "pip install fa3-fwd==0.0.3"
# What the wheel compiled out and what FA3 cannot take is refused before a call reaches the worker, by the
# backend's check() (python_backend.cpp fa3_refusal): one list of rules, tested in CI without PyTorch.
last_fa3_plan = None  # the last python.fa3 call's read-back of FA3's own plan, for the reply


def _fa3_module():
    try:
        import fa3_fwd_interface as fa3
    except Exception as e:
        raise Unavailable("not installed: fa3_fwd (%s) (%s: %s)" % (FA3_PIP, type(e).__name__, e))
    return fa3


def _fa3_lengths(b, h):
    """Each request's seqused_q / seqused_k for FA3, from the rows' key ranges: FA3 takes causal (bottom-right)
    or no mask over the first seqused_k keys, and padding (/requests/i/pad_start) as the rows past
    seqused_q, which see no key (FA3 leaves them unwritten; finish() makes them O 0, LSE -inf). Any other
    mask is refused."""
    used_q, used_k = [], []
    for r in range(b.num_requests):
        s, e = h["cu_seqlens_q"][r], h["cu_seqlens_q"][r + 1]
        lo, hi = h["mask_lo"][s:e], h["mask_hi"][s:e]
        sq = sum(1 for a, z in zip(lo, hi) if z > a)
        sk = max([z for a, z in zip(lo, hi) if z > a] or [0])
        for i in range(e - s):
            end = (sk - sq + i + 1 if b.causal else sk) if i < sq else 0
            if (lo[i], hi[i]) != (0, end) and not (end == 0 and lo[i] >= hi[i]):
                raise Unavailable("FA3 takes a causal mask (bottom-right) or none, with padding; this case's mask is "
                                  "another (prefix-LM, documents)")
        used_q.append(sq)
        used_k.append(sk)
    return used_q, used_k


def _fa3_descales(b, torch, fp8):
    """q/k/v_descale of shape (batch, kv_heads), float32, from the case's FP8 scales (tensor: one
    number, head: one per KV head); the device values are the FP8 values themselves, so FA3 multiplies
    the scales back in as its descale factors."""
    def per_head(x):
        t = torch.tensor([float(s) for s in x], dtype=torch.float32, device=_DEV)
        t = t.expand(b.num_kv_heads) if t.numel() == 1 else t
        return t[None, :].expand(b.num_requests, b.num_kv_heads).contiguous()
    return per_head([fp8["q_scale"]]), per_head(fp8["k_scale"]), per_head(fp8["v_scale"])


def _fa3_read_back(b, torch, fa3, q, k, v, kw, num_splits):
    """FA3's own plan for these arguments: get_scheduler_metadata's tensor (per request, un-sorted) and
    the split count of the call itself (its partials' leading dim; 1 without partials)."""
    plan = {"num_sms": torch.cuda.get_device_properties(q.device).multi_processor_count,
            "device": torch.cuda.get_device_name(q.device)}
    B = b.num_requests
    try:
        # the op under get_scheduler_metadata (whose Python wrapper has no seqused_q), with the call's arguments
        md = fa3.fa3_fwd_cuda.get_scheduler_metadata(
            B, b.max_seqlen_q, b.max_seqlen_k, b.num_qo_heads, b.num_kv_heads, b.head_dim_qk, b.head_dim_vo, q.dtype,
            kw["seqused_k"], cu_seqlens_q=kw["cu_seqlens_q"], cu_seqlens_k=kw["cu_seqlens_k"],
            seqused_q=kw["seqused_q"], is_causal=kw["causal"], has_softcap=kw["softcap"] > 0, num_splits=num_splits)
        md = md.tolist()
        plan["metadata"], plan["metadata_size"] = md[:64], len(md)
        # {num_splits_dynamic, num_m_blocks, varlen_batch_idx (when sorted), num_nheads_in_l2 (causal)}
        # vectors of round_up(B, 4), then the semaphore (flash_api.cpp's layout)
        br = (B + 3) // 4 * 4
        vecs = (len(md) - 1) // br if br else 0
        if vecs >= 2:
            splits, mblocks = md[:B], md[br:br + B]
            order = md[2 * br:2 * br + B] if vecs >= 3 else list(range(B))
            if sorted(order) == list(range(B)):
                plan["request_splits"], plan["request_m_blocks"] = [0] * B, [0] * B
                for vb, bi in enumerate(order):
                    plan["request_splits"][bi], plan["request_m_blocks"][bi] = splits[vb], mblocks[vb]
    except Exception as e:  # the read-back is a view of the plan, not the result: say why and go on
        plan["metadata_error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    with torch.no_grad():
        ret = fa3._flash_attn_forward(q, k, v, **kw, num_splits=num_splits, pack_gqa=None)
    plan["num_splits"] = int(ret[2].shape[0]) if ret[2].numel() else 1
    return plan


def gpu_fa3(b):
    """python.fa3 on the device inputs: FA3's varlen entry point (flash_attn_varlen_func) on Q as given and
    K / V gathered from attnscope's pages into one contiguous buffer (the set-up, timed apart: this build
    has no paged KV), cu_seqlens_q / cu_seqlens_k / seqused_k, causal, soft-cap, FP8 descales."""
    global last_fa3_plan
    last_fa3_plan = None
    fa3 = _fa3_module()
    torch = _torch()
    fp8 = getattr(b, "fp8", None)  # e4m3 with tensor or head scales and Q in FP8 (check() refused the rest)
    h = _host_lists(b)
    used_q, used_k = _fa3_lengths(b, h)
    qlens = [h["cu_seqlens_q"][r + 1] - h["cu_seqlens_q"][r] for r in range(b.num_requests)]
    padded = used_q != qlens
    if b.storage == "ragged":  # already one contiguous varlen buffer, request after request
        k, v = b.k_cache[:b.total_kv], b.v_cache[:b.total_kv]
    else:
        k = torch.cat([_t_request_kv(b, b.k_cache, r, h) for r in range(b.num_requests)]).contiguous()
        v = torch.cat([_t_request_kv(b, b.v_cache, r, h) for r in range(b.num_requests)]).contiguous()
    q = b.q
    i32 = lambda x: torch.tensor(x, dtype=torch.int32, device=_DEV)
    kw = dict(cu_seqlens_q=b.cu_seqlens_q, cu_seqlens_k=b.cu_seqlens_k, seqused_q=i32(used_q) if padded else None,
              seqused_k=i32(used_k) if padded else b.cache_seqlens, max_seqlen_q=b.max_seqlen_q,
              max_seqlen_k=b.max_seqlen_k, softmax_scale=b.sm_scale, causal=bool(b.causal), softcap=float(b.soft_cap))
    if fp8:
        kw["q_descale"], kw["k_descale"], kw["v_descale"] = _fa3_descales(b, torch, fp8)
        # the device buffers hold the FP8 values in bf16, exactly: the cast is lossless
        q, k, v = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
    num_splits = int(getattr(b, "fa3_num_splits", 0))
    last_fa3_plan = _fa3_read_back(b, torch, fa3, q, k, v, kw, num_splits)
    var = {n: kw[n] for n in ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "seqused_q", "seqused_k")}
    rest = {n: kw[n] for n in kw if n not in var}

    def go():
        with torch.no_grad():
            return fa3.flash_attn_varlen_func(q, k, v, **var, **rest, num_splits=num_splits, pack_gqa=None,
                                              return_attn_probs=True)

    unwritten = None
    if padded:  # the rows past seqused_q: FA3 computes nothing there
        unwritten = torch.tensor([i >= used_q[r] for r in range(b.num_requests) for i in range(qlens[r])], device=_DEV)

    def finish(ret):
        out, lse = ret[0].float(), ret[1].float().transpose(0, 1)  # FA3's varlen LSE is [heads, total_q], natural log
        if unwritten is not None:
            out = torch.where(unwritten[:, None, None], 0.0, out)
            lse = torch.where(unwritten[:, None], -float("inf"), lse)
        return out, lse
    return go, finish
