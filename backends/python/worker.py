# attnscope's Python worker (docs/python-backends.md, "Protocol"). attnscope starts it once, on the first
# python: backend, as `python3 -u -c <this file>` with a Unix socket pair on its stdin and stdout, and
# sends it one call at a time. Every message, both ways, is a frame: b"ASPY", a little-endian uint32
# length, that many bytes of JSON (the header), then the raw little-endian buffers the header lists
# ({"name", "dtype": "f32" | "i32", "shape"}), back to back. Nothing from a case is unpickled or evaluated:
# the header is JSON and the buffers are plain arrays.
import importlib.util
import json
import mmap
import os
import struct
import sys
import time
import traceback
import types

PROTO_IN = 0
PROTO_OUT = os.dup(1)
os.dup2(2, 1)  # the user's print() goes to stderr, never into the protocol
sys.stdout = sys.stderr


def read_exact(n):
    buf = bytearray(n)
    view = memoryview(buf)
    while view:
        k = os.readv(PROTO_IN, [view])
        if not k:
            sys.exit(0)  # attnscope closed its end: it is done with this worker
        view = view[k:]
    return buf


def write_all(data):
    view = memoryview(data)
    while view:
        n = os.write(PROTO_OUT, view)
        view = view[n:]


def send(header, buffers=()):
    h = json.dumps(header).encode()
    write_all(b"ASPY" + struct.pack("<I", len(h)) + h)
    for b in buffers:
        write_all(b)


try:
    import numpy as np
except Exception as e:  # the hello says why; attnscope reports it as every python: backend's status
    send({"status": "error", "kind": "setup", "message": "NumPy not importable in %s: %s" % (sys.executable, e)})
    sys.exit(0)

DTYPES = {"f32": np.dtype("<f4"), "i32": np.dtype("<i4")}


_shm = None  # the inputs' shared memory; its pages are rewritten for the next call: arrays are valid
             # during the call they were given to


def receive():
    head = read_exact(8)
    if head[:4] != b"ASPY":
        raise SystemExit("attnscope worker: bad frame")
    header = json.loads(bytes(read_exact(struct.unpack("<I", head[4:])[0])))
    arrays = {}
    global _shm
    shm = None
    if "shm" in header:  # large inputs: shared memory attnscope wrote, mapped here once (no copy)
        if header["shm"] != "mapped":  # a new file (attnscope unlinks it once this call is answered)
            with open(header["shm"], "rb") as f:
                _shm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        shm = _shm
    for d in header.get("buffers", []):
        dt = DTYPES[d["dtype"]]
        count = int(np.prod(d["shape"], dtype=np.int64))
        if shm is not None:
            a = np.frombuffer(shm, dtype=dt, count=count, offset=d["offset"])
        else:
            a = np.frombuffer(read_exact(count * dt.itemsize), dtype=dt)
            a.flags.writeable = False
        arrays[d["name"]] = a.reshape(d["shape"])
    return header, arrays


_modules = {}


def load(path, function):
    # a changed file is imported again, so an edit shows on the next run without a new worker
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    mod = _modules.get(key)
    if mod is None:
        name = "attnscope_user_%d" % len(_modules)
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError("%s is not a Python file" % path)
        mod = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        try:
            spec.loader.exec_module(mod)
        finally:
            sys.path.pop(0)
        _modules[key] = mod
    fn = getattr(mod, function, None)
    if not callable(fn):
        raise AttributeError("%s defines no function %s" % (path, function))
    return fn


def cut_middle(s, head, tail):
    """s with its middle cut where it is longer than head + tail characters, saying how much went."""
    if len(s) <= head + tail + 40:
        return s
    return "%s ... [%d characters cut] ... %s" % (s[:head], len(s) - head - tail, s[-tail:])


