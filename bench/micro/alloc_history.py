#!/usr/bin/env python3
"""Does the Gemma 4 full layer's head-major 131k call depend on the memory its tensors got, and do plain reads?

bench/NOTES.md (CUDA log row 35 b): torch_peer's head-major Gemma 4 full 131k call takes ~133 us when its tensors
are the process's first and ~152-155 us after other cases, --empty-cache or not; the dense layout ~134-137 either
way. Here, in one process, several sets of the same tensors (q [1, 16, 1, 512], k and v [1, 2, L, 512] f16) are
allocated in turn, fresh, after a 32k set, beside an older set, in an older set's freed memory and after
empty_cache, and each set is timed with flashdec (head-major, CUDA-graph replays, as torch_peer does) and with two
plain reads of the same bytes by PyTorch (k and v summed; k and v copied), so that a slow set shows whether the
kernel or the memory under it is slow.

    python3 bench/micro/alloc_history.py [--lib build/libflashdec.so] [--ctx 131072]
"""
import argparse
import ctypes as C
import gc
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch_peer as tp  # noqa: E402


def make(L, D=512, H=16, G=2):
    return dict(L=L, q=torch.randn(1, H, 1, D, device="cuda", dtype=torch.float16),
                k=torch.randn(1, G, L, D, device="cuda", dtype=torch.float16),
                v=torch.randn(1, G, L, D, device="cuda", dtype=torch.float16),
                out=torch.empty(H, D, device="cuda", dtype=torch.float16))


def time_set(lib, Layer, ctx, s, t, tag, D=512, H=16, G=2):
    L, q, k, v, out = t["L"], t["q"], t["k"], t["v"], t["out"]
    lay = Layer(D, H, G, 1.0, 0, 0, tp.F16, tp.F16, tp.F16, 0, 0)
    lay.kv_pos_stride, lay.kv_head_stride = D, L * D
    lib.fdec_context_reserve(ctx, C.byref(lay), L)

    def fdec(i):
        st = lib.fdec_decode(ctx, C.byref(lay), L, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), None)
        if st:
            raise RuntimeError(lib.fdec_last_error().decode())

    buf = torch.empty_like(k)

    def sums(i):
        torch.sum(k, dtype=torch.float32)
        torch.sum(v, dtype=torch.float32)

    def copies(i):
        buf.copy_(k)
        buf.copy_(v)

    with torch.cuda.stream(s):
        t_f = tp.graph_time(fdec, 8, s)
        t_s = tp.graph_time(sums, 4, s)
        t_c = tp.graph_time(copies, 4, s)
        t_f2 = tp.graph_time(fdec, 8, s)
    nbytes = 2 * k.numel() * 2
    mb = 1 << 20
    print(f"{tag:34s} L={L:6d} k@{k.data_ptr() // mb:7d} MiB v@{v.data_ptr() // mb:7d} MiB  flashdec {t_f * 1e6:7.2f} "
          f"{t_f2 * 1e6:7.2f} us ({nbytes / t_f / 1e12:.2f} TB/s)  sum {nbytes / t_s / 1e12:.2f} TB/s  copy "
          f"{2 * nbytes / t_c / 1e12:.2f} TB/s (read + write)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "..", "build", "libflashdec.so"))
    ap.add_argument("--ctx", type=int, default=131072)
    a = ap.parse_args()
    lib, Layer = tp.load_lib(a.lib)
    opts = lib.fdec_default_options()
    opts.cuda_device = torch.cuda.current_device()
    s = torch.cuda.Stream()
    opts.cuda_stream = s.cuda_stream
    ctx = C.c_void_p()
    if lib.fdec_context_create(1, C.byref(opts), C.byref(ctx)):
        sys.exit("fdec_context_create: " + lib.fdec_last_error().decode())
    L = a.ctx
    A = make(L)
    time_set(lib, Layer, ctx, s, A, "A: the process's first tensors")
    B = make(32768)
    time_set(lib, Layer, ctx, s, B, "B: a 32k set after A")
    del B
    C_ = make(L)
    time_set(lib, Layer, ctx, s, C_, "C: a second set, A still held")
    time_set(lib, Layer, ctx, s, A, "A again")
    del A
    gc.collect()
    D_ = make(L)
    time_set(lib, Layer, ctx, s, D_, "D: after A is freed (its cache)")
    del C_, D_
    gc.collect()
    torch.cuda.empty_cache()
    E = make(L)
    time_set(lib, Layer, ctx, s, E, "E: after empty_cache")
    big = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")  # 8 GiB in between
    F_ = make(L)
    time_set(lib, Layer, ctx, s, F_, "F: after 8 GiB more")
    del big
    time_set(lib, Layer, ctx, s, E, "E again")
    lib.fdec_context_destroy(ctx)


if __name__ == "__main__":
    main()
