"""What a call through PyTorch costs above the C call: fdec_decode through ctypes with a prepared layer (the C call
and ctypes' own cost), torch.ops.flashdec.decode, decode_into, flashdec.decode on tensors, and the operator on a cache
whose tensor is new every call (new strides, as a DynamicCache's), for one Llama-3-8B layer (32 query heads, 8 KV
heads, head_dim 128, f16) over a short cache, on the CPU, alternated; medians.

    python bench/torch_overhead.py [--positions 16] [--threads 1] [--rounds 3]

`flashdec bench --preset llama3-8b --ctx 16 --threads 1 --reps 300 --no-check` times the same call from C.
"""
import argparse
import ctypes
import itertools
import statistics
import time

import torch

import flashdec
import flashdec.ops  # noqa: F401  (registers torch.ops.flashdec)


def median_us(fn, n=3000, runs=7):
    for _ in range(300):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--positions", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    H, G, D, L, T = 32, 8, 128, args.positions, args.threads
    q = torch.randn(H, D).half()
    k, v = torch.randn(L, G, D).half(), torch.randn(L, G, D).half()
    out, lse = torch.empty_like(q), torch.empty(H)
    lay, ctx = flashdec._decode_into(q, k, v, out, lse, seq_len=L, threads=T)
    c_fn, lay_ref = flashdec._lib.fdec_decode, ctypes.byref(lay)
    op, into = torch.ops.flashdec.decode.default, torch.ops.flashdec.decode_into.default
    # a cache that is a new tensor every call, as transformers' DynamicCache makes it: [kv_heads][rows][dim] views of
    # other row counts (so other strides), more of them than any set-up cache holds, taken in turn
    pool = torch.randn(G * (L + 512) * D).half()
    views = [pool[:G * (L + j) * D].view(G, L + j, D).transpose(0, 1) for j in range(512)]
    turn = itertools.cycle(views)

    def new_strides():
        kv = next(turn)
        return op(q, kv, kv, L, threads=T)

    calls = {
        "fdec_decode via ctypes": lambda: c_fn(ctx, lay_ref, L, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                               out.data_ptr(), lse.data_ptr()),
        "torch.ops.flashdec.decode": lambda: op(q, k, v, L, threads=T),
        "torch.ops.flashdec.decode_into": lambda: into(q, k, v, L, threads=T, out=out, lse=lse),
        "flashdec.decode (tensors)": lambda: flashdec.decode(q, k, v, seq_len=L, threads=T),
        "decode, new K/V strides each call": new_strides,
    }
    results = {name: [] for name in calls}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for name, fn in calls.items():
                results[name].append(median_us(fn))
    base = statistics.median(results["fdec_decode via ctypes"])
    print(f"Llama-3-8B layer, {L} positions, f16, {T} thread(s): medians of {args.rounds} alternated rounds; the "
          f"operators' kernels: {'C++ (_torch_ops.cpp)' if flashdec.ops.EXTENSION else 'Python (flashdec/ops.py)'}")
    for name, r in results.items():
        m = statistics.median(r)
        print(f"  {name:36s} {m:7.2f} us   (+{m - base:.2f} over the ctypes call)")


if __name__ == "__main__":
    main()