def short_traceback(e):
    # the exception line and the innermost frames of the user's code, for one status line; a 50 KB
    # message is cut in the middle, so the status stays a line and the file:line survives
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != "<string>"]  # not the worker's
    where = ["%s:%d in %s: %s" % (cut_middle(os.path.basename(f.filename), 60, 20), f.lineno, cut_middle(f.name, 60, 20),
                                  cut_middle((f.line or "").strip(), 100, 40)) for f in frames[-2:]]
    lines = [x for x in "".join(traceback.format_exception_only(type(e), e)).strip().splitlines() if x.strip()]
    # the first line names the exception; PyTorch's compile errors end in advice, not the cause
    what = lines[0] if lines and ("torch" in type(e).__module__ or len(lines) > 3) else (lines or ["?"])[-1]
    return cut_middle(what, 1500, 500) + ("" if not where else " (at " + " <- ".join(reversed(where)) + ")")


class ContractError(Exception):
    pass


class Unavailable(Exception):
    """A named adapter's library is missing here: the backend's status is unsupported, not an error."""


# ---- named adapters on the NumPy path (no PyTorch on a CUDA device): python.sdpa / python.flex_attention
# on CPU tensors in fp64; their GPU forms are in gpu_adapters below

def _torch():
    try:
        import torch
    except Exception as e:
        raise Unavailable("PyTorch not importable in %s: %s" % (sys.executable, e))
    return torch


def _request_kv(b, cache, r):
    kv_len = int(b.cache_seqlens[r])
    if b.storage == "ragged":
        return cache[b.cu_seqlens_k[r]:b.cu_seqlens_k[r + 1]]
    ps = b.page_size
    x = cache[b.block_table[r, :(kv_len + ps - 1) // ps]]
    if b.layout == "HND":
        x = x.transpose(0, 2, 1, 3)
    return x.reshape(-1, x.shape[2], x.shape[3])[:kv_len]


def _per_request(b, torch, attend):
    """O (and the LSE when `attend` gives one) of every request: attend(q, k, v, lo, hi) on [1, H, len, D]
    float64 tensors, K and V repeated to the query heads; a row that sees no key gets O 0, LSE -inf."""
    o = np.zeros((b.total_q, b.num_qo_heads, b.head_dim_vo), np.float32)
    lse = np.full((b.total_q, b.num_qo_heads), -np.inf, np.float32)
    group = b.num_qo_heads // b.num_kv_heads
    have_lse = False
    for r in range(b.num_requests):
        rows = slice(b.cu_seqlens_q[r], b.cu_seqlens_q[r + 1])
        t = lambda a: torch.tensor(np.array(a, np.float64)).transpose(0, 1)[None]
        q = t(b.q[rows])
        k = t(_request_kv(b, b.k_cache, r)).repeat_interleave(group, dim=1)
        v = t(_request_kv(b, b.v_cache, r)).repeat_interleave(group, dim=1)
        lo = torch.tensor(np.array(b.mask_lo[rows], np.int64))
        hi = torch.tensor(np.array(b.mask_hi[rows], np.int64))
        out, l = attend(q, k, v, lo, hi, r, torch.tensor(np.array(b.q_abs[rows], np.int64)))
        empty = (hi <= lo).numpy()
        oo = out[0].transpose(0, 1).numpy()
        oo[empty] = 0
        o[rows] = oo
        if l is not None:
            have_lse = True
            ll = l[0].transpose(0, 1).numpy()
            ll[empty] = -np.inf
            lse[rows] = ll
    return (o, lse) if have_lse else o


def adapter_sdpa(b):
    torch = _torch()
    import torch.nn.functional as F

    def attend(q, k, v, lo, hi, r, qa):
        keys = torch.arange(k.shape[2])
        mask = (keys[None, :] >= lo[:, None]) & (keys[None, :] < hi[:, None])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None], scale=b.sm_scale), None
    return _per_request(b, torch, attend)


