"""flashdec's calls as PyTorch operators: torch.ops.flashdec.decode, decode_batch and their in-place forms.

    out, lse = torch.ops.flashdec.decode(q, k, v, seq_len)
    out, lse = torch.ops.flashdec.decode_batch(q, k, v, seq_lens, q_lens, page_table, max_seq_len=4096, max_q_len=4)
    torch.ops.flashdec.decode_into(q, k, v, seq_len, out=out, lse=lse)   # writes out (and lse, which may be None)

Importing flashdec.ops registers them (the first call of flashdec.decode or decode_batch on tensors imports it, and
those functions call them on tensors). They
have schemas and fake kernels, so torch.compile(fullgraph=True) traces them as single nodes; the CPU and CUDA
kernels call the library on torch's current stream, with no synchronisation and no allocation but the outputs', so
a captured CUDA graph replays them. Arguments mean what they mean in flashdec.decode / decode_batch; a scale,
soft-cap or fp8 scale of 0 means none (the C API's convention), max_seq_len / max_q_len 0 mean the batch's own (on
the CPU only: on CUDA the lengths stay on the device and the bounds must be given).

The kernels: the Python functions below are the one place of the checks and of how tensors become the library's
structs, with a cached set-up for repeated shapes. On first import this module also compiles _torch_ops.cpp with
torch.utils.cpp_extension (once; torch caches the build; it needs ninja and a C++ compiler) and registers its C++
kernels instead: a memo over the same Python set-up, which repeats a call without Python (a few microseconds less a
call). Where that cannot be built it warns and the Python kernels serve; FLASHDEC_TORCH_EXT=0 skips it.
`EXTENSION` says which serve.
"""
import ctypes as _C
import os as _os
import sys as _sys
import threading as _threading
import warnings as _warnings

import torch

import flashdec as _f

_DECODE_ARGS = ("Tensor q, Tensor k, Tensor v, SymInt seq_len, int window=0, int ring_capacity=0, float scale=0.0, "
                "float softcap=0.0, Tensor? sinks=None, Tensor? alibi_slopes=None, float k_scale=0.0, "
                "float v_scale=0.0, Tensor? k_scales=None, Tensor? v_scales=None, str? kv_dtype=None, int threads=0")
_BATCH_ARGS = ("Tensor q, Tensor k, Tensor v, Tensor seq_lens, Tensor? q_lens=None, Tensor? page_table=None, "
               "int window=0, float scale=0.0, float softcap=0.0, Tensor? sinks=None, Tensor? alibi_slopes=None, "
               "SymInt max_seq_len=0, int max_q_len=0, int threads=0")

_lib = torch.library.Library("flashdec", "DEF")
_lib.define(f"decode({_DECODE_ARGS}) -> (Tensor out, Tensor lse)")
_lib.define(f"decode_into({_DECODE_ARGS}, *, Tensor(a!) out, Tensor(b!)? lse=None) -> ()")
_lib.define(f"decode_batch({_BATCH_ARGS}) -> (Tensor out, Tensor lse)")
_lib.define(f"decode_batch_into({_BATCH_ARGS}, *, Tensor(a!) out, Tensor(b!)? lse=None) -> ()")
# the checked call, for the C++ kernels: the addresses of the structs it used, [] where it cannot be repeated from them
_lib.define(f"_decode_setup({_DECODE_ARGS}, *, Tensor(a!) out, Tensor(b!)? lse) -> int[]")
_lib.define(f"_decode_batch_setup({_BATCH_ARGS}, *, Tensor(a!) out, Tensor(b!)? lse) -> int[]")


def _none0(x):
    return None if not x else x


# ---- decode: a layer's set-up cached by everything but the data pointers and seq_len ----

# A call's set-up (layer struct, batch struct, context) by everything but the data pointers and the lengths, per
# thread as the contexts are; only for calls whose per-head arrays are the caller's own memory (read in place).
_local = _threading.local()


def _cache():
    c = getattr(_local, "setups", None)
    if c is None or len(c) > 256:
        c = _local.setups = {}
    return c



def _direct(t, q):
    """True where a per-head array is read in place: None, or a contiguous float32 tensor on q's device."""
    return t is None or (t.dtype == torch.float32 and t.device == q.device and t.is_contiguous())


