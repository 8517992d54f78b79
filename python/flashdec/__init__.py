"""flashdec: decode attention over a KV cache, on numpy arrays and torch tensors (CPU and CUDA), zero-copy.

    out = flashdec.decode(q, k, v)                   # q [H, D]; k, v [rows, G, D] (or any strided view)
    out, lse = flashdec.decode(q, k, v, window=1024, ring_capacity=1024, seq_len=n, return_lse=True)

For every query head h with KV head g = h // (H // G), over positions [lo, seq_len) where
lo = max(0, seq_len - window) when window > 0:

    out[h] = softmax(scale * q[h] . K[t][g]) @ V[t][g],   lse[h] = log(sum_t exp(scale * q[h] . K[t][g]))

Position t lives in row t (or t % ring_capacity with a ring). numpy arrays and CPU torch tensors run on the
CPU backend; CUDA torch tensors run on the CUDA backend on torch's current stream, without a copy or a
synchronisation. The library checks everything: bad input raises ValueError (or TypeError for a wrong type)
with the library's own message, and nothing is written to `out` then.
"""
import ctypes as _C
import numbers as _numbers
import os as _os
import threading as _threading

__all__ = ["decode", "merge", "plan", "info", "Layer", "FlashdecError", "library_path"]

_F32, _F16, _BF16 = 0, 1, 2
_CPU, _CUDA = 0, 1
_STATUS = {0: "ok", 1: "invalid argument", 2: "unsupported", 3: "out of memory", 4: "backend error"}


class FlashdecError(RuntimeError):
    """A failure of the library that is not the caller's input (out of memory, a CUDA error)."""


class _LayerC(_C.Structure):
    _fields_ = [("head_dim", _C.c_uint32), ("num_q_heads", _C.c_uint32), ("num_kv_heads", _C.c_uint32),
                ("scale", _C.c_float), ("window", _C.c_uint32), ("ring_capacity", _C.c_uint32),
                ("q_dtype", _C.c_int), ("kv_dtype", _C.c_int), ("out_dtype", _C.c_int),
                ("kv_pos_stride", _C.c_size_t), ("kv_head_stride", _C.c_size_t),
                ("softcap", _C.c_float), ("sinks", _C.c_void_p), ("alibi_slopes", _C.c_void_p),
                ("k_scale", _C.c_float), ("v_scale", _C.c_float), ("k_scales", _C.c_void_p),
                ("v_scales", _C.c_void_p)]


class _OptionsC(_C.Structure):
    _fields_ = [("threads", _C.c_uint32), ("cpu_path", _C.c_int), ("parallel_for", _C.c_void_p),
                ("parallel_user", _C.c_void_p), ("cuda_device", _C.c_int), ("cuda_stream", _C.c_void_p)]


class _PlanC(_C.Structure):
    _fields_ = [("kv_start", _C.c_uint32), ("kv_end", _C.c_uint32), ("num_chunks", _C.c_uint32),
                ("chunk_len", _C.c_uint32), ("grouped", _C.c_int), ("scratch_bytes", _C.c_size_t),
                ("path", _C.c_char_p)]


def library_path():
    """The shared library this package loads: the one installed with it (FLASHDEC_LIBRARY overrides)."""
    env = _os.environ.get("FLASHDEC_LIBRARY")
    if env:
        return env
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "_lib", "libflashdec.so")


_lib = _C.CDLL(library_path())
_lib.fdec_default_options.restype = _OptionsC
_lib.fdec_context_create.argtypes = [_C.c_int, _C.POINTER(_OptionsC), _C.POINTER(_C.c_void_p)]
_lib.fdec_context_destroy.argtypes = [_C.c_void_p]
_lib.fdec_context_reserve.argtypes = [_C.c_void_p, _C.POINTER(_LayerC), _C.c_uint32]
_lib.fdec_decode.argtypes = [_C.c_void_p, _C.POINTER(_LayerC), _C.c_uint32, _C.c_void_p, _C.c_void_p,
                             _C.c_void_p, _C.c_void_p, _C.c_void_p]
_lib.fdec_plan.argtypes = [_C.c_void_p, _C.POINTER(_LayerC), _C.c_uint32, _C.POINTER(_PlanC)]
_lib.fdec_last_error.restype = _C.c_char_p
_lib.fdec_version.restype = _C.c_char_p
__version__ = _lib.fdec_version().decode()  # the library's (its one definition is in flashdec.h)
_lib.fdec_status_string.restype = _C.c_char_p
_lib.fdec_backend_available.argtypes = [_C.c_int]
_lib.fdec_merge.argtypes = [_C.c_void_p, _C.c_uint32, _C.c_uint32, _C.c_uint32, _C.c_int,
                            _C.POINTER(_C.c_void_p), _C.POINTER(_C.c_void_p), _C.c_void_p, _C.c_void_p]