def adapter_flex_attention(b):
    torch = _torch()
    try:
        from torch.nn.attention.flex_attention import flex_attention
    except Exception as e:
        raise Unavailable("FlexAttention not importable (PyTorch %s): %s" % (torch.__version__, e))
    mods = _Mods(b, torch, "cpu")

    # a tensor, not a float: PyTorch traces eager flex_attention too, and after a few shapes it makes a
    # captured float a SymFloat, which flex_attention does not take
    cap = torch.tensor(float(b.soft_cap), dtype=torch.float64) if b.soft_cap > 0 else None

    def attend(q, k, v, lo, hi, r, qa):
        def score_mod(score, batch, head, qi, ki):
            s = cap * torch.tanh(score / cap) if cap is not None else score
            if mods.alibi is not None:
                s = s + mods.alibi(head, qa[qi], ki)
            keep = (ki >= lo[qi]) & (ki < hi[qi])
            if mods.mask is not None:
                keep = keep & mods.mask(r, qa[qi], ki)
            return torch.where(keep, s, -float("inf"))
        out, lse = flex_attention(q, k, v, score_mod=score_mod, scale=b.sm_scale, return_lse=True)
        return out, lse
    out = _per_request(b, torch, attend)
    _cpu_block_mask(b, torch, mods)
    return out


CPU_ADAPTERS = {"sdpa": adapter_sdpa, "flex_attention": adapter_flex_attention}


# ---- the GPU path: attnscope's device buffers opened through CUDA IPC as PyTorch tensors (no copy)

_DEV = "cuda"  # the adapters' device (a development harness may run them on "cpu")

class _Cai:
    """A device pointer as __cuda_array_interface__, which torch.as_tensor wraps without copying."""

    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "strides": None, "version": 2}


class _IpcHandle(__import__("ctypes").Structure):
    _fields_ = [("reserved", __import__("ctypes").c_ubyte * 64)]  # c_char would stop at a NUL


_gpu = None  # (torch, libcuda) once PyTorch has set up its CUDA context here


def gpu_setup(device):
    """PyTorch on CUDA device `device` and the driver's IPC calls (libcuda through ctypes: it opens the
    runtime's cudaIpcMemHandle_t, the same 64 bytes, in the primary context PyTorch uses)."""
    global _gpu
    if _gpu is None:
        import ctypes
        torch = _torch()
        if not torch.cuda.is_available():
            raise Unavailable("PyTorch %s here has no CUDA device" % torch.__version__)
        cu = ctypes.CDLL("libcuda.so.1")
        op = getattr(cu, "cuIpcOpenMemHandle_v2", None) or cu.cuIpcOpenMemHandle
        op.argtypes = [ctypes.POINTER(ctypes.c_uint64), _IpcHandle, ctypes.c_uint]
        cu.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
        _gpu = (torch, cu, op)
        torch.cuda.set_device(device)
        torch.zeros(1, device=_DEV)  # makes the primary context current on this thread
    elif _gpu[0].cuda.current_device() != device:
        _gpu[0].cuda.set_device(device)
    return _gpu


def gpu_probe():
    try:
        torch = _torch()
    except Unavailable as e:
        return {"status": "ok", "cuda": False, "why": str(e)}
    if not torch.cuda.is_available():
        return {"status": "ok", "cuda": False, "why": "PyTorch %s here has no CUDA device" % torch.__version__}
    return {"status": "ok", "cuda": True, "torch": torch.__version__, "device": torch.cuda.get_device_name()}


_TYPESTR = {"f32": "<f4", "i32": "<i4", "f16": "<f2", "bf16": "<i2"}


# The opened IPC mappings and the tensors over them, kept across calls: attnscope keeps its allocations
# while the sizes stay the same and sends a new epoch when it replaces them (it frees the old ones only
# after this worker has answered a call of the new epoch), so a cached mapping is never read after its
# allocation is gone. ATTNSCOPE_PYTHON_IPC_CACHE=0 opens and closes every mapping per call instead.
_ipc = {"epoch": None, "bases": {}, "tensors": {}}
_IPC_CACHE = os.environ.get("ATTNSCOPE_PYTHON_IPC_CACHE", "1") != "0"


def _ipc_drop(cu):
    for base in _ipc["bases"].values():
        cu.cuIpcCloseMemHandle(base)
    _ipc.update(epoch=None, bases={}, tensors={})


