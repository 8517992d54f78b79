"""The wrapper against hostile arguments: every integer and array is checked before the library sees it (range,
type, writeability, byte order), with an exception that names it and nothing written; contexts go with their
threads; and hypothesis-drawn calls against the numpy reference."""
import gc
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flashdec
from test_flashdec import TOL, reference


def small(seed=0, H=4, G=2, D=16, n=40, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (H, D)).astype(dtype), rng.uniform(-1, 1, (n, G, D)).astype(dtype),
            rng.uniform(-1, 1, (n, G, D)).astype(dtype))


@pytest.mark.parametrize("kw, exc, name", [
    (dict(ring_capacity=-1, window=1, seq_len=10 ** 6), ValueError, "ring_capacity"),
    (dict(window=2 ** 32 + 5), ValueError, "window"),
    (dict(window=-1), ValueError, "window"),
    (dict(seq_len=10.7), TypeError, "seq_len"),
    (dict(seq_len=0), ValueError, "seq_len"),
    (dict(seq_len=2 ** 32), ValueError, "seq_len"),
    (dict(threads=-1), ValueError, "threads"),
    (dict(threads=1.5), TypeError, "threads"),
    (dict(window=True), TypeError, "window"),
])
def test_integers_checked(kw, exc, name):
    q, k, v = small()
    with pytest.raises(exc, match=name):
        flashdec.decode(q, k, v, **kw)


def test_read_only_out_untouched():
    q, k, v = small()
    buf = bytes(4 * 4 * 16)
    out = np.frombuffer(buf, dtype=np.float32).reshape(4, 16)
    with pytest.raises(ValueError, match="out is read-only"):
        flashdec.decode(q, k, v, out=out)
    assert buf == bytes(len(buf))
    outs, lses = [flashdec.decode(q, k, v, return_lse=True)[0]], [flashdec.decode(q, k, v, return_lse=True)[1]]
    with pytest.raises(ValueError, match="read-only"):
        flashdec.merge(outs, lses, out=out)
    assert buf == bytes(len(buf))


def test_read_only_memmap_out(tmp_path):
    q, k, v = small()
    path = tmp_path / "out.bin"
    path.write_bytes(bytes(4 * 4 * 16))
    out = np.memmap(path, dtype=np.float32, mode="r", shape=(4, 16))
    with pytest.raises(ValueError, match="read-only"):
        flashdec.decode(q, k, v, out=out)


@pytest.mark.parametrize("which", ["q", "k", "out"])
def test_byte_order_refused(which):
    q, k, v = small()
    out = np.empty((4, 16), np.float32)
    args = dict(q=q, k=k, v=v, out=out)
    args[which] = args[which].astype(args[which].dtype.newbyteorder(">"))
    if which == "k":
        args["v"] = args["v"].astype(args["v"].dtype.newbyteorder(">"))
    with pytest.raises(TypeError, match=f"{which} has byte order"):
        flashdec.decode(args["q"], args["k"], args["v"], out=args["out"])


def test_contexts_go_with_their_threads():
    """Threads that each make a context (and its worker threads, which are not Python threads): once they end, their
    contexts and workers are gone. Eight at a time, so that they are different threads."""
    import os
    q, k, v = small(n=200)
    flashdec.decode(q, k, v, threads=2)  # this thread's own context, which stays
    tasks = len(os.listdir("/proc/self/task"))
    for _ in range(8):
        batch = [threading.Thread(target=flashdec.decode, args=(q, k, v), kwargs=dict(threads=2)) for _ in range(8)]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
    gc.collect()
    assert len(os.listdir("/proc/self/task")) == tasks


dtypes = st.sampled_from([np.float32, np.float16])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(D=st.integers(1, 80), G=st.integers(1, 3), R=st.integers(1, 4), n=st.integers(1, 300),
       window=st.integers(0, 320), dt=dtypes, seed=st.integers(0, 2 ** 32 - 1))
def test_against_numpy(D, G, R, n, window, dt, seed):
    H = G * R
    q, k, v = small(seed, H, G, D, n, dt)
    out, lse = flashdec.decode(q, k, v, window=window, return_lse=True)
    ref, ref_lse = reference(q, k, v, n, window)
    assert np.abs(out.astype(np.float64) - ref).max() <= TOL[np.dtype(dt)]
    assert np.abs(lse - ref_lse).max() <= 1e-4


@settings(max_examples=80, deadline=None)
@given(window=st.one_of(st.integers(-2 ** 40, 2 ** 40), st.floats(allow_nan=True), st.none(), st.text(max_size=3)),
       ring=st.one_of(st.integers(-2 ** 40, 2 ** 40), st.floats()),
       seq_len=st.one_of(st.integers(-2 ** 40, 2 ** 40), st.floats(), st.none()),
       threads=st.one_of(st.integers(-2 ** 33, 2 ** 33), st.none()))
def test_hostile_arguments(window, ring, seq_len, threads):
    """Whatever the arguments, the call returns a right result or raises ValueError / TypeError; out keeps its
    poison when it raises."""
    q, k, v = small(n=64)
    out = np.full((4, 16), np.nan, np.float32)
    try:
        flashdec.decode(q, k, v, window=window, ring_capacity=ring, seq_len=seq_len, threads=threads, out=out)
    except (ValueError, TypeError):
        assert np.isnan(out).all()
        return
    ref, _ = reference(q, k, v, seq_len if seq_len is not None else 64, window, ring)
    assert np.abs(out - ref).max() <= TOL[np.dtype(np.float32)]


def test_version_is_the_library_and_the_package():
    import importlib.metadata
    assert flashdec.__version__ == importlib.metadata.version("flashdec")


def test_library_without_the_cuda_module(tmp_path):
    """libflashdec alone (no CUDA module beside it, as on a machine without CUDA): the package imports and decodes on
    the CPU, and a CUDA context is refused with a message that names the missing module."""
    import shutil
    import subprocess
    import sys
    lib = tmp_path / "libflashdec.so"
    shutil.copy(flashdec.library_path(), lib)
    code = (
        "import ctypes, numpy as np, flashdec\n"
        "q = np.ones((2, 8), np.float32); k = np.ones((5, 1, 8), np.float32)\n"
        "assert np.allclose(flashdec.decode(q, k, k), 1)\n"
        "ctx = ctypes.c_void_p()\n"
        "st = flashdec._lib.fdec_context_create(1, None, ctypes.byref(ctx))\n"
        "print(st, flashdec._lib.fdec_last_error().decode())\n")
    env = dict(__import__("os").environ, FLASHDEC_LIBRARY=str(lib))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("2 ") and "libflashdec_cuda.so" in out.stdout, out.stdout
