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


def short_traceback(e):
    # the exception line and the innermost frames of the user's code, for one status line
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != "<string>"]  # not the worker's
    where = ["%s:%d in %s: %s" % (os.path.basename(f.filename), f.lineno, f.name, (f.line or "").strip())
             for f in frames[-2:]]
    what = "".join(traceback.format_exception_only(type(e), e)).strip().splitlines()[-1]
    return what + ("" if not where else " (at " + " <- ".join(reversed(where)) + ")")


class ContractError(Exception):
    pass


class Unavailable(Exception):
    """A named adapter's library is missing here: the backend's status is unsupported, not an error."""


# ---- named adapters (python.sdpa, python.flex_attention): attnscope's own code, run on CPU tensors in
# this landing (the GPU path, through CUDA IPC, is not yet)

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
        out, l = attend(q, k, v, lo, hi)
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

    def attend(q, k, v, lo, hi):
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

    def attend(q, k, v, lo, hi):
        cap = b.soft_cap

        def score_mod(score, batch, head, qi, ki):
            s = cap * torch.tanh(score / cap) if cap > 0 else score
            return torch.where((ki >= lo[qi]) & (ki < hi[qi]), s, -float("inf"))
        out, lse = flex_attention(q, k, v, score_mod=score_mod, scale=b.sm_scale, return_lse=True)
        return out, lse
    return _per_request(b, torch, attend)


ADAPTERS = {"sdpa": adapter_sdpa, "flex_attention": adapter_flex_attention}


def checked(value, name, shape):
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


def call(header, arrays):
    t0 = time.perf_counter()
    meta = header["meta"]
    fn = ADAPTERS[header["adapter"]] if "adapter" in header else load(header["file"], header["function"])
    batch = types.SimpleNamespace(**meta, **arrays)
    reps = max(1, int(header.get("reps", 1)))
    times = []
    t1 = time.perf_counter()
    for _ in range(reps):
        a = time.perf_counter()
        ret = fn(batch)
        times.append((time.perf_counter() - a) * 1e3)
    t2 = time.perf_counter()
    o, lse = outputs(ret, meta)
    bufs = [{"name": "o", "dtype": "f32", "shape": list(o.shape)}]
    if lse is not None:
        bufs.append({"name": "lse", "dtype": "f32", "shape": list(lse.shape)})
    overhead = ((t1 - t0) + (time.perf_counter() - t2)) * 1e3
    send({"status": "ok", "call_ms": times, "worker_overhead_ms": overhead, "buffers": bufs},
         [o.tobytes()] + ([] if lse is None else [lse.tobytes()]))


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
            send({"status": "error", "kind": "exception", "message": short_traceback(e)})


main()