def _decode_into(q, k, v, seq_len, window, ring_capacity, scale, softcap, sinks, alibi_slopes, k_scale, v_scale,
                 k_scales, v_scales, kv_dtype, threads, out, lse):
    """The call; returns its cached set-up (layer byref, context, layer), or None where it is not cached."""
    ptrs = (sinks, alibi_slopes, k_scales, v_scales)
    key = None
    if ptrs == (None, None, None, None) or all(_direct(t, q) for t in ptrs):
        key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), out.shape, out.stride(), q.dtype,
               k.dtype, v.dtype, out.dtype, q.device, k.device, v.device, out.device,
               torch.cuda.current_stream(q.device).cuda_stream if q.is_cuda else None, window, ring_capacity, scale,
               softcap, k_scale, v_scale, kv_dtype, threads, ptrs[0] is not None and sinks.data_ptr(),
               ptrs[1] is not None and alibi_slopes.data_ptr(), ptrs[2] is not None and k_scales.data_ptr(),
               ptrs[3] is not None and v_scales.data_ptr())
        hit = _cache().get(key)
        # what the key does not hold: seq_len against the rows, and lse
        if (hit is not None and 0 < seq_len <= _U32 and k.shape[0] >= (ring_capacity or seq_len) and
                (lse is None or (lse.shape == q.shape[:1] and lse.dtype == torch.float32 and lse.is_contiguous()
                                 and lse.device == q.device))):
            status = _fdec_decode(hit[1], hit[0], seq_len, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                  None if lse is None else lse.data_ptr())
            if status:
                _f._check(status)
            return hit
    lay, ctx = _f._decode_into(q, k, v, out, lse, seq_len=seq_len, window=window, ring_capacity=ring_capacity,
                               scale=_none0(scale), threads=_none0(threads), softcap=_none0(softcap), sinks=sinks,
                               alibi_slopes=alibi_slopes, kv_dtype=kv_dtype, k_scale=_none0(k_scale),
                               v_scale=_none0(v_scale), k_scales=k_scales, v_scales=v_scales)
    if key is not None:
        hit = _cache()[key] = (_C.byref(lay), ctx, lay)
        return hit
    return None


_U32 = 2 ** 32 - 1
_fdec_decode = _f._lib.fdec_decode


def _decode(q, k, v, seq_len, window=0, ring_capacity=0, scale=0.0, softcap=0.0, sinks=None, alibi_slopes=None,
            k_scale=0.0, v_scale=0.0, k_scales=None, v_scales=None, kv_dtype=None, threads=0):
    if q.dim() != 2:
        raise ValueError(f"q must be [num_q_heads, head_dim], got shape {tuple(q.shape)}")
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(q.shape[:1], dtype=torch.float32, device=q.device)
    _decode_into(q, k, v, seq_len, window, ring_capacity, scale, softcap, sinks, alibi_slopes, k_scale, v_scale,
                 k_scales, v_scales, kv_dtype, threads, out, lse)
    return out, lse


def _decode_into_op(q, k, v, seq_len, window=0, ring_capacity=0, scale=0.0, softcap=0.0, sinks=None,
                    alibi_slopes=None, k_scale=0.0, v_scale=0.0, k_scales=None, v_scales=None, kv_dtype=None,
                    threads=0, *, out, lse=None):
    _decode_into(q, k, v, seq_len, window, ring_capacity, scale, softcap, sinks, alibi_slopes, k_scale, v_scale,
                 k_scales, v_scales, kv_dtype, threads, out, lse)


def _batch_rows(q):
    if q.dim() != 3:
        raise ValueError(f"q must be [rows, num_q_heads, head_dim], got shape {tuple(q.shape)}")
    return q.shape


