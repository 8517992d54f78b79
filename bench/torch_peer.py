#!/usr/bin/env python3
"""flashdec's CUDA backend against PyTorch's scaled_dot_product_attention(enable_gqa=True), same tensors.

For each preset and context: q [1, H, 1, D], k and v [1, G, L, D] in f16 (PyTorch's own layout; flashdec reads
it through its strides as a [kv_head][pos][dim] cache, no copy). Both are timed as CUDA-graph replays of
calls over enough copies of the cache to miss the 60 MB L2, medians of several replays; both outputs are
compared with each other. flashdec on the dense [pos][kv_head][dim] layout is timed too.

    python3 bench/torch_peer.py [--lib build/libflashdec.so] [--json FILE]
"""
import argparse
import ctypes as C
import gc
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F


F16 = 1
PRESETS = [  # name, D, H, G, window, scale
    ("llama3-8b", 128, 32, 8, 0, 0.0),
    ("lfm2", 64, 32, 8, 0, 0.0),
    ("gemma4-sliding-full", 256, 16, 8, 0, 1.0),
    ("gemma4-full", 512, 16, 2, 0, 1.0),
    ("gemma4-sliding", 256, 16, 8, 1024, 1.0),
]
L2_BYTES = 60 << 20


def load_lib(path):
    """The C library at `path`, through the flashdec package's ctypes declarations (python/flashdec: one copy of
    the struct layouts and signatures), without its Python wrapper: the calls below go straight to the C API so
    that they can be captured into CUDA graphs. Returns (lib, Layer)."""
    os.environ["FLASHDEC_LIBRARY"] = os.path.abspath(path)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import flashdec
    return flashdec._lib, flashdec._LayerC


def graph_time(fn, n_calls, stream, reps=20, warmup_s=0.0):
    """Median seconds per call of a CUDA graph, captured on `stream`, holding fn(0) .. fn(n_calls - 1), timed after
    warmup_s seconds of replays (--warmup-s; at least two replays). The H200 runs into its 700 W power cap in
    these runs and then lowers its SM clock for a while: a timing right after SDPA's seconds of head_dim 512 calls
    ran ~12% slower, and longer warm-ups slow other cases instead."""
    with torch.cuda.stream(stream):
        for i in range(min(n_calls, 3)):
            fn(i)  # warm up outside the graph
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for i in range(n_calls):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    t0, n = time.perf_counter(), 0
    while n < 2 or time.perf_counter() - t0 < warmup_s:
        g.replay()
        torch.cuda.synchronize()
        n += 1
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(stream)
        g.replay()
        b.record(stream)
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / n_calls)
    return statistics.median(times)


def copy_bandwidth():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    b = torch.empty_like(a)
    b.copy_(a)
    times = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e-3)
    return 2 * n / statistics.median(times) / 1e9


