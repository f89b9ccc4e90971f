# attnscope's Python worker (docs/python-backends.md, "Protocol"). attnscope starts it once, on the first
# python: backend, as `python3 -u -c <this file>` with a Unix socket pair on its stdin and stdout, and
# sends it one call at a time. Every message, both ways, is a frame: b"ASPY", a little-endian uint32
# length, that many bytes of JSON (the header), then the raw little-endian buffers the header lists
# ({"name", "dtype": "f32" | "i32", "shape"}), back to back. Nothing from a case is unpickled or evaluated:
# the header is JSON and the buffers are plain arrays.
import importlib.util
import json
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
    parts = []
    while n:
        b = os.read(PROTO_IN, min(n, 1 << 24))
        if not b:
            sys.exit(0)  # attnscope closed its end: it is done with this worker
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


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


def receive():
    head = read_exact(8)
    if head[:4] != b"ASPY":
        raise SystemExit("attnscope worker: bad frame")
    header = json.loads(read_exact(struct.unpack("<I", head[4:])[0]))
    arrays = {}
    for d in header.get("buffers", []):
        dt = DTYPES[d["dtype"]]
        n = int(np.prod(d["shape"], dtype=np.int64)) * dt.itemsize
        arrays[d["name"]] = np.frombuffer(read_exact(n), dtype=dt).reshape(d["shape"])
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
    fn = load(header["file"], header["function"])
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
        except Exception as e:
            send({"status": "error", "kind": "exception", "message": short_traceback(e)})


main()