def _decode_batch(q, k, v, seq_lens, q_lens=None, page_table=None, window=0, scale=0.0, softcap=0.0, sinks=None,
                  alibi_slopes=None, max_seq_len=0, max_q_len=0, threads=0):
    out = torch.empty(_batch_rows(q), dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    _decode_batch_into_op(q, k, v, seq_lens, q_lens, page_table, window, scale, softcap, sinks, alibi_slopes,
                          max_seq_len, max_q_len, threads, out=out, lse=lse)
    return out, lse


def _index(t, dtypes):
    """None, or a contiguous tensor of one of dtypes: what the library can read in place."""
    return t is None or (t.dtype in dtypes and t.is_contiguous())


def _decode_batch_into_op(q, k, v, seq_lens, q_lens=None, page_table=None, window=0, scale=0.0, softcap=0.0,
                          sinks=None, alibi_slopes=None, max_seq_len=0, max_q_len=0, threads=0, *, out, lse=None):
    _decode_batch_into(q, k, v, seq_lens, q_lens, page_table, window, scale, softcap, sinks, alibi_slopes, max_seq_len,
                       max_q_len, threads, out, lse)


def _decode_batch_into(q, k, v, seq_lens, q_lens, page_table, window, scale, softcap, sinks, alibi_slopes, max_seq_len,
                       max_q_len, threads, out, lse):
    """The batch call; returns its cached set-up (layer byref, batch, context, layer), or None where not cached."""
    key = None
    lens_ok = (torch.int32, torch.uint32) if hasattr(torch, "uint32") else (torch.int32,)
    if (max_seq_len and (q_lens is None or max_q_len) and _direct(sinks, q) and _direct(alibi_slopes, q) and
            _index(seq_lens, lens_ok) and _index(q_lens, lens_ok) and _index(page_table, (torch.int32,))):
        key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), out.shape, out.stride(), q.dtype,
               k.dtype, v.dtype, out.dtype, q.device, k.device, v.device, out.device, seq_lens.shape,
               seq_lens.device, None if q_lens is None else (q_lens.shape, q_lens.device),
               None if page_table is None else (page_table.shape, page_table.device),
               torch.cuda.current_stream(q.device).cuda_stream if q.is_cuda else None, window, scale, softcap,
               sinks is not None and sinks.data_ptr(), alibi_slopes is not None and alibi_slopes.data_ptr(),
               max_seq_len, max_q_len, threads)
        hit = _cache().get(key)
        # what the key does not hold: lse, and on the CPU that the token counts add up to q's rows (the library
        # checks every length and page id there; on CUDA the kernels do)
        if (hit is not None and (lse is None or (lse.shape == q.shape[:2] and lse.dtype == torch.float32 and
                                                 lse.is_contiguous() and lse.device == q.device)) and
                (q.is_cuda or q_lens is None or int(q_lens.sum()) == q.shape[0])):
            lay, b, ctx, _ = hit
            b.seq_lens = seq_lens.data_ptr()
            b.q_lens = None if q_lens is None else q_lens.data_ptr()
            b.page_table = None if page_table is None else page_table.data_ptr()
            status = _fdec_decode_batch(ctx, lay, _C.byref(b), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                        out.data_ptr(), None if lse is None else lse.data_ptr())
            if status:
                _f._check(status)
            return hit
    setup = _f._decode_batch_into(q, k, v, seq_lens, out, lse, q_lens=q_lens, page_table=page_table, window=window,
                                  scale=_none0(scale), threads=_none0(threads), softcap=_none0(softcap), sinks=sinks,
                                  alibi_slopes=alibi_slopes, max_seq_len=_none0(max_seq_len),
                                  max_q_len=_none0(max_q_len))
    if key is not None:
        lay, b, ctx = setup
        hit = _cache()[key] = (_C.byref(lay), b, ctx, lay)
        return hit
    return None


_fdec_decode_batch = _f._lib.fdec_decode_batch


def _decode_setup(q, k, v, seq_len, window=0, ring_capacity=0, scale=0.0, softcap=0.0, sinks=None, alibi_slopes=None,
                  k_scale=0.0, v_scale=0.0, k_scales=None, v_scales=None, kv_dtype=None, threads=0, *, out, lse=None):
    hit = _decode_into(q, k, v, seq_len, window, ring_capacity, scale, softcap, sinks, alibi_slopes, k_scale, v_scale,
                       k_scales, v_scales, kv_dtype, threads, out, lse)
    return [] if hit is None else [_C.addressof(hit[2]), hit[1].value]