# the pointers of the last call handed to the library (for tests that assert zero-copy)
_last_pointers = None


def _check(status):
    if status == 0:
        return
    msg = _lib.fdec_last_error().decode()
    if status == 1:
        raise ValueError(msg)
    if status == 2:
        raise TypeError(msg) if "dtype" in msg else FlashdecError(msg)
    raise FlashdecError(f"{_STATUS.get(status, status)}: {msg}")


# ---- arguments: every integer and array checked before C sees it ----

def _int_arg(name, value, lo, hi):
    """value as an int in [lo, hi]; TypeError for a non-integer (a float, a bool), ValueError outside the range."""
    if isinstance(value, bool) or not isinstance(value, _numbers.Integral):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__} ({value!r})")
    value = int(value)
    if not lo <= value <= hi:
        raise ValueError(f"{name} ({value}) must be in {lo}..{hi}")
    return value


_U32 = 2 ** 32 - 1


# ---- arrays: numpy or torch, described the same way ----

def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _dtype_code(x, what):
    if _is_torch(x):
        import torch
        codes = {torch.float32: _F32, torch.float16: _F16, torch.bfloat16: _BF16}
        code = codes.get(x.dtype)
    else:
        name = getattr(getattr(x, "dtype", None), "name", None)
        code = {"float32": _F32, "float16": _F16, "bfloat16": _BF16}.get(name)
    if code is None:
        raise TypeError(f"{what} has dtype {getattr(x, 'dtype', type(x).__name__)}; flashdec takes float32, "
                        f"float16 or bfloat16")
    return code