def run_case(lib, Layer, ctx_p, stream, name, D, H, G, window, scale, L, twice=False, warmup_s=0.0, between=0):
    dev = "cuda"
    rows = window if window else L  # a window of w in a ring of w rows: the cache holds exactly w rows
    kv_bytes = 2 * rows * G * D * 2
    ncopy = max(1, min(64, math.ceil(4 * L2_BYTES / kv_bytes)))
    q = torch.randn(1, H, 1, D, device=dev, dtype=torch.float16)
    ks = [torch.randn(1, G, rows, D, device=dev, dtype=torch.float16) for _ in range(ncopy)]
    vs = [torch.randn(1, G, rows, D, device=dev, dtype=torch.float16) for _ in range(ncopy)]
    kd = [k[0].transpose(0, 1).contiguous() for k in ks]  # dense [pos][kv_head][dim]
    vd = [v[0].transpose(0, 1).contiguous() for v in vs]
    out_f = torch.empty(H, D, device=dev, dtype=torch.float16)
    out_d = torch.empty(H, D, device=dev, dtype=torch.float16)
    sdpa_scale = scale if scale else 1.0 / math.sqrt(D)

    def layer(head_major):
        lay = Layer(D, H, G, scale, window, window, F16, F16, F16, 0, 0)
        if head_major:
            lay.kv_pos_stride, lay.kv_head_stride = D, rows * D
        return lay

    lay_hm, lay_dn = layer(True), layer(False)
    ctx = ctx_p
    # positions: seq_len L; with a ring of `window` rows, position t lives in row t % window. Our tensors hold
    # the rows in ring order, and SDPA gets the same rows in position order (a roll), so the two agree.
    shift = (L % rows) if window else 0

    def fdec(i, lay=lay_hm, kk=ks, vv=vs, out=out_f):
        st = lib.fdec_decode(ctx, C.byref(lay), L, q.data_ptr(), kk[i % ncopy].data_ptr(), vv[i % ncopy].data_ptr(),
                             out.data_ptr(), None)
        if st:
            raise RuntimeError(lib.fdec_last_error().decode())

    sd_k = [torch.roll(k, -shift, dims=2) if shift else k for k in ks]
    sd_v = [torch.roll(v, -shift, dims=2) if shift else v for v in vs]
    out_s = [None]

    def sdpa(i):
        out_s[0] = F.scaled_dot_product_attention(q, sd_k[i % ncopy], sd_v[i % ncopy], scale=sdpa_scale,
                                                  enable_gqa=True)

    def fdec_dense(i):
        fdec(i, lay_dn, kd, vd, out_d)

    lib.fdec_context_reserve(ctx, C.byref(lay_hm), L)
    n_calls = max(ncopy, 8)
    calls = [("flashdec_us", fdec), ("flashdec_dense_us", fdec_dense), ("sdpa_us", sdpa)]
    if between:  # --between: an engine's own kernel after every call, the same for all three (and timed alone)
        other = torch.zeros(between, device=dev)

        def foreign(i):
            other.add_(1.0)

        def then_foreign(fn):
            return lambda i: (fn(i), foreign(i))

        calls = [(k, then_foreign(fn)) for k, fn in calls] + [("between_us", foreign)]
    us = {k: graph_time(fn, n_calls, stream, warmup_s=warmup_s) * 1e6 for k, fn in calls}
    if twice:  # the three again in the reverse order: does the first timing of a case differ from a later one?
        us.update({k + "_2": graph_time(fn, n_calls, stream, warmup_s=warmup_s) * 1e6 for k, fn in reversed(calls)})
    t_f, t_d, t_s = (us[k] * 1e-6 for k, _ in calls[:3])
    # correctness on copy 0
    fdec(0)
    fdec_dense(0)
    sdpa(0)
    torch.cuda.synchronize()
    ref = F.scaled_dot_product_attention(q.double(), sd_k[0].double(), sd_v[0].double(), scale=sdpa_scale,
                                         enable_gqa=True)[0, :, 0]
    err_f = (out_f.double() - ref).abs().max().item()
    err_d = (out_d.double() - ref).abs().max().item()
    err_s = (out_s[0][0, :, 0].double() - ref).abs().max().item()
    read = 2 * min(L, window or L) * G * D * 2
    return dict(shape=name, context=L, **us,
                flashdec_tbs=read / t_f / 1e12, flashdec_dense_tbs=read / t_d / 1e12, sdpa_tbs=read / t_s / 1e12,
                speedup=t_s / t_f, err_flashdec=err_f, err_flashdec_dense=err_d, err_sdpa=err_s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build", "libflashdec.so"))
    ap.add_argument("--ctx", default="1024,4096,32768,131072")
    ap.add_argument("--preset", default="all", help="comma-separated preset names, or all")
    ap.add_argument("--json")
    ap.add_argument("--empty-cache", action="store_true",
                    help="hand PyTorch's cached memory back to the driver before each case (the Gemma 4 "
                         "full 131k head-major figure depends on what the process allocated before)")
    ap.add_argument("--twice", action="store_true",
                    help="time each case's three calls again in the reverse order (SDPA, dense, head-major) and print "
                         "those times on a second line")
    ap.add_argument("--warmup-s", type=float, default=0.0,
                    help="seconds of graph replays before each timing (default %(default)s: two replays)")
    ap.add_argument("--between", type=int, default=0, metavar="N",
                    help="after every call, a PyTorch add on N f32 elements, as an engine runs its own kernels "
                         "between attention calls; the times then include it, and its own time is printed")
    a = ap.parse_args()
    names = [p[0] for p in PRESETS]
    want = names if a.preset == "all" else a.preset.split(",")
    for w in want:
        if w not in names:
            sys.exit(f"unknown preset {w!r}: one of {', '.join(names)}")
    lib, Layer = load_lib(a.lib)
    opts = lib.fdec_default_options()
    opts.cuda_device = torch.cuda.current_device()
    ctx = C.c_void_p()
    results = []
    bw = copy_bandwidth()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, copy bandwidth {bw:.0f} GB/s "
          f"(read + write)")
    print(f"{'shape':20s} {'ctx':>7s} {'fdec us':>9s} {'TB/s':>6s} {'dense us':>9s} {'TB/s':>6s} {'sdpa us':>9s} "
          f"{'TB/s':>6s} {'speedup':>7s} {'err fdec':>9s} {'err sdpa':>9s}")
    for name, D, H, G, window, scale in PRESETS:
        if name not in want:
            continue
        for L in [int(x) for x in a.ctx.split(",")]:
            if window and L != 32768:
                continue
            if a.empty_cache:
                gc.collect()
                torch.cuda.empty_cache()
            s = torch.cuda.Stream()  # the context works on s; the graphs are captured on s too
            opts.cuda_stream = s.cuda_stream
            st = lib.fdec_context_create(1, C.byref(opts), C.byref(ctx))
            if st:
                sys.exit("fdec_context_create: " + lib.fdec_last_error().decode())
            with torch.cuda.stream(s):
                r = run_case(lib, Layer, ctx, s, name, D, H, G, window, scale, L, a.twice, a.warmup_s, a.between)
            lib.fdec_context_destroy(ctx)
            r["copy_bw_gbs"] = bw
            results.append(r)
            print(f"{name:20s} {L:7d} {r['flashdec_us']:9.2f} {r['flashdec_tbs']:6.2f} {r['flashdec_dense_us']:9.2f} "
                  f"{r['flashdec_dense_tbs']:6.2f} {r['sdpa_us']:9.2f} {r['sdpa_tbs']:6.2f} {r['speedup']:7.2f} "
                  f"{r['err_flashdec']:9.2g} {r['err_sdpa']:9.2g}", flush=True)
            if a.between:
                print(f"{'  (the add between alone)':28s} {r['between_us']:9.2f}", flush=True)
            if a.twice:
                print(f"{'  (again, reversed)':28s} {r['flashdec_us_2']:9.2f} {'':6s} {r['flashdec_dense_us_2']:9.2f} "
                      f"{'':6s} {r['sdpa_us_2']:9.2f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, copy_bw_gbs=bw,
                           cases=results), f, indent=1)


if __name__ == "__main__":
    main()