def gpu_inputs(desc):
    """The call's tensors: views of attnscope's allocations. Returns (arrays, close, stats): close() ends
    the call's use of them, stats counts the allocations whose mapping was reused or opened."""
    import ctypes
    torch, cu, op = gpu_setup(desc["device"])
    if not _IPC_CACHE or desc.get("epoch") is None or desc["epoch"] != _ipc["epoch"]:
        torch.cuda.synchronize()
        _ipc_drop(cu)
        _ipc["epoch"] = desc.get("epoch")
    bases, tensors = _ipc["bases"], _ipc["tensors"]
    seen = set()
    stats = {"reused": 0, "opened": 0}
    arrays = {}
    try:
        for d in desc["buffers"]:
            base = bases.get(d["handle"])
            if base is None:
                ptr = ctypes.c_uint64(0)
                rc = op(ctypes.byref(ptr), _IpcHandle.from_buffer_copy(bytes.fromhex(d["handle"])), 1)  # lazy peer access
                if rc != 0:
                    raise RuntimeError("cuIpcOpenMemHandle of %s failed (CUresult %d)" % (d["name"], rc))
                base = bases[d["handle"]] = ptr.value
                stats["opened"] += 1
            elif d["handle"] not in seen:
                stats["reused"] += 1
            seen.add(d["handle"])
            key = (d["handle"], d["offset"], tuple(d["shape"]), d["dtype"])
            t = tensors.get(key)
            if t is None:
                t = torch.as_tensor(_Cai(base + d["offset"], d["shape"], _TYPESTR[d["dtype"]]), device=_DEV)
                t = tensors[key] = t.view(torch.bfloat16) if d["dtype"] == "bf16" else t
            arrays[d["name"]] = t.view(t.shape)  # a fresh view: a function's in-place t_() or the like stays its own
    except Exception:
        _ipc_drop(cu)
        raise

    def close():
        torch.cuda.synchronize()
        if not _IPC_CACHE:
            _ipc_drop(cu)
    return arrays, close, stats


def _host_lists(b):
    return {n: getattr(b, n).tolist() for n in ("cu_seqlens_q", "cu_seqlens_k", "cache_seqlens", "mask_lo", "mask_hi")}


def _t_request_kv(b, cache, r, h):
    """Request r's keys (or values) [kv_len, kv_heads, dim], gathered from its pages."""
    kv_len = h["cache_seqlens"][r]
    if b.storage == "ragged":
        return cache[h["cu_seqlens_k"][r]:h["cu_seqlens_k"][r + 1]]
    x = cache[b.block_table[r, :(kv_len + b.page_size - 1) // b.page_size].long()]
    if b.layout == "HND":
        x = x.transpose(1, 2)
    return x.reshape(-1, x.shape[2], x.shape[3])[:kv_len]


def _mask_kind(b, h, r):
    """'none' (every row sees every key), 'causal' (top-left: row i sees keys [0, i]), or 'other'."""
    s, e, kv = h["cu_seqlens_q"][r], h["cu_seqlens_q"][r + 1], h["cache_seqlens"][r]
    lo, hi = h["mask_lo"][s:e], h["mask_hi"][s:e]
    if all(a == 0 for a in lo) and all(x == kv for x in hi):
        return "none"
    if e - s == kv and all(a == 0 for a in lo) and hi == list(range(1, kv + 1)):
        return "causal"
    return "other"


def _finish(b, torch, h):
    empty = torch.tensor([lo >= hi for lo, hi in zip(h["mask_lo"], h["mask_hi"])], device=_DEV)

    def finish(o, lse):
        o = torch.where(empty[:, None, None], 0.0, o.float())
        if lse is not None:
            lse = torch.where(empty[:, None], -float("inf"), lse.float())
        return o, lse
    return finish


SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "math": "MATH"}


def gpu_sdpa(backend):
    def prepare(b):
        torch = _torch()
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        h = _host_lists(b)
        group = b.num_qo_heads // b.num_kv_heads
        items = []
        for r in range(b.num_requests):
            s, e = h["cu_seqlens_q"][r], h["cu_seqlens_q"][r + 1]
            q = b.q[s:e].transpose(0, 1)[None].contiguous()
            k = _t_request_kv(b, b.k_cache, r, h).repeat_interleave(group, 1).transpose(0, 1)[None].contiguous()
            v = _t_request_kv(b, b.v_cache, r, h).repeat_interleave(group, 1).transpose(0, 1)[None].contiguous()
            kind = _mask_kind(b, h, r)
            mask = None
            if kind == "other":
                keys = torch.arange(k.shape[2], device=_DEV)
                lo, hi = b.mask_lo[s:e, None], b.mask_hi[s:e, None]
                mask = ((keys[None, :] >= lo) & (keys[None, :] < hi))[None, None]
            items.append((s, e, q, k, v, mask, kind == "causal"))
        pinned = [getattr(SDPBackend, SDPA_BACKENDS[backend])] if backend else None

        def go():
            outs = []
            ctx = sdpa_kernel(pinned) if pinned else None  # a generator's context: one per call
            if ctx is not None:
                ctx.__enter__()
            try:
                for (s, e, q, k, v, mask, causal) in items:
                    outs.append(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                               scale=b.sm_scale))
            except RuntimeError as ex:
                if backend and "No available kernel" in str(ex):
                    raise Unavailable("PyTorch's SDPA %s backend does not take this case (%s)"
                                      % (backend, "a mask other than none or causal with q_len == kv_len"
                                         if any(i[5] is not None for i in items) else str(ex).splitlines()[0]))
                raise
            finally:
                if ctx is not None:
                    ctx.__exit__(None, None, None)
            return outs
        fin = _finish(b, torch, h)

        def finish(outs):
            o = torch.empty((b.total_q, b.num_qo_heads, b.head_dim_vo), device=_DEV)
            for (s, e, *_), out in zip(items, outs):
                o[s:e] = out[0].transpose(0, 1)
            return fin(o, None)
        return go, finish
    return prepare