class _Arr:
    """shape, element strides, data pointer, device of a numpy array or torch tensor."""

    def __init__(self, x, what):
        if _is_torch(x):
            self.shape = tuple(x.shape)
            self.strides = tuple(x.stride())
            self.ptr = x.data_ptr()
            self.cuda = x.is_cuda
            self.device = x.device.index if x.is_cuda else None
        elif hasattr(x, "__array_interface__"):
            import numpy as np
            if not isinstance(x, np.ndarray):
                x = np.asarray(x)
            if not x.dtype.isnative:
                raise TypeError(f"{what} has byte order '{x.dtype.byteorder}', not this machine's: convert it with "
                                f"{what}.astype({what}.dtype.newbyteorder('='))")
            item = x.dtype.itemsize
            if any(s % item for s in x.strides):
                raise ValueError(f"{what} has strides {x.strides} that are not whole elements")
            self.shape = x.shape
            self.strides = tuple(s // item for s in x.strides)
            self.ptr = x.__array_interface__["data"][0]
            self.cuda = False
            self.device = None
        else:
            raise TypeError(f"{what} must be a numpy array or a torch tensor, not {type(x).__name__}")
        self.dtype = _dtype_code(x, what)
        self.obj = x
        self.what = what

    def writable(self):
        """Raises ValueError where the library must not write here (a read-only numpy array, e.g. over bytes or a
        read-only memmap)."""
        flags = getattr(self.obj, "flags", None)
        if flags is not None and not flags.writeable:
            raise ValueError(f"{self.what} is read-only; flashdec writes its result there")
        return self


def _layer_from(q, k, v, window, ring_capacity, scale, out_dtype):
    if len(q.shape) != 2:
        raise ValueError(f"q must be [num_q_heads, head_dim], got shape {q.shape}")
    if len(k.shape) != 3 or len(v.shape) != 3:
        raise ValueError(f"k and v must be [rows, num_kv_heads, head_dim] (any strides), got {k.shape} and {v.shape}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {k.shape} and {v.shape}")
    if k.strides != v.strides:
        raise ValueError(f"k and v must have the same strides, got {k.strides} and {v.strides}")
    if k.dtype != v.dtype:
        raise TypeError("k and v must have the same dtype")
    H, D = q.shape
    rows, G, Dk = k.shape
    if Dk != D:
        raise ValueError(f"head_dim of q ({D}) and of k ({Dk}) differ")
    if q.strides != (D, 1) and H * D > 0:
        raise ValueError(f"q must be contiguous [num_q_heads, head_dim], got strides {q.strides}")
    if D > 1 and k.strides[2] != 1:
        raise ValueError(f"the innermost (head_dim) dimension of k and v must be contiguous, got strides {k.strides}")
    lay = _LayerC()
    lay.head_dim, lay.num_q_heads, lay.num_kv_heads = D, H, G
    lay.scale = 0.0 if scale is None else float(scale)
    lay.window = _int_arg("window", window, 0, _U32)
    lay.ring_capacity = _int_arg("ring_capacity", ring_capacity, 0, _U32)
    lay.q_dtype, lay.kv_dtype, lay.out_dtype = q.dtype, k.dtype, out_dtype
    # strides as the C API takes them: elements between rows and between heads (never negative)
    if k.strides[0] < 0 or k.strides[1] < 0:
        raise ValueError(f"k and v must not have negative strides, got {k.strides}")
    if (rows > 1 and k.strides[0] == 0) or (G > 1 and k.strides[1] == 0):
        raise ValueError(f"k and v rows or heads overlap (a zero stride, as from broadcasting): {k.strides}")
    lay.kv_pos_stride = k.strides[0] if rows > 1 else (G * k.strides[1] if G > 1 else D)
    lay.kv_head_stride = k.strides[1] if G > 1 else D
    return lay


# ---- contexts, one per (backend, device, stream, threads) and thread, reused ----

class _Context:
    """An fdec_context, destroyed with this object: a context is used by one thread at a time, so each thread keeps
    its own (in thread-local storage), and they go when the thread ends."""

    def __init__(self, cuda, device, stream, threads):
        opts = _lib.fdec_default_options()
        opts.threads = threads
        if cuda:
            opts.cuda_device = int(device or 0)
            opts.cuda_stream = stream
        self.handle = _C.c_void_p()
        _check(_lib.fdec_context_create(_CUDA if cuda else _CPU, _C.byref(opts), _C.byref(self.handle)))

    def __del__(self, _destroy=_lib.fdec_context_destroy):
        if getattr(self, "handle", None):
            _destroy(self.handle)
            self.handle = None


_local = _threading.local()


def _context(cuda, device, stream, threads):
    threads = 0 if threads is None else _int_arg("threads", threads, 0, 1024)
    contexts = getattr(_local, "contexts", None)
    if contexts is None:
        contexts = _local.contexts = {}
    key = (cuda, device, stream, threads)
    ctx = contexts.get(key)
    if ctx is None:
        ctx = contexts[key] = _Context(cuda, device, stream, threads)
    return ctx.handle


def _stream_of(a):
    import torch
    return torch.cuda.current_stream(a.obj.device).cuda_stream


def _alloc_like(q, H, D):
    if _is_torch(q.obj):
        import torch
        return torch.empty((H, D), dtype=q.obj.dtype, device=q.obj.device)
    import numpy as np
    return np.empty((H, D), dtype=q.obj.dtype)


def _alloc_lse(q, H):
    if _is_torch(q.obj):
        import torch
        return torch.empty((H,), dtype=torch.float32, device=q.obj.device)
    import numpy as np
    return np.empty((H,), dtype=np.float32)


def _head_array(x, q, H, what):
    """A per-head float32 array (sinks, ALiBi slopes) where the backend reads it: contiguous float32 numpy for the
    CPU, a float32 tensor on q's device for CUDA (converted or copied there if need be). Returns (keep-alive, ptr)."""
    if x is None:
        return None, None
    if q.cuda:
        import torch
        t = torch.as_tensor(x, dtype=torch.float32, device=q.obj.device).contiguous()
        a = t
    else:
        if _is_torch(x):
            if x.is_cuda:
                raise ValueError(f"{what} is a CUDA tensor but q is on the CPU")
            x = x.detach().to(dtype=__import__("torch").float32).numpy()
        import numpy as np
        a = np.ascontiguousarray(x, dtype=np.float32)
    if tuple(a.shape) != (H,):
        raise ValueError(f"{what} must hold one value per query head: shape ({H},), got {tuple(a.shape)}")
    return a, (a.data_ptr() if q.cuda else a.__array_interface__["data"][0])


class Layer:
    """One model layer's attention shape and logit variants, for repeated calls without repeated set-up.

        layer = flashdec.Layer(window=1024, ring_capacity=1024, scale=1.0, threads=2)
        out = layer(q, k, v, seq_len=n)
    """

    def __init__(self, *, window=0, ring_capacity=0, scale=None, threads=None, softcap=None, sinks=None,
                 alibi_slopes=None):
        self.window, self.ring_capacity, self.scale, self.threads = window, ring_capacity, scale, threads
        self.variants = dict(softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes)

    def __call__(self, q, k, v, *, seq_len=None, out=None, return_lse=False):
        return decode(q, k, v, seq_len=seq_len, window=self.window, ring_capacity=self.ring_capacity,
                      scale=self.scale, out=out, return_lse=return_lse, threads=self.threads, **self.variants)

    def plan(self, q, k, v, *, seq_len=None):
        return plan(q, k, v, seq_len=seq_len, window=self.window, ring_capacity=self.ring_capacity,
                    scale=self.scale, threads=self.threads, **self.variants)


def _prepare(q, k, v, seq_len, window, ring_capacity, scale, out, threads, softcap=None, sinks=None,
             alibi_slopes=None):
    qa, ka, va = _Arr(q, "q"), _Arr(k, "k"), _Arr(v, "v")
    oa = _Arr(out, "out") if out is not None else None
    devices = {x.cuda for x in (qa, ka, va) + ((oa,) if oa else ())}
    if len(devices) != 1:
        raise ValueError("q, k, v and out must all be on the CPU or all on a CUDA device")
    cuda = devices.pop()
    if cuda and len({x.device for x in (qa, ka, va) + ((oa,) if oa else ())}) != 1:
        raise ValueError("q, k, v and out must be on the same CUDA device")
    lay = _layer_from(qa, ka, va, window, ring_capacity, scale, oa.dtype if oa else qa.dtype)
    H, D = qa.shape
    if oa is not None and (oa.shape != (H, D) or oa.strides != (D, 1)):
        raise ValueError(f"out must be a contiguous [{H}, {D}] array, got shape {oa.shape} strides {oa.strides}")
    rows = ka.shape[0]
    if seq_len is None:
        if ring_capacity:
            raise ValueError("seq_len is needed with a ring cache (the rows hold positions modulo ring_capacity)")
        seq_len = rows
    seq_len = _int_arg("seq_len", seq_len, 1, _U32)
    needed = lay.ring_capacity if lay.ring_capacity else seq_len
    if rows < needed:
        raise ValueError(f"k and v hold {rows} rows but the call may read {needed} (seq_len {seq_len}, "
                         f"ring_capacity {ring_capacity})")
    H = qa.shape[0]
    if softcap is not None:
        lay.softcap = float(softcap)
    keep = (_head_array(sinks, qa, H, "sinks"), _head_array(alibi_slopes, qa, H, "alibi_slopes"))
    lay.sinks, lay.alibi_slopes = keep[0][1], keep[1][1]
    lay._keep = keep  # the arrays live as long as the layer
    stream = _stream_of(qa) if cuda else None
    ctx = _context(cuda, qa.device, stream, threads)
    return qa, ka, va, oa, lay, seq_len, ctx


def decode(q, k, v, *, seq_len=None, window=0, ring_capacity=0, scale=None, out=None, return_lse=False,
           threads=None, softcap=None, sinks=None, alibi_slopes=None):
    """Decode attention for one query token. Returns out [num_q_heads, head_dim] (and lse [num_q_heads] in
    float32 when return_lse), allocated like q (numpy, or torch on q's device) unless `out` is given.

    q: [num_q_heads, head_dim], contiguous. k, v: [rows, num_kv_heads, head_dim] with any row and head strides
    (a transposed [num_kv_heads, rows, head_dim] view works without a copy); the innermost dimension contiguous.
    seq_len: positions in the cache (default: rows). window: attend to the last `window` positions (0: all).
    ring_capacity: rows of a ring cache (position t in row t % ring_capacity). scale: None means
    1/sqrt(head_dim). threads: CPU worker threads (None: all CPUs).
    Logit variants (flashdec.h, "Logit variants"): softcap: cap the scaled logits at softcap * tanh(s / softcap)
    (Gemma 2: 50). sinks: [num_q_heads] sink logits, in the softmax's denominator only (gpt-oss; -inf: none).
    alibi_slopes: [num_q_heads] ALiBi slopes, s_t -= slope * (seq_len - 1 - t). sinks and alibi_slopes are
    float32 (converted if not), on q's device."""
    global _last_pointers
    qa, ka, va, oa, lay, seq_len, ctx = _prepare(q, k, v, seq_len, window, ring_capacity, scale, out, threads,
                                                 softcap, sinks, alibi_slopes)
    H, D = qa.shape
    result = out if out is not None else _alloc_like(qa, H, D)
    lse = _alloc_lse(qa, H) if return_lse else None
    ra = oa.writable() if oa is not None else _Arr(result, "out")
    la = _Arr(lse, "lse").ptr if lse is not None else None
    _last_pointers = (qa.ptr, ka.ptr, va.ptr, ra.ptr)
    _check(_lib.fdec_decode(ctx, _C.byref(lay), seq_len, qa.ptr, ka.ptr, va.ptr, ra.ptr, la))
    return (result, lse) if return_lse else result


def merge(outs, lses, *, out=None, return_lse=False):
    """Merges partial results over disjoint position ranges (e.g. shards of a cache) into the result over their
    union: outs[i] [num_heads, head_dim] and lses[i] [num_heads] float32 from decode(..., return_lse=True). A shard
    with lse = -inf is empty and ignored. numpy arrays or CPU tensors on the CPU backend; CUDA tensors (all on one
    device) on the CUDA backend, on torch's current stream."""
    if not outs or len(outs) != len(lses):
        raise ValueError("outs and lses must be non-empty lists of the same length")
    oa = [_Arr(o, f"outs[{i}]") for i, o in enumerate(outs)]
    la = [_Arr(x, f"lses[{i}]") for i, x in enumerate(lses)]
    cuda = oa[0].cuda
    if any(a.cuda != cuda or a.device != oa[0].device for a in oa + la):
        raise ValueError("outs and lses must all be on the CPU or all on one CUDA device")
    H, D = oa[0].shape if len(oa[0].shape) == 2 else (0, 0)
    for i, (a, b) in enumerate(zip(oa, la)):
        if a.shape != (H, D) or a.strides != (D, 1) or a.dtype != oa[0].dtype:
            raise ValueError(f"outs[{i}] must be a contiguous [{H}, {D}] array of the same dtype as outs[0]")
        if b.shape != (H,) or b.dtype != _F32 or b.strides != (1,):
            raise ValueError(f"lses[{i}] must be a contiguous float32 array of {H} elements")
    result = out if out is not None else _alloc_like(oa[0], H, D)
    ra = _Arr(result, "out").writable()
    if ra.shape != (H, D) or ra.strides != (D, 1) or ra.dtype != oa[0].dtype or ra.cuda != cuda:
        raise ValueError(f"out must be a contiguous [{H}, {D}] array of the outs' dtype, where the outs are")
    lse = _alloc_lse(oa[0], H) if return_lse else None
    po = (_C.c_void_p * len(oa))(*[a.ptr for a in oa])
    pl = (_C.c_void_p * len(la))(*[b.ptr for b in la])
    ctx = _context(cuda, oa[0].device, _stream_of(oa[0]) if cuda else None, 1)
    _check(_lib.fdec_merge(ctx, len(oa), H, D, oa[0].dtype, po, pl, ra.ptr,
                           _Arr(lse, "lse").ptr if lse is not None else None))
    return (result, lse) if return_lse else result


def plan(q, k, v, *, seq_len=None, window=0, ring_capacity=0, scale=None, threads=None, softcap=None, sinks=None,
         alibi_slopes=None):
    """The split decode() would use, as a dict: kv_start, kv_end, num_chunks, chunk_len, grouped,
    scratch_bytes, path."""
    qa, ka, va, oa, lay, seq_len, ctx = _prepare(q, k, v, seq_len, window, ring_capacity, scale, None, threads,
                                                 softcap, sinks, alibi_slopes)
    p = _PlanC()
    _check(_lib.fdec_plan(ctx, _C.byref(lay), seq_len, _C.byref(p)))
    return dict(kv_start=p.kv_start, kv_end=p.kv_end, num_chunks=p.num_chunks, chunk_len=p.chunk_len,
                grouped=bool(p.grouped), scratch_bytes=p.scratch_bytes, path=p.path.decode() if p.path else "")


def info():
    """What this build and machine offer: version, library path, the CPU path and threads, CUDA."""
    import numpy as np
    q = np.zeros((1, 64), np.float32)
    k = np.zeros((1, 1, 64), np.float16)
    p = plan(q, k, k)
    return dict(version=__version__, library=library_path(), cpu_path=p["path"], cpu_threads=_os.cpu_count(),
                cuda_compiled=bool(_lib.fdec_backend_available(_CUDA)))
