#!/usr/bin/env python3
"""A toy generation loop the way an engine runs a sliding-window layer: each step writes the new token's K/V
into a ring cache (row = position % ring_capacity) and calls flashdec.decode for the new token's query.

The "model" is random projections of a random hidden state; the point is the cache handling. Every step is
checked against a float64 reference over the last `window` positions.

    python3 examples/decode_loop.py [--steps 300] [--window 64]
"""
import argparse
import math

import numpy as np

import flashdec


def reference(q, keys, values, scale):
    """Attention over plain lists of past K/V (the last `window` of them), float64."""
    K, V = np.stack(keys).astype(np.float64), np.stack(values).astype(np.float64)  # [n, G, D]
    H, D = q.shape
    G = K.shape[1]
    out = np.empty((H, D))
    for h in range(H):
        s = scale * K[:, h // (H // G)] @ q[h].astype(np.float64)
        w = np.exp(s - s.max())
        out[h] = w @ V[:, h // (H // G)] / w.sum()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--window", type=int, default=64)
    a = ap.parse_args()
    H, G, D, W = 8, 2, 64, a.window
    rng = np.random.default_rng(0)
    wq, wk, wv = (rng.standard_normal((D, n * D)).astype(np.float32) / math.sqrt(D) for n in (H, G, G))
    k_cache = np.zeros((W, G, D), dtype=np.float16)  # the ring: W rows
    v_cache = np.zeros((W, G, D), dtype=np.float16)
    layer = flashdec.Layer(window=W, ring_capacity=W)
    hidden = rng.standard_normal(D).astype(np.float32)
    history_k, history_v, worst = [], [], 0.0
    for pos in range(a.steps):
        q = (hidden @ wq).reshape(H, D)
        k_new, v_new = (hidden @ wk).reshape(G, D), (hidden @ wv).reshape(G, D)
        k_cache[pos % W], v_cache[pos % W] = k_new, v_new  # append into the ring
        history_k.append(k_cache[pos % W].copy())
        history_v.append(v_cache[pos % W].copy())
        out = layer(q, k_cache, v_cache, seq_len=pos + 1)  # attends to positions [pos + 1 - W, pos]
        ref = reference(q, history_k[-W:], history_v[-W:], 1 / math.sqrt(D))
        worst = max(worst, float(np.abs(out - ref).max()))
        hidden = np.tanh(out.reshape(-1)[:D] + 0.5 * hidden).astype(np.float32)  # the "next layer"
    print(f"{a.steps} steps, window {W} in a ring of {W} rows, {H} query heads over {G} KV heads: "
          f"worst difference from the float64 reference {worst:.2e}")
    assert worst < 1e-4


if __name__ == "__main__":
    main()