_flex_compiled = None
# FlexAttention's kernel_options to try: PyTorch 2.11's default (BACKEND AUTO) found no kernel for these
# calls on an H100 (NoValidChoicesError) where BACKEND TRITON compiles
_flex_options = [None, {"BACKEND": "TRITON"}, {"BACKEND": "TRITON", "USE_TMA": False}]
last_block_mask = None  # the last python.flex_attention call's BlockMask, for the reply


def gpu_flex(b):
    global _flex_compiled, last_block_mask
    torch = _torch()
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except Exception as e:
        raise Unavailable("FlexAttention not importable (PyTorch %s): %s" % (torch.__version__, e))
    if _flex_compiled is None:
        _flex_compiled = torch.compile(flex_attention, dynamic=False)
    h = _host_lists(b)
    B = b.num_requests
    q = b.q.transpose(0, 1)[None].contiguous()
    k = torch.cat([_t_request_kv(b, b.k_cache, r, h) for r in range(B)]).transpose(0, 1)[None].contiguous()
    v = torch.cat([_t_request_kv(b, b.v_cache, r, h) for r in range(B)]).transpose(0, 1)[None].contiguous()
    mods = _Mods(b, torch, _DEV)
    mask_mod, qa, kv_pos = _packed_mask_mod(b, torch, _DEV, mods, h)
    bm = create_block_mask(mask_mod, None, None, b.total_q, b.total_kv, device=_DEV)
    last_block_mask = bm
    cap = float(b.soft_cap)

    def score_mod(s, bi, hd, qi, ki):
        if cap > 0:
            s = cap * torch.tanh(s / cap)
        if mods.alibi is not None:  # after the soft-cap, as attnscope's reference
            s = s + mods.alibi(hd, qa[qi], kv_pos[ki])
        return s
    if cap <= 0 and mods.alibi is None:
        score_mod = None

    tried = _flex_options  # kernel_options in turn; the first that compiles here stays first for the worker

    def flex(opts):
        kw = dict(score_mod=score_mod, block_mask=bm, scale=b.sm_scale, enable_gqa=True, kernel_options=opts)
        try:
            return _flex_compiled(q, k, v, return_lse=True, **kw)
        except TypeError:  # a PyTorch that asks for return_aux instead
            from torch.nn.attention.flex_attention import AuxRequest
            out, aux = _flex_compiled(q, k, v, return_aux=AuxRequest(lse=True), **kw)
            return out, aux.lse

    def go():
        # the first kernel_options this PyTorch compiles for the case, kept for the timed calls
        while True:
            try:
                return flex(tried[0])
            except Exception:
                if len(tried) == 1:
                    raise
                traceback.print_exc(file=sys.stderr)
                print("attnscope: flex_attention with kernel_options %s failed; trying %s" % (tried[0], tried[1]),
                      file=sys.stderr)
                tried.pop(0)
    fin = _finish(b, torch, h)

    def finish(ret):
        out, lse = ret
        return fin(out[0].transpose(0, 1), lse[0].transpose(0, 1))
    return go, finish


