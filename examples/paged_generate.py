"""A toy serving loop over flashdec's paged K/V cache: sequences arrive and finish at different steps, each step
decodes every live sequence in one fdec_decode_batch call, and some steps verify a speculative draft of several
tokens. The "model" is random projections (no weights to download); every few steps the batch's output is checked
against a plain numpy attention over each sequence's own rows.

    python examples/paged_generate.py [--steps N] [--page-size P]
"""
import argparse
import math

import numpy as np

import flashdec


def attend(q_rows, k, v, seq_len):
    """numpy float64 attention of n causal query tokens at positions seq_len - n .. seq_len - 1."""
    n, H, D = q_rows.shape
    G = k.shape[1]
    out = np.empty((n, H, D))
    for i in range(n):
        p = seq_len - n + i
        for h in range(H):
            s = k[: p + 1, h // (H // G)].astype(np.float64) @ q_rows[i, h] / math.sqrt(D)
            w = np.exp(s - s.max())
            out[i, h] = w @ v[: p + 1, h // (H // G)] / w.sum()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--page-size", type=int, default=16)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    H, G, D = 8, 2, 64
    cache = flashdec.PagedKVCache(num_pages=512, page_size=args.page_size, num_kv_heads=G, head_dim=D)
    live = {}  # sequence id -> (rows of K, rows of V, tokens left)
    checked = 0
    for step in range(args.steps):
        if step % 3 == 0 and len(live) < 8:  # a new request: its prompt's K/V go in at once
            s = cache.add_sequence()
            n = int(rng.integers(5, 200))
            k, v = rng.standard_normal((n, G, D)).astype(np.float16), rng.standard_normal((n, G, D)).astype(np.float16)
            cache.append(s, k, v)
            live[s] = [k, v, int(rng.integers(5, 40))]
        if not live:
            continue
        sids = sorted(live)
        # each sequence's new tokens this step: one, or a draft of 2-4 to verify every fifth step
        q_lens = [int(rng.integers(2, 5)) if step % 5 == 4 else 1 for _ in sids]
        for s, n in zip(sids, q_lens):
            k, v = rng.standard_normal((n, G, D)).astype(np.float16), rng.standard_normal((n, G, D)).astype(np.float16)
            cache.append(s, k, v)
            live[s][0], live[s][1] = np.concatenate([live[s][0], k]), np.concatenate([live[s][1], v])
        q = rng.standard_normal((sum(q_lens), H, D)).astype(np.float32)
        out = cache.decode(q, sids, q_lens=q_lens)
        if step % 7 == 0:  # the batch against each sequence's own attention
            r = 0
            for s, n in zip(sids, q_lens):
                ref = attend(q[r:r + n], live[s][0], live[s][1], cache.length(s))
                assert np.abs(out[r:r + n] - ref).max() < 1e-3, f"sequence {s} differs at step {step}"
                r += n
            checked += 1
        for s in sids:  # finished requests give their pages back
            live[s][2] -= 1
            if live[s][2] == 0:
                cache.free_sequence(s)
                del live[s]
    print(f"paged_generate: {args.steps} steps, {cache._next} sequences served, {checked} steps checked against "
          f"numpy, {len(cache._free)} pages free at the end")


if __name__ == "__main__":
    main()
