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

_F32, _F16, _BF16, _E4M3, _E5M2, _Q8_0, _Q4_0 = 0, 1, 2, 3, 4, 5, 6
# ggml's block types, held as uint8 storage: elements a block and its bytes
_BLOCKS = {"q8_0": (_Q8_0, 32, 34), "q4_0": (_Q4_0, 32, 18)}
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


class _BatchC(_C.Structure):
    _fields_ = [("num_seqs", _C.c_uint32), ("seq_lens", _C.c_void_p), ("q_lens", _C.c_void_p),
                ("max_seq_len", _C.c_uint32), ("max_q_len", _C.c_uint32), ("kv_seq_stride", _C.c_size_t),
                ("page_size", _C.c_uint32), ("page_table", _C.c_void_p), ("max_pages", _C.c_uint32),
                ("num_pages", _C.c_uint32), ("kv_page_stride", _C.c_size_t)]


class _SlotsC(_C.Structure):
    _fields_ = [("num_tokens", _C.c_uint32), ("slots", _C.c_void_p), ("num_slots", _C.c_uint64),
                ("page_size", _C.c_uint32), ("kv_page_stride", _C.c_size_t), ("src_dtype", _C.c_int)]


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
_lib.fdec_decode_batch.argtypes = [_C.c_void_p, _C.POINTER(_LayerC), _C.POINTER(_BatchC), _C.c_void_p, _C.c_void_p,
                                   _C.c_void_p, _C.c_void_p, _C.c_void_p]
_lib.fdec_kv_write.argtypes = [_C.c_void_p, _C.POINTER(_LayerC), _C.POINTER(_SlotsC), _C.c_void_p, _C.c_void_p,
                               _C.c_void_p, _C.c_void_p]
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
    if type(value) is int and lo <= value <= hi:  # the common case, without the abc check below
        return value
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


_TORCH_CODES = None  # torch dtype -> the library's code, made on first use


def _dtype_code(x, what):
    global _TORCH_CODES
    if _is_torch(x):
        if _TORCH_CODES is None:
            import torch
            _TORCH_CODES = {torch.float32: _F32, torch.float16: _F16, torch.bfloat16: _BF16,
                            getattr(torch, "float8_e4m3fn", None): _E4M3, getattr(torch, "float8_e5m2", None): _E5M2}
        code = _TORCH_CODES.get(x.dtype)
    else:
        name = getattr(getattr(x, "dtype", None), "name", None)
        code = {"float32": _F32, "float16": _F16, "bfloat16": _BF16, "float8_e4m3fn": _E4M3,
                "float8_e5m2": _E5M2}.get(name)
    if code is None:
        raise TypeError(f"{what} has dtype {getattr(x, 'dtype', type(x).__name__)}; flashdec takes float32, "
                        f"float16 or bfloat16 (K/V also float8_e4m3fn, float8_e5m2, or uint8 blocks with "
                        f"kv_dtype='q8_0' / 'q4_0')")
    return code