def _fa_window(b, h):
    """FlashAttention's (causal, window_size) for the case, or why its mask is not one it takes."""
    for r in range(b.num_requests):
        s, e, kv = h["cu_seqlens_q"][r], h["cu_seqlens_q"][r + 1], h["cache_seqlens"][r]
        for i in range(e - s):
            end = kv - (e - s) + i + 1 if b.causal else kv  # bottom-right aligned, as FlashAttention's causal
            start = max(0, end - 1 - b.window_left) if b.window_left >= 0 else 0
            if (h["mask_lo"][s + i], h["mask_hi"][s + i]) != (start, min(max(end, 0), kv)):
                raise Unavailable("flash_attn_with_kvcache takes causal and sliding-window masks; this case's mask "
                                  "is another")
    return bool(b.causal), (b.window_left, 0 if b.causal else -1) if b.window_left >= 0 else (-1, -1)


def gpu_engine(module, name):
    def prepare(b):
        import importlib
        torch = _torch()
        try:
            mod = importlib.import_module(module)
        except Exception as e:
            raise Unavailable("not installed: %s (%s)" % (module, e))
        fn = getattr(mod, name)
        if b.storage != "paged" or b.layout != "NHD":
            raise Unavailable("the engines' kernels read a paged NHD cache; this case's is %s %s" % (b.storage, b.layout))
        h = _host_lists(b)
        causal, window = _fa_window(b, h)
        cap = float(b.soft_cap)
        if module == "sgl_kernel.flash_attn":  # SGLang's FlashAttentionBackend (forward_extend / forward_decode)
            def go():
                return fn(q=b.q, k_cache=b.k_cache, v_cache=b.v_cache, page_table=b.block_table,
                          cache_seqlens=b.cache_seqlens, cu_seqlens_q=b.cu_seqlens_q, cu_seqlens_k_new=None,
                          max_seqlen_q=b.max_seqlen_q, softmax_scale=b.sm_scale, causal=causal, window_size=window,
                          softcap=cap, return_softmax_lse=True)
        else:  # vLLM's FlashAttentionImpl.forward: the varlen entry point on the paged cache
            def go():
                return fn(q=b.q, k=b.k_cache, v=b.v_cache, max_seqlen_q=b.max_seqlen_q, cu_seqlens_q=b.cu_seqlens_q,
                          max_seqlen_k=b.max_seqlen_k, seqused_k=b.cache_seqlens, softmax_scale=b.sm_scale,
                          causal=causal, window_size=list(window), block_table=b.block_table, softcap=cap,
                          return_softmax_lse=True)
        fin = _finish(b, torch, h)

        def finish(ret):
            out, lse = ret
            if lse.shape[0] == b.num_qo_heads and lse.shape[-1] == b.total_q:  # FlashAttention's [heads, total_q]
                lse = lse.reshape(b.num_qo_heads, b.total_q).transpose(0, 1)
            return fin(out, lse)
        return go, finish
    return prepare


def gpu_flex_prepare(b):
    return gpu_flex(b)


GPU_ADAPTERS = {"sdpa": gpu_sdpa(None), "flex_attention": gpu_flex_prepare,
                "sgl_fa3": gpu_engine("sgl_kernel.flash_attn", "flash_attn_with_kvcache"),
                "vllm_fa": gpu_engine("vllm.vllm_flash_attn", "flash_attn_varlen_func"), "fa3": gpu_fa3}
GPU_ADAPTERS.update({"sdpa_" + k: gpu_sdpa(k) for k in SDPA_BACKENDS})


def _cpu_needs_gpu(name, module=None):
    def adapter(b):
        if module is not None:
            import importlib
            try:
                importlib.import_module(module)
            except Exception as e:
                raise Unavailable("not installed: %s (%s)" % (module, e))
        torch = _torch()
        raise Unavailable("%s runs on PyTorch's CUDA tensors; PyTorch %s here has no CUDA device, or this build of "
                          "attnscope has none" % (name, torch.__version__))
    return adapter