def _decode_batch_setup(q, k, v, seq_lens, q_lens=None, page_table=None, window=0, scale=0.0, softcap=0.0, sinks=None,
                        alibi_slopes=None, max_seq_len=0, max_q_len=0, threads=0, *, out, lse=None):
    hit = _decode_batch_into(q, k, v, seq_lens, q_lens, page_table, window, scale, softcap, sinks, alibi_slopes,
                             max_seq_len, max_q_len, threads, out, lse)
    return [] if hit is None else [_C.addressof(hit[3]), _C.addressof(hit[1]), hit[2].value]


def _load_extension():
    """Compiles (once: torch caches it) and loads _torch_ops.cpp, whose C++ kernels then serve the operators; False
    where it cannot be built (a warning says why) or FLASHDEC_TORCH_EXT=0."""
    if _os.environ.get("FLASHDEC_TORCH_EXT", "1") == "0":
        return False
    name = "flashdec_torch_ops"
    try:
        import logging
        log = logging.getLogger("torch.utils.cpp_extension")
        level = log.level
        log.setLevel(logging.ERROR)  # its import warns where a CUDA toolkit is installed but no GPU: not our concern
        try:
            from torch.utils import cpp_extension
        finally:
            log.setLevel(level)
        if not cpp_extension.is_ninja_available():
            raise RuntimeError("ninja is not installed (pip install ninja)")
        try:  # a line while the first build runs (the folder is torch's, its helper private)
            built = _os.path.exists(_os.path.join(cpp_extension._get_build_directory(name, False), name + ".so"))
        except Exception:
            built = True
        if not built:
            print("flashdec: compiling the PyTorch kernels (once; torch.utils.cpp_extension caches them)",
                  file=_sys.stderr, flush=True)
        cpp_extension.load(name=name, sources=[_os.path.join(_os.path.dirname(__file__), "_torch_ops.cpp")],
                           extra_cflags=["-O2"], is_python_module=False, with_cuda=False)
        torch.ops.flashdec._bind([_C.cast(_f._lib.fdec_decode, _C.c_void_p).value,
                                  _C.cast(_f._lib.fdec_decode_batch, _C.c_void_p).value, _C.sizeof(_f._LayerC),
                                  _C.sizeof(_f._BatchC), _f._BatchC.seq_lens.offset, _f._BatchC.q_lens.offset,
                                  _f._BatchC.page_table.offset, _f._LayerC.kv_pos_stride.offset,
                                  _f._LayerC.kv_head_stride.offset])
        return True
    except Exception as e:  # noqa: BLE001 (any failure of the build leaves the Python kernels)
        _warnings.warn(f"flashdec: the C++ kernels of torch.ops.flashdec could not be built ({type(e).__name__}: "
                       f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}); the Python kernels serve, "
                       f"about 10 us more a call. FLASHDEC_TORCH_EXT=0 skips the build.", stacklevel=2)
        return False


for _name, _fn in (("_decode_setup", _decode_setup), ("_decode_batch_setup", _decode_batch_setup)):
    _lib.impl(_name, _fn, "CPU")
    _lib.impl(_name, _fn, "CUDA")

#: True where the operators' kernels are _torch_ops.cpp's, False where the Python functions here serve them
EXTENSION = _load_extension()
if not EXTENSION:
    for _name, _fn in (("decode", _decode), ("decode_into", _decode_into_op), ("decode_batch", _decode_batch),
                       ("decode_batch_into", _decode_batch_into_op)):
        _lib.impl(_name, _fn, "CPU")
        _lib.impl(_name, _fn, "CUDA")


# ---- fake kernels: the outputs' shapes and dtypes, for tracing ----

@torch.library.register_fake("flashdec::decode")
def _decode_fake(q, k, v, seq_len, *args):
    return q.new_empty(q.shape), q.new_empty(q.shape[:1], dtype=torch.float32)


@torch.library.register_fake("flashdec::decode_into")
def _decode_into_fake(*args, out, lse=None):
    return None


@torch.library.register_fake("flashdec::decode_batch")
def _decode_batch_fake(q, *args):
    return q.new_empty(q.shape), q.new_empty(q.shape[:2], dtype=torch.float32)


@torch.library.register_fake("flashdec::decode_batch_into")
def _decode_batch_into_fake(*args, out, lse=None):
    return None