class _Arr:
    """shape, element strides, data pointer, device of a numpy array or torch tensor."""

    def __init__(self, x, what, blocks=None):
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
        self.dtype = _dtype_code(x, what) if blocks is None else blocks[0]
        if blocks is not None:  # uint8 block storage: shape and strides in elements of the block type
            code, per, nbytes = blocks
            if str(getattr(x, "dtype", "")).split(".")[-1] != "uint8":
                raise TypeError(f"{what} must be a uint8 array holding the blocks (kv_dtype given)")
            if self.shape[-1] % nbytes or self.strides[-1] not in (1,) or any(st % nbytes for st in self.strides[:-1]):
                raise ValueError(f"{what}: the last dimension and the strides must be whole blocks of {nbytes} bytes")
            self.shape = self.shape[:-1] + (self.shape[-1] // nbytes * per,)
            self.strides = tuple(st // nbytes * per for st in self.strides[:-1]) + (1,)
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
        if cuda and _capturing():
            raise RuntimeError("flashdec: no context for this stream yet, and none can be made while a CUDA graph is "
                               "being captured; make one call on the capture stream before capturing (e.g. "
                               "torch.cuda.graph(g, stream=s) after a call under torch.cuda.stream(s))")
        ctx = contexts[key] = _Context(cuda, device, stream, threads)
    return ctx.handle


def _capturing():
    import torch
    return torch.cuda.is_current_stream_capturing()


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


def _blocks_of(kv_dtype):
    if kv_dtype is None:
        return None
    if kv_dtype not in _BLOCKS:
        raise ValueError(f"kv_dtype must be 'q8_0' or 'q4_0' (uint8 block storage); fp8 caches are float8 arrays, "
                         f"got {kv_dtype!r}")
    return _BLOCKS[kv_dtype]


def _set_kv_scales(lay, qa, G, k_scale, v_scale, k_scales, v_scales):
    """fp8 caches' scales into the layer; returns the arrays to keep alive."""
    lay.k_scale = 0.0 if k_scale is None else float(k_scale)
    lay.v_scale = 0.0 if v_scale is None else float(v_scale)
    keep = (_head_array(k_scales, qa, G, "k_scales"), _head_array(v_scales, qa, G, "v_scales"))
    lay.k_scales, lay.v_scales = keep[0][1], keep[1][1]
    return keep


def _prepare(q, k, v, seq_len, window, ring_capacity, scale, out, threads, softcap=None, sinks=None,
             alibi_slopes=None, kv_dtype=None, k_scale=None, v_scale=None, k_scales=None, v_scales=None):
    blocks = _blocks_of(kv_dtype)
    qa, ka, va = _Arr(q, "q"), _Arr(k, "k", blocks), _Arr(v, "v", blocks)
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
    keep += _set_kv_scales(lay, qa, lay.num_kv_heads, k_scale, v_scale, k_scales, v_scales)
    lay._keep = keep  # the arrays live as long as the layer
    stream = _stream_of(qa) if cuda else None
    ctx = _context(cuda, qa.device, stream, threads)
    return qa, ka, va, oa, lay, seq_len, ctx


def decode(q, k, v, *, seq_len=None, window=0, ring_capacity=0, scale=None, out=None, return_lse=False,
           threads=None, softcap=None, sinks=None, alibi_slopes=None, kv_dtype=None, k_scale=None, v_scale=None,
           k_scales=None, v_scales=None):
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
    float32 (converted if not), on q's device.
    Quantised caches: float8_e4m3fn / float8_e5m2 k and v (torch or ml_dtypes) with k_scale, v_scale (floats) or
    k_scales, v_scales ([num_kv_heads]); ggml's q8_0 / q4_0 blocks as uint8 arrays [rows, num_kv_heads,
    head_dim / 32 * block bytes] with kv_dtype='q8_0' or 'q4_0' (quantize() makes them).
    On torch tensors this is the operator torch.ops.flashdec.decode (decode_into with `out`), see flashdec.ops."""
    if _is_torch(q) and _is_torch(k) and _is_torch(v) and (out is None or _is_torch(out)):
        return _torch_decode(q, k, v, seq_len, window, ring_capacity, scale, out, return_lse, threads, softcap, sinks,
                             alibi_slopes, kv_dtype, k_scale, v_scale, k_scales, v_scales)
    qa = _Arr(q, "q")
    H, D = qa.shape if len(qa.shape) == 2 else (0, 0)
    result = out if out is not None else _alloc_like(qa, H, D)
    lse = _alloc_lse(qa, H) if return_lse else None
    _decode_into(q, k, v, result, lse, seq_len=seq_len, window=window, ring_capacity=ring_capacity, scale=scale,
                 threads=threads, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes, kv_dtype=kv_dtype,
                 k_scale=k_scale, v_scale=v_scale, k_scales=k_scales, v_scales=v_scales)
    return (result, lse) if return_lse else result


def _torch_decode(q, k, v, seq_len, window, ring_capacity, scale, out, return_lse, threads, softcap, sinks,
                  alibi_slopes, kv_dtype, k_scale, v_scale, k_scales, v_scales):
    """decode() on tensors, through the operators (flashdec.ops): integers checked here, the rest by the op."""
    decode_op, decode_into_op = _torch_ops()[:2]
    if seq_len is None:
        if ring_capacity:
            raise ValueError("seq_len is needed with a ring cache (the rows hold positions modulo ring_capacity)")
        seq_len = k.shape[0]
    seq_len = _int_arg("seq_len", seq_len, 1, _U32)
    if not (sinks is None and alibi_slopes is None and k_scales is None and v_scales is None):
        sinks, alibi_slopes, k_scales, v_scales = (_head_tensor(x, q) for x in (sinks, alibi_slopes, k_scales,
                                                                                 v_scales))
    args = (q, k, v, seq_len, _int_arg("window", window, 0, _U32), _int_arg("ring_capacity", ring_capacity, 0, _U32),
            _float0(scale), _float0(softcap), sinks, alibi_slopes, _float0(k_scale), _float0(v_scale), k_scales,
            v_scales, kv_dtype, 0 if threads is None else _int_arg("threads", threads, 0, 1024))
    return _run_op(decode_op, decode_into_op, args, out, return_lse, q.shape[:1])


def _run_op(op, op_into, args, out, return_lse, lse_shape):
    """The functional operator, or its in-place form where `out` is given (with an lse of lse_shape if asked for)."""
    if out is None:
        result, lse = op(*args)
        return (result, lse) if return_lse else result
    import torch
    lse = torch.empty(lse_shape, dtype=torch.float32, device=out.device) if return_lse else None
    op_into(*args, out=out, lse=lse)
    return (out, lse) if return_lse else out


def _head_tensor(x, q):
    """A per-head array given as a list or numpy array, as a float32 tensor on q's device (the operators take
    tensors); tensors and None as they are (the operator converts or checks them)."""
    if x is None or _is_torch(x):
        return x
    import torch
    return torch.as_tensor(_np().asarray(x, dtype=_np().float32), device=q.device)


def _float0(x):
    """A float argument of the operators, where 0 means none (None here)."""
    return 0.0 if x is None else float(x)


_OPS = None


def _torch_ops():
    """flashdec's operators, registered by flashdec.ops on first use: the overloads of decode, decode_into,
    decode_batch and decode_batch_into (looked up once: torch.ops' attribute lookups cost a call microseconds)."""
    global _OPS
    if _OPS is None:
        from . import ops  # noqa: F401 (registers torch.ops.flashdec)
        import torch
        f = torch.ops.flashdec
        _OPS = (f.decode.default, f.decode_into.default, f.decode_batch.default, f.decode_batch_into.default)
    return _OPS


def _decode_into(q, k, v, out, lse, *, seq_len=None, window=0, ring_capacity=0, scale=None, threads=None,
                 softcap=None, sinks=None, alibi_slopes=None, kv_dtype=None, k_scale=None, v_scale=None,
                 k_scales=None, v_scales=None):
    """The checked call into out (and lse, or None); returns the layer struct and context it used."""
    global _last_pointers
    qa, ka, va, oa, lay, seq_len, ctx = _prepare(q, k, v, seq_len, window, ring_capacity, scale, out, threads,
                                                 softcap, sinks, alibi_slopes, kv_dtype, k_scale, v_scale, k_scales,
                                                 v_scales)
    oa.writable()
    la = None
    if lse is not None:
        la = _Arr(lse, "lse").writable()
        if la.shape != qa.shape[:1] or la.strides != (1,) or la.dtype != _F32 or la.cuda != qa.cuda:
            raise ValueError(f"lse must be a contiguous float32 array of {qa.shape[0]} elements, where q is")
    _last_pointers = (qa.ptr, ka.ptr, va.ptr, oa.ptr)
    _check(_lib.fdec_decode(ctx, _C.byref(lay), seq_len, qa.ptr, ka.ptr, va.ptr, oa.ptr, la.ptr if la else None))
    return lay, ctx


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


# ---- batches: many sequences, paged caches, several query tokens a sequence ----

def _index_array(x, like, dtype, what, n=None):
    """An integer array (seq_lens, q_lens, page_table, slots) where the backend reads it, as `dtype`; kept alive by
    the caller. Returns (array, pointer)."""
    import numpy as np
    if like.cuda:
        import torch
        tdt = {np.uint32: torch.int32, np.int32: torch.int32, np.int64: torch.int64}[dtype]
        t = torch.as_tensor(x, device=like.obj.device).to(tdt).contiguous()
        if n is not None and t.shape[0] != n:
            raise ValueError(f"{what} must have {n} entries, got {t.shape[0]}")
        return t, t.data_ptr()
    if _is_torch(x):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.size and (not np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{what} must hold integers, not {a.dtype}")
    if a.size and (a.min() < (-1 if dtype != np.uint32 else 0) or a.max() > np.iinfo(dtype).max):
        raise ValueError(f"{what} holds values outside {np.dtype(dtype).name}")
    a = np.ascontiguousarray(a, dtype=dtype)
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{what} must have {n} entries, got {a.shape[0]}")
    return a, a.__array_interface__["data"][0]


def decode_batch(q, k, v, seq_lens, *, q_lens=None, page_table=None, window=0, scale=None, out=None,
                 return_lse=False, threads=None, softcap=None, sinks=None, alibi_slopes=None, max_seq_len=None,
                 max_q_len=None):
    """One decode step of a batch of sequences (flashdec.h, "batches"). Returns out [rows, num_q_heads, head_dim]
    (and lse [rows, num_q_heads] float32 when return_lse), rows = sum(q_lens) (one row a sequence without q_lens).

    q: [rows, num_q_heads, head_dim], contiguous: the sequences in order, each one's tokens in order.
    seq_lens: [num_seqs] positions in each cache, the new tokens' included. q_lens: [num_seqs] query tokens, 1..16;
    token i of a sequence sits at position seq_len - q_len + i and attends causally.
    Contiguous caches: k, v [num_seqs, rows, num_kv_heads, head_dim] (any strides but the innermost).
    Paged caches (page_table given, [num_seqs, max_pages] int32 page ids): k, v [num_pages, page_size,
    num_kv_heads, head_dim], e.g. PagedKVCache's pools, or a [num_pages, num_kv_heads, page_size, head_dim] pool
    passed as .transpose(1, 2). window, scale, softcap, sinks, alibi_slopes, threads: as in decode().
    max_seq_len / max_q_len: the plan's bounds (default: the batch's own; on CUDA they must be given).
    On torch tensors this is the operator torch.ops.flashdec.decode_batch (decode_batch_into with `out`)."""
    if _is_torch(q) and _is_torch(k) and _is_torch(v) and (out is None or _is_torch(out)):
        import torch
        batch_op, batch_into_op = _torch_ops()[2:]
        # lists and numpy arrays of lengths and pages as tensors where q is (the op checks their values)
        seq_lens, q_lens, page_table = (x if x is None or _is_torch(x) else torch.as_tensor(_np().asarray(x),
                                        device=q.device) for x in (seq_lens, q_lens, page_table))
        args = (q, k, v, seq_lens, q_lens, page_table, _int_arg("window", window, 0, _U32), _float0(scale),
                _float0(softcap), _head_tensor(sinks, q), _head_tensor(alibi_slopes, q),
                0 if max_seq_len is None else _int_arg("max_seq_len", max_seq_len, 1, _U32),
                0 if max_q_len is None else _int_arg("max_q_len", max_q_len, 1, 16),
                0 if threads is None else _int_arg("threads", threads, 0, 1024))
        return _run_op(batch_op, batch_into_op, args, out, return_lse,
                       out.shape[:2] if out is not None else None)
    import numpy as np
    qa = _Arr(q, "q")
    rows, H, D = qa.shape if len(qa.shape) == 3 else (0, 0, 0)
    result = out if out is not None else np.empty((rows, H, D), dtype=q.dtype)
    lse = np.empty((rows, H), dtype=np.float32) if return_lse else None
    _decode_batch_into(q, k, v, seq_lens, result, lse, q_lens=q_lens, page_table=page_table, window=window,
                       scale=scale, threads=threads, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes,
                       max_seq_len=max_seq_len, max_q_len=max_q_len)
    return (result, lse) if return_lse else result


def _np():
    import numpy
    return numpy


def _decode_batch_into(q, k, v, seq_lens, out, lse, *, q_lens=None, page_table=None, window=0, scale=None,
                       threads=None, softcap=None, sinks=None, alibi_slopes=None, max_seq_len=None, max_q_len=None):
    """The checked batch call into out (and lse, or None); returns the layer and batch structs and the context it
    used (their index arrays are the call's: flashdec.ops sets them anew for each call it makes with them)."""
    import numpy as np
    qa, ka, va = _Arr(q, "q"), _Arr(k, "k"), _Arr(v, "v")
    cuda = qa.cuda
    if {ka.cuda, va.cuda} != {cuda}:
        raise ValueError("q, k and v must all be on the CPU or all on a CUDA device")
    if len(qa.shape) != 3:
        raise ValueError(f"q must be [rows, num_q_heads, head_dim], got shape {qa.shape}")
    if len(ka.shape) != 4 or ka.shape != va.shape or ka.strides != va.strides or ka.dtype != va.dtype:
        raise ValueError(f"k and v must be 4-dimensional, alike in shape, strides and dtype; got {ka.shape} and "
                         f"{va.shape}")
    rows, H, D = qa.shape
    if qa.strides != (H * D, D, 1) and rows * H * D > 0:
        raise ValueError(f"q must be contiguous, got strides {qa.strides}")
    n0, n1, G, Dk = ka.shape
    if Dk != D:
        raise ValueError(f"head_dim of q ({D}) and of k ({Dk}) differ")
    if D > 1 and ka.strides[3] != 1:
        raise ValueError(f"the innermost (head_dim) dimension of k and v must be contiguous, got {ka.strides}")
    if min(ka.strides) < 0:
        raise ValueError(f"k and v must not have negative strides, got {ka.strides}")
    lens, lens_ptr = _index_array(seq_lens, qa, np.uint32, "seq_lens")
    B = int(lens.shape[0])
    ql, ql_ptr = (None, None) if q_lens is None else _index_array(q_lens, qa, np.uint32, "q_lens", B)
    lay = _LayerC()
    lay.head_dim, lay.num_q_heads, lay.num_kv_heads = D, H, G
    lay.scale = 0.0 if scale is None else float(scale)
    lay.window = _int_arg("window", window, 0, _U32)
    lay.q_dtype, lay.kv_dtype = qa.dtype, ka.dtype
    lay.kv_pos_stride, lay.kv_head_stride = ka.strides[1], ka.strides[2]
    if softcap is not None:
        lay.softcap = float(softcap)
    keep = (_head_array(sinks, qa, H, "sinks"), _head_array(alibi_slopes, qa, H, "alibi_slopes"))
    lay.sinks, lay.alibi_slopes = keep[0][1], keep[1][1]
    b = _BatchC()
    b.num_seqs, b.seq_lens, b.q_lens = B, lens_ptr, ql_ptr
    if cuda:
        host_lens = None
        if max_seq_len is None or (q_lens is not None and max_q_len is None):
            raise ValueError("on CUDA, max_seq_len (and max_q_len with q_lens) must be given: the lengths stay on "
                             "the device")
    else:
        host_lens = lens
    b.max_seq_len = _int_arg("max_seq_len", max_seq_len if max_seq_len is not None else
                             (int(host_lens.max()) if B else 1), 1, _U32)
    b.max_q_len = _int_arg("max_q_len", max_q_len if max_q_len is not None else
                           (int(ql.max()) if ql is not None and B else 1), 1, 16)
    if ql is not None and not cuda and int(ql.sum()) != rows:
        raise ValueError(f"q has {rows} rows but q_lens add up to {int(ql.sum())}")
    if ql is None and rows != B:
        raise ValueError(f"q has {rows} rows but there are {B} sequences (one token each without q_lens)")
    table = None
    if page_table is not None:
        table, tptr = _index_array(page_table, qa, np.int32, "page_table")
        if len(table.shape) != 2 or table.shape[0] != B:
            raise ValueError(f"page_table must be [num_seqs ({B}), max_pages], got {tuple(table.shape)}")
        b.page_size, b.page_table, b.max_pages, b.num_pages = n1, tptr, int(table.shape[1]), n0
        b.kv_page_stride = ka.strides[0]
    else:
        if n0 != B:
            raise ValueError(f"contiguous caches: k must be [num_seqs ({B}), rows, num_kv_heads, head_dim], got "
                             f"{ka.shape}")
        if not cuda and n1 < b.max_seq_len:
            raise ValueError(f"k and v hold {n1} rows a sequence but max_seq_len is {b.max_seq_len}")
        b.kv_seq_stride = ka.strides[0] if B > 1 else 0
    oa = _Arr(out, "out").writable()
    lay.out_dtype = oa.dtype
    if oa.shape != (rows, H, D) or oa.strides != (H * D, D, 1) or oa.cuda != cuda:
        raise ValueError(f"out must be a contiguous [{rows}, {H}, {D}] array, where q is; got {oa.shape}")
    la = None
    if lse is not None:
        la = _Arr(lse, "lse").writable()
        if la.shape != (rows, H) or la.strides != (H, 1) or la.dtype != _F32 or la.cuda != cuda:
            raise ValueError(f"lse must be a contiguous float32 [{rows}, {H}] array, where q is")
    stream = _stream_of(qa) if cuda else None
    ctx = _context(cuda, qa.device, stream, threads)
    _check(_lib.fdec_decode_batch(ctx, _C.byref(lay), _C.byref(b), qa.ptr, ka.ptr, va.ptr, oa.ptr,
                                  la.ptr if la else None))
    lay._keep = keep  # the per-head arrays live as long as the layer
    return lay, b, ctx


def kv_write(k_new, v_new, k_cache, v_cache, slots, *, page_size=None, threads=None):
    """Writes new tokens' K/V rows, k_new and v_new [n, num_kv_heads, head_dim], into caches at `slots` ([n]
    integers; -1 skips a token), converting the dtype: vLLM's slot mapping. A paged cache [num_pages, page_size,
    num_kv_heads, head_dim] (slot s: page s // page_size, row s % page_size), or a contiguous one [rows,
    num_kv_heads, head_dim] (slot s: row s)."""
    import numpy as np
    ka, va, kc, vc = _Arr(k_new, "k_new"), _Arr(v_new, "v_new"), _Arr(k_cache, "k_cache"), _Arr(v_cache, "v_cache")
    cuda = kc.cuda
    if len({x.cuda for x in (ka, va, kc, vc)}) != 1:
        raise ValueError("k_new, v_new and the caches must all be on the CPU or all on a CUDA device")
    if len(ka.shape) != 3 or ka.shape != va.shape or ka.dtype != va.dtype:
        raise ValueError(f"k_new and v_new must be [n, num_kv_heads, head_dim] alike, got {ka.shape}, {va.shape}")
    n, G, D = ka.shape
    if ka.strides != (G * D, D, 1) or va.strides != (G * D, D, 1):
        raise ValueError("k_new and v_new must be contiguous")
    if kc.shape != vc.shape or kc.strides != vc.strides or kc.dtype != vc.dtype:
        raise ValueError("k_cache and v_cache must be alike in shape, strides and dtype")
    lay = _LayerC()
    lay.head_dim, lay.num_q_heads, lay.num_kv_heads = D, G, G
    lay.q_dtype = lay.out_dtype = lay.kv_dtype = kc.dtype
    sl = _SlotsC()
    sl.src_dtype = ka.dtype
    if len(kc.shape) == 4:
        P, Gc, Dc = kc.shape[1:]
        sl.page_size, sl.kv_page_stride, sl.num_slots = P, kc.strides[0], kc.shape[0] * P
        lay.kv_pos_stride, lay.kv_head_stride = kc.strides[1], kc.strides[2]
    elif len(kc.shape) == 3:
        Gc, Dc = kc.shape[1:]
        sl.num_slots = kc.shape[0]
        lay.kv_pos_stride, lay.kv_head_stride = kc.strides[0], kc.strides[1]
    else:
        raise ValueError(f"k_cache must be [num_pages, page_size, num_kv_heads, head_dim] or [rows, num_kv_heads, "
                         f"head_dim], got {kc.shape}")
    if (Gc, Dc) != (G, D):
        raise ValueError(f"the caches hold {Gc} heads of {Dc}, the new rows {G} of {D}")
    if page_size is not None and len(kc.shape) == 4 and page_size != kc.shape[1]:
        raise ValueError(f"page_size ({page_size}) differs from the cache's ({kc.shape[1]})")
    kc.writable(), vc.writable()
    arr, ptr = _index_array(slots, kc, np.int64, "slots", n)
    sl.num_tokens, sl.slots = n, ptr
    stream = _stream_of(kc) if cuda else None
    ctx = _context(cuda, kc.device, stream, threads)
    _check(_lib.fdec_kv_write(ctx, _C.byref(lay), _C.byref(sl), ka.ptr, va.ptr, kc.ptr, vc.ptr))
    del arr


class PagedKVCache:
    """A paged K/V cache for one layer: pools of pages ([num_pages, page_size, num_kv_heads, head_dim], numpy or, with
    device=, torch), a free list, and each sequence's pages and length.

        cache = flashdec.PagedKVCache(num_pages=1024, page_size=16, num_kv_heads=8, head_dim=128)
        s = cache.add_sequence()
        cache.append(s, k_rows, v_rows)          # [n, num_kv_heads, head_dim]: pages taken as needed
        out = cache.decode(q, [s, t], q_lens=[1, 4])
        cache.free_sequence(s)                   # its pages back to the pool
    """

    def __init__(self, num_pages, page_size, num_kv_heads, head_dim, dtype=None, device=None):
        import numpy as np
        self.page_size, self.num_kv_heads, self.head_dim = int(page_size), int(num_kv_heads), int(head_dim)
        shape = (int(num_pages), self.page_size, self.num_kv_heads, self.head_dim)
        if device is not None:
            import torch
            dtype = dtype or torch.float16
            self.k = torch.zeros(shape, dtype=dtype, device=device)
            self.v = torch.zeros(shape, dtype=dtype, device=device)
        else:
            dtype = dtype or np.float16
            self.k, self.v = np.zeros(shape, dtype), np.zeros(shape, dtype)
        self._free = list(range(int(num_pages) - 1, -1, -1))
        self._pages, self._lens, self._next = {}, {}, 0

    def add_sequence(self):
        """A new, empty sequence; returns its id."""
        sid, self._next = self._next, self._next + 1
        self._pages[sid], self._lens[sid] = [], 0
        return sid

    def free_sequence(self, sid):
        """Gives the sequence's pages back to the pool."""
        self._free.extend(reversed(self._pages.pop(sid)))
        del self._lens[sid]

    def length(self, sid):
        return self._lens[sid]

    def append(self, sid, k_rows, v_rows):
        """Appends n tokens' K and V rows ([n, num_kv_heads, head_dim]) to sequence sid (fdec_kv_write)."""
        import numpy as np
        n, pages = int(k_rows.shape[0]), self._pages[sid]
        end = self._lens[sid] + n
        while len(pages) * self.page_size < end:
            if not self._free:
                raise MemoryError("PagedKVCache: no free page left")
            pages.append(self._free.pop())
        t = np.arange(self._lens[sid], end)
        slots = np.asarray(pages, np.int64)[t // self.page_size] * self.page_size + t % self.page_size
        kv_write(k_rows, v_rows, self.k, self.v, slots)
        self._lens[sid] = end

    def batch(self, sids):
        """seq_lens and page_table of the sequences sids, in that order (numpy)."""
        import numpy as np
        width = max(1, max(len(self._pages[s]) for s in sids))
        table = np.full((len(sids), width), -1, np.int32)
        for i, s in enumerate(sids):
            table[i, :len(self._pages[s])] = self._pages[s]
        return np.array([self._lens[s] for s in sids], np.uint32), table

    def decode(self, q, sids, **kw):
        """decode_batch over the sequences sids (their new tokens appended already); keywords as decode_batch."""
        lens, table = self.batch(sids)
        if _is_torch(self.k):  # the lengths and the table where the pools are (max_* from the host's copy)
            import torch
            lens, table = torch.from_numpy(lens.astype("int32")).to(self.k.device), torch.from_numpy(table).to(self.k.device)
            kw.setdefault("max_seq_len", int(max(self._lens[s] for s in sids)))
            if kw.get("q_lens") is not None:
                kw.setdefault("max_q_len", int(max(kw["q_lens"])))
        return decode_batch(q, self.k, self.v, lens, page_table=table, **kw)



def quantize(x, kv_dtype, *, threads=None):
    """x [rows, num_kv_heads, head_dim] (float32, float16 or bfloat16, numpy) quantised into ggml's blocks as uint8
    [rows, num_kv_heads, head_dim / 32 * block bytes] (kv_dtype 'q8_0' or 'q4_0'), as ggml's reference quantiser does
    (fdec_kv_write); the result passes to decode() with the same kv_dtype."""
    import numpy as np
    code, per, nbytes = _blocks_of(kv_dtype)
    xa = _Arr(x, "x")
    if len(xa.shape) != 3 or xa.cuda:
        raise ValueError(f"x must be a [rows, num_kv_heads, head_dim] host array, got {xa.shape}")
    rows, G, D = xa.shape
    if D % per:
        raise ValueError(f"head_dim ({D}) must be a multiple of {per} for {kv_dtype}")
    x = np.ascontiguousarray(x)
    outk = np.empty((rows, G, D // per * nbytes), np.uint8)
    outv = np.empty_like(outk)
    ka, kc = _Arr(x, "x"), _Arr(outk, "out", _BLOCKS[kv_dtype])
    lay = _LayerC()
    lay.head_dim, lay.num_q_heads, lay.num_kv_heads = D, G, G
    lay.kv_dtype, lay.kv_pos_stride, lay.kv_head_stride = code, kc.strides[0], kc.strides[1]
    sl = _SlotsC()
    slots = np.arange(rows, dtype=np.int64)
    sl.num_tokens, sl.slots, sl.num_slots, sl.src_dtype = rows, slots.__array_interface__["data"][0], max(rows, 1), ka.dtype
    if rows:
        ctx = _context(False, None, None, threads)
        _check(_lib.fdec_kv_write(ctx, _C.byref(lay), _C.byref(sl), ka.ptr, ka.ptr, kc.ptr,
                                  outv.__array_interface__["data"][0]))
    return outk