CPU_ADAPTERS.update({"sdpa_" + k: _cpu_needs_gpu("python.sdpa_" + k) for k in ("flash", "cudnn", "efficient", "math")})
CPU_ADAPTERS["sgl_fa3"] = _cpu_needs_gpu("python.sgl_fa3", "sgl_kernel.flash_attn")
CPU_ADAPTERS["vllm_fa"] = _cpu_needs_gpu("python.vllm_fa", "vllm.vllm_flash_attn")


def _cpu_fa3(b):
    _fa3_module()  # worker_fa3.py: "not installed: fa3_fwd (pip install ...)" first, as the engines' adapters
    return _cpu_needs_gpu("python.fa3")(b)


CPU_ADAPTERS["fa3"] = _cpu_fa3
GPU_ADAPTERS.update(DSA_GPU_ADAPTERS)  # python.sgl_dsa, python.vllm_dsa (worker_dsa.py)
CPU_ADAPTERS.update(DSA_CPU_ADAPTERS)


def checked(value, name, shape):
    if type(value).__module__.startswith("torch"):
        if not value.is_floating_point():
            raise ContractError("%s has dtype %s; the contract wants a floating tensor" % (name, value.dtype))
        if tuple(value.shape) != tuple(shape):
            raise ContractError("%s has shape %s; the contract wants %s" % (name, tuple(value.shape), tuple(shape)))
        return value
    a = np.asarray(value)
    if a.dtype.kind != "f":
        raise ContractError("%s has dtype %s; the contract wants a floating array (float16, float32 or float64)"
                            % (name, a.dtype))
    if tuple(a.shape) != tuple(shape):
        raise ContractError("%s has shape %s; the contract wants %s" % (name, tuple(a.shape), tuple(shape)))
    return np.ascontiguousarray(a, dtype="<f4")


def outputs(ret, meta):
    o_shape = (meta["total_q"], meta["num_qo_heads"], meta["head_dim_vo"])
    lse = None
    if isinstance(ret, (tuple, list)):
        if len(ret) not in (1, 2):
            raise ContractError("the function returned %d values; the contract wants O or (O, LSE)" % len(ret))
        o = ret[0]
        lse = ret[1] if len(ret) == 2 else None
    else:
        o = ret
    if o is None:
        raise ContractError("the function returned None; the contract wants O or (O, LSE)")
    o = checked(o, "O", o_shape)
    if lse is not None:
        lse = checked(lse, "LSE", o_shape[:2])
    return o, lse


def _as_numpy(t):
    """A device tensor as the NumPy path's array (float32 or int32, read-only): for a function that asks
    for NumPy (ATTNSCOPE_INPUTS = "numpy") on the GPU path."""
    a = (t.float() if t.is_floating_point() else t).cpu().numpy()
    a.flags.writeable = False
    return a


