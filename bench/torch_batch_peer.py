#!/usr/bin/env python3
"""flashdec's fdec_decode_batch over a paged cache against PyTorch's scaled_dot_product_attention on the padded batch.
For each preset, batch size B and length L: B lengths uniform in [L/2, 3L/2] (seeded), one query token a sequence,
f16. flashdec reads a pool of pages of 16 ([page][slot][kv_head][dim], dealt in a shuffled order) through its page
table; SDPA gets the same K/V gathered into [B, kv_heads, longest, head_dim] with a mask of each sequence's attended
positions, and a group's query heads as its query rows (q [B, kv_heads, heads a group, head_dim]: GQA without copying
K/V). Both are timed as CUDA-graph replays over enough copies of the caches to miss the L2, medians; the outputs are
compared with each other.
    python3 bench/torch_batch_peer.py [--lib build/libflashdec.so] [--batch 1,8,32,128] [--len 1024,8192,32768]
"""
import argparse
import ctypes as C
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import L2_BYTES, PRESETS, copy_bandwidth, graph_time, load_lib  # noqa: E402

F16 = 1
PAGE = 16


def run_case(lib, Layer, Batch, ctx, stream, name, D, H, G, window, scale, B, L, gen, mem_limit):
    """One case; None where its caches (flashdec's pool and SDPA's padded copy, with their L2 copies) pass mem_limit."""
    dev = "cuda"
    lens = torch.randint(L // 2, L * 3 // 2 + 1, (B,), generator=gen).tolist()
    longest = max(lens)
    pages_of = [(n + PAGE - 1) // PAGE for n in lens]
    num_pages, max_pages = sum(pages_of), max(pages_of)
    read = sum(2 * min(n, window or n) * G * D * 2 for n in lens)  # bytes a step must read
    pool_bytes, pad_bytes = 2 * num_pages * PAGE * G * D * 2, 2 * B * G * longest * D * 2
    ncopy = max(1, min(16, math.ceil(4 * L2_BYTES / min(pool_bytes, pad_bytes))))
    if ncopy * (pool_bytes + pad_bytes) > mem_limit:
        return None
    perm = torch.randperm(num_pages, generator=gen)
    table = torch.full((B, max_pages), -1, dtype=torch.int32)
    at = 0
    for i, n in enumerate(pages_of):
        table[i, :n] = perm[at:at + n].to(torch.int32)
        at += n
    table_d = table.to(dev)
    lens_d = torch.tensor(lens, dtype=torch.int32, device=dev)
    q = torch.randn(B, H, D, device=dev, dtype=torch.float16)
    kp = [torch.randn(num_pages, PAGE, G, D, device=dev, dtype=torch.float16)]
    vp = [torch.randn(num_pages, PAGE, G, D, device=dev, dtype=torch.float16)]
    # the padded batch: sequence i's positions gathered from its pages, [B, G, longest, D]
    idx = table_d.long().clamp(min=0)
    kpad = [kp[0][idx].reshape(B, max_pages * PAGE, G, D)[:, :longest].permute(0, 2, 1, 3).contiguous()]
    vpad = [vp[0][idx].reshape(B, max_pages * PAGE, G, D)[:, :longest].permute(0, 2, 1, 3).contiguous()]
    for _ in range(ncopy - 1):
        kp.append(kp[0].clone()), vp.append(vp[0].clone()), kpad.append(kpad[0].clone()), vpad.append(vpad[0].clone())
    pos = torch.arange(longest, device=dev)
    last = lens_d.long()[:, None] - 1
    attend = (pos[None, :] <= last) & ((pos[None, :] > last - window) if window else True)
    mask = attend[:, None, None, :]  # [B, 1, 1, longest]: every kv head and query row of a sequence
    qs = q.view(B, G, H // G, D)     # a group's query heads as its query rows
    out_f = torch.empty(B, H, D, device=dev, dtype=torch.float16)
    out_s = [None]
    sdpa_scale = scale if scale else 1.0 / math.sqrt(D)

    lay = Layer(D, H, G, scale, window, 0, F16, F16, F16, 0, 0)  # rows [slot][kv_head][dim], pages PAGE rows apart
    bt = Batch(B, lens_d.data_ptr(), None, longest, 1, 0, PAGE, table_d.data_ptr(), max_pages, num_pages, 0)

    def fdec(i):
        st = lib.fdec_decode_batch(ctx, C.byref(lay), C.byref(bt), q.data_ptr(), kp[i % ncopy].data_ptr(),
                                   vp[i % ncopy].data_ptr(), out_f.data_ptr(), None)
        if st:
            raise RuntimeError(lib.fdec_last_error().decode())

    def sdpa(i):
        out_s[0] = F.scaled_dot_product_attention(qs, kpad[i % ncopy], vpad[i % ncopy], attn_mask=mask,
                                                  scale=sdpa_scale)

    if lib.fdec_context_reserve_batch(ctx, C.byref(lay), C.byref(bt)):
        raise RuntimeError(lib.fdec_last_error().decode())
    n_calls = max(ncopy, 8)
    t_f = graph_time(fdec, n_calls, stream)
    t_s = graph_time(sdpa, n_calls, stream)
    fdec(0)
    sdpa(0)
    torch.cuda.synchronize()
    diff = (out_f.float() - out_s[0].reshape(B, H, D).float()).abs().max().item()
    return dict(shape=name, batch=B, len=L, fdec_us=t_f * 1e6, sdpa_us=t_s * 1e6, fdec_gbs=read / t_f / 1e9,
                sdpa_gbs=read / t_s / 1e9, diff=diff)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build", "libflashdec.so"))
    ap.add_argument("--preset", default="llama3-8b,lfm2,gemma4-sliding,gemma4-full")
    ap.add_argument("--batch", default="1,8,32,128")
    ap.add_argument("--len", default="1024,8192,32768")
    ap.add_argument("--mem-gb", type=float, default=0.0,
                    help="skip cases whose caches pass this (default: 60%% of the card's memory)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    names = [p[0] for p in PRESETS]
    want = a.preset.split(",")
    for w in want:
        if w not in names:
            sys.exit(f"unknown preset {w!r}: one of {', '.join(names)}")
    lib, Layer = load_lib(a.lib)
    import flashdec  # loaded by load_lib from a.lib
    Batch = flashdec._BatchC
    lib.fdec_context_reserve_batch.argtypes = [C.c_void_p, C.POINTER(Layer), C.POINTER(Batch)]
    mem_limit = a.mem_gb * 1e9 if a.mem_gb else 0.6 * torch.cuda.get_device_properties(0).total_memory
    opts = lib.fdec_default_options()
    opts.cuda_device = torch.cuda.current_device()
    bw = copy_bandwidth()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, copy bandwidth {bw:.0f} GB/s "
          f"(read + write); pages of {PAGE}, f16, one token a sequence; CUDA-graph replays, medians")
    print(f"{'preset':16s} {'batch':>5s} {'len':>7s} {'fdec us':>9s} {'sdpa us':>9s} {'fdec/sdpa':>9s} "
          f"{'fdec GB/s':>9s} {'sdpa GB/s':>9s} {'max diff':>9s}")
    gen = torch.Generator().manual_seed(a.seed)
    for name, D, H, G, window, scale in PRESETS:
        if name not in want:
            continue
        for B in [int(x) for x in a.batch.split(",")]:
            for L in [int(x) for x in a.len.split(",")]:
                s = torch.cuda.Stream()  # the context works on s; the graphs are captured on s too
                opts.cuda_stream = s.cuda_stream
                ctx = C.c_void_p()
                if lib.fdec_context_create(1, C.byref(opts), C.byref(ctx)):
                    sys.exit("fdec_context_create: " + lib.fdec_last_error().decode())
                try:
                    with torch.cuda.stream(s):
                        r = run_case(lib, Layer, Batch, ctx, s, name, D, H, G, window, scale, B, L, gen, mem_limit)
                except torch.cuda.OutOfMemoryError:
                    r = "out of memory"
                lib.fdec_context_destroy(ctx)
                torch.cuda.empty_cache()
                if not isinstance(r, dict):
                    print(f"{name:16s} {B:5d} {L:7d}   skipped: {r or 'caches past --mem-gb'}", flush=True)
                    continue
                print(f"{name:16s} {B:5d} {L:7d} {r['fdec_us']:9.1f} {r['sdpa_us']:9.1f} "
                      f"{r['fdec_us'] / r['sdpa_us']:9.2f} {r['fdec_gbs']:9.0f} {r['sdpa_gbs']:9.0f} "
                      f"{r['diff']:9.2g}", flush=True)


if __name__ == "__main__":
    main()