def call_gpu(header, fn, adapter):
    """The GPU path: inputs are views of attnscope's allocations; O (and the LSE) go into its output
    buffer. Times the function with CUDA events: `warmup` calls, then `reps` timed ones."""
    t0 = time.perf_counter()
    meta = header["meta"]
    arrays, close, ipc = gpu_inputs(header["cuda"])
    torch = _gpu[0]
    try:
        out_o, out_lse = arrays.pop("o"), arrays.pop("lse")
        wants = "torch"
        if adapter is None:
            wants = getattr(fn, "__globals__", {}).get("ATTNSCOPE_INPUTS", "torch")
        if wants == "numpy":
            arrays = {k: _as_numpy(v) for k, v in arrays.items()}
        fp8 = {"fp8": header["cuda"]["fp8"]} if "fp8" in header["cuda"] else {}  # an FP8 case's scales
        batch = types.SimpleNamespace(**meta, **arrays, **fp8, inputs=wants)
        setup_ms = 0.0
        if adapter is not None:  # the adapter's set-up (gathers, masks, BlockMask) is timed apart
            s = time.perf_counter()
            go, finish = adapter(batch)
            torch.cuda.synchronize()
            setup_ms = (time.perf_counter() - s) * 1e3
        else:
            go, finish = (lambda: fn(batch)), (lambda ret: ret)
        times, wall = [], 0.0
        for i in range(int(header.get("warmup", 0)) + max(1, int(header.get("reps", 1)))):
            ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a = time.perf_counter()
            ev[0].record()
            ret = go()
            ev[1].record()
            torch.cuda.synchronize()
            took = (time.perf_counter() - a) * 1e3
            wall += took
            if i >= int(header.get("warmup", 0)):  # a NumPy function's time is the host's
                times.append(ev[0].elapsed_time(ev[1]) if wants == "torch" else took)
        o, lse = outputs(finish(ret), meta)
        out_o.copy_(torch.as_tensor(o, device=_DEV).reshape(out_o.shape))
        if lse is not None:
            out_lse.copy_(torch.as_tensor(lse, device=_DEV).reshape(out_lse.shape))
        reply = {"status": "ok", "call_ms": times, "timer": "cuda_events" if wants == "torch" else "host",
                 "call_wall_ms": wall, "setup_ms": setup_ms, "lse": lse is not None, "buffers": [], "ipc": ipc}
        if adapter is not None and header.get("adapter") == "flex_attention":
            reply["block_mask"] = block_mask_summary()
        if adapter is not None and header.get("adapter") == "fa3":
            reply["fa3_plan"] = last_fa3_plan
        del batch, arrays, out_o, out_lse, o, lse, ret
    finally:
        close()
    reply["worker_overhead_ms"] = (time.perf_counter() - t0) * 1e3 - wall - reply["setup_ms"]
    send(reply)


def call(header, arrays):
    if header.get("op") == "probe":
        send(gpu_probe())
        return
    fn = adapter = None
    if "adapter" in header:
        adapter = (GPU_ADAPTERS if "cuda" in header else CPU_ADAPTERS)[header["adapter"]]
    else:
        fn = load(header["file"], header["function"])
    if "cuda" in header:
        return call_gpu(header, fn, adapter)
    t0 = time.perf_counter()
    meta = header["meta"]
    fn = fn or adapter
    batch = types.SimpleNamespace(**meta, **arrays, inputs="numpy")
    reps = max(1, int(header.get("reps", 1)))
    times = []
    t1 = time.perf_counter()
    for _ in range(reps):
        a = time.perf_counter()
        ret = fn(batch)
        times.append((time.perf_counter() - a) * 1e3)
    t2 = time.perf_counter()
    o, lse = outputs(ret, meta)
    if not isinstance(o, np.ndarray):  # a torch tensor from a CPU-path function
        o = np.ascontiguousarray(o.detach().float().cpu().numpy(), dtype="<f4")
        lse = None if lse is None else np.ascontiguousarray(lse.detach().float().cpu().numpy(), dtype="<f4")
    bufs = [{"name": "o", "dtype": "f32", "shape": list(o.shape)}]
    if lse is not None:
        bufs.append({"name": "lse", "dtype": "f32", "shape": list(lse.shape)})
    overhead = ((t1 - t0) + (time.perf_counter() - t2)) * 1e3
    reply = {"status": "ok", "call_ms": times, "timer": "host", "worker_overhead_ms": overhead, "buffers": bufs}
    if header.get("adapter") == "flex_attention":
        reply["block_mask"] = block_mask_summary()
    send(reply, [o.tobytes()] + ([] if lse is None else [lse.tobytes()]))


def main():
    send({"status": "ok", "python": sys.version.split()[0], "numpy": np.__version__, "pid": os.getpid()})
    while True:
        header, arrays = receive()
        try:
            call(header, arrays)
        except ContractError as e:
            send({"status": "error", "kind": "contract", "message": str(e)})
        except Unavailable as e:
            send({"status": "error", "kind": "unavailable", "message": str(e)})
        except Exception as e:
            if "adapter" in header:  # attnscope's own code: the whole traceback on attnscope's stderr
                traceback.print_exc(file=sys.stderr)
            send({"status": "error", "kind": "exception", "message": short_traceback(e)})


main()
