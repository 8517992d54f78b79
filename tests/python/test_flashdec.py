"""The Python package against a numpy float64 reference: random shapes and every option, bad input, zero-copy,
and torch (CPU here; CUDA where a GPU is present, compared with scaled_dot_product_attention)."""
import math

import ml_dtypes
import numpy as np
import pytest

import flashdec

BF16 = ml_dtypes.bfloat16
TOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float16): 2e-3, np.dtype(BF16): 1.6e-2}


def reference(q, k, v, seq_len, window=0, ring=0, scale=None, softcap=None, sinks=None, alibi_slopes=None):
    """float64 out [H, D] and lse [H] straight from the definition (flashdec.h, the logit variants too)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    H, D = q.shape
    G = k.shape[1]
    lo = max(0, seq_len - window) if window else 0
    rows = [(t % ring) if ring else t for t in range(lo, seq_len)]
    sc = 1 / math.sqrt(D) if scale is None else scale
    out, lse = np.empty((H, D)), np.empty(H)
    for h in range(H):
        g = h // (H // G)
        s = sc * (k[rows, g, :] @ q[h])
        if softcap:
            s = softcap * np.tanh(s / softcap)
        if alibi_slopes is not None:
            s = s - float(alibi_slopes[h]) * (seq_len - 1 - np.arange(lo, seq_len))
        sink = -math.inf if sinks is None else float(sinks[h])
        m = max(s.max(), sink)
        w = np.exp(s - m)
        total = w.sum() + math.exp(sink - m)
        out[h] = w @ v[rows, g, :] / total
        lse[h] = m + math.log(total)
    return out, lse


def rand(rng, shape, dtype, amp=1.0):
    return (amp * rng.uniform(-1, 1, size=shape)).astype(dtype)


def check(out, ref, dtype):
    assert out.shape == ref.shape
    err = np.abs(out.astype(np.float64) - ref).max()
    assert err <= TOL[np.dtype(dtype)], f"max error {err}"


@pytest.mark.parametrize("seed", range(40))
def test_random_shapes(seed):
    rng = np.random.default_rng(seed)
    D = int(rng.choice([1, 3, 16, 33, 64, 100, 128, 256, 512]))
    G = int(rng.integers(1, 5))
    R = int(rng.integers(1, 9))
    H = G * R
    qt, kt = rng.choice([np.float32, np.float16, BF16], size=2)
    n = int(rng.integers(1, 700))
    window = int(rng.choice([0, 0, max(1, n // 3), n, n + 5]))
    ring = 0
    rows, seq_len = n, n
    if window and rng.random() < 0.5:
        ring = window + int(rng.integers(0, 5))
        rows, seq_len = ring, int(rng.integers(1, 10 * ring))
    scale = [None, 1.0, 0.3][seed % 3]
    q = rand(rng, (H, D), qt)
    k = rand(rng, (rows, G, D), kt)
    v = rand(rng, (rows, G, D), kt)
    out, lse = flashdec.decode(q, k, v, seq_len=seq_len, window=window, ring_capacity=ring, scale=scale,
                               return_lse=True, threads=int(rng.integers(1, 3)))
    ref, ref_lse = reference(q, k, v, seq_len, window, ring, scale)
    assert out.dtype == q.dtype and lse.dtype == np.float32
    check(out, ref, q.dtype)
    assert np.abs(lse - ref_lse).max() <= 1e-4 * (1 + np.abs(ref_lse).max())


def test_head_major_view_is_zero_copy():
    rng = np.random.default_rng(1)
    G, L, D, H = 4, 300, 64, 16
    kh = rand(rng, (G, L, D), np.float16)  # [kv_head][pos][dim], as many engines keep it
    vh = rand(rng, (G, L, D), np.float16)
    k, v = kh.transpose(1, 0, 2), vh.transpose(1, 0, 2)  # views, no copy
    q = rand(rng, (H, D), np.float32)
    out = flashdec.decode(q, k, v)
    check(out, reference(q, k, v, L)[0], np.float32)
    qp, kp, vp, _ = flashdec._last_pointers
    assert kp == kh.__array_interface__["data"][0] and vp == vh.__array_interface__["data"][0]
    assert qp == q.__array_interface__["data"][0]


def test_out_is_written_in_place():
    rng = np.random.default_rng(2)
    q, k, v = rand(rng, (8, 32), np.float32), rand(rng, (50, 2, 32), np.float32), rand(rng, (50, 2, 32), np.float32)
    out = np.full((8, 32), np.nan, dtype=np.float16)
    res = flashdec.decode(q, k, v, out=out)
    assert res is out and not np.isnan(out).any()
    check(out, reference(q, k, v, 50)[0], np.float16)


def test_layer_object_and_plan():
    rng = np.random.default_rng(3)
    layer = flashdec.Layer(window=64, ring_capacity=64, scale=1.0, threads=2)
    q, k, v = rand(rng, (8, 256), np.float32), rand(rng, (64, 4, 256), np.float16), rand(rng, (64, 4, 256), np.float16)
    for n in (1, 63, 64, 65, 1000, 4_000_000_000):
        check(layer(q, k, v, seq_len=n), reference(q, k, v, n, 64, 64, 1.0)[0], np.float32)
    p = layer.plan(q, k, v, seq_len=1000)
    assert p["kv_start"] == 936 and p["kv_end"] == 1000 and p["grouped"] and p["num_chunks"] >= 1
    assert p["chunk_len"] * p["num_chunks"] >= 64


def test_merge_of_shards():
    rng = np.random.default_rng(6)
    H, G, D, L = 8, 2, 64, 500
    q, k, v = rand(rng, (H, D), np.float32), rand(rng, (L, G, D), np.float16), rand(rng, (L, G, D), np.float16)
    cuts = [0, 1, 1, 200, 499, 500]  # a single-position shard, an empty one, the rest
    outs, lses = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        if a == b:
            outs.append(np.full((H, D), np.nan, np.float32))
            lses.append(np.full(H, -np.inf, np.float32))
        else:
            o, l = flashdec.decode(q, k[a:b], v[a:b], return_lse=True)
            outs.append(o)
            lses.append(l)
    out, lse = flashdec.merge(outs, lses, return_lse=True)
    ref, ref_lse = reference(q, k, v, L)
    check(out, ref, np.float32)
    assert np.abs(lse - ref_lse).max() < 1e-4
    with pytest.raises(ValueError, match="same length"):
        flashdec.merge(outs, lses[:-1])


def test_info():
    i = flashdec.info()
    assert i["cpu_path"] in ("scalar", "avx2", "avx512") and i["library"].endswith("libflashdec.so")


@pytest.mark.parametrize("case", [
    "gqa", "head_dim", "dtype", "kv_dtype_mismatch", "innermost", "rows", "ring_without_seq_len",
    "ring_smaller_than_window", "nan_scale", "out_shape", "list_input", "broadcast",
])
def test_bad_input_raises_and_leaves_out_untouched(case):
    rng = np.random.default_rng(4)
    q, k, v = rand(rng, (8, 64), np.float32), rand(rng, (40, 2, 64), np.float16), rand(rng, (40, 2, 64), np.float16)
    out = np.full((8, 64), 7.0, dtype=np.float32)
    kw = {}
    if case == "gqa":
        q = rand(rng, (7, 64), np.float32)
        out = np.full((7, 64), 7.0, dtype=np.float32)
        exc, msg = ValueError, "num_q_heads (7) must be a multiple of num_kv_heads (2)"
    elif case == "head_dim":
        q, k, v = (rand(rng, (8, 600), np.float32), rand(rng, (40, 2, 600), np.float16),
                   rand(rng, (40, 2, 600), np.float16))
        out = np.full((8, 600), 7.0, dtype=np.float32)
        exc, msg = ValueError, "head_dim (600)"
    elif case == "dtype":
        q = q.astype(np.float64)
        exc, msg = TypeError, "float64"
    elif case == "kv_dtype_mismatch":
        v = v.astype(np.float32)
        exc, msg = TypeError, "same dtype"
    elif case == "innermost":
        k, v = k[:, :, ::2], v[:, :, ::2]
        q = q[:, :32].copy()
        out = np.full((8, 32), 7.0, dtype=np.float32)
        exc, msg = ValueError, "innermost"
    elif case == "rows":
        kw = dict(seq_len=41)
        exc, msg = ValueError, "hold 40 rows"
    elif case == "ring_without_seq_len":
        kw = dict(window=40, ring_capacity=40)
        exc, msg = ValueError, "seq_len is needed"
    elif case == "ring_smaller_than_window":
        kw = dict(window=50, ring_capacity=40, seq_len=100)
        exc, msg = ValueError, "ring_capacity (40) must be at least window (50)"
    elif case == "nan_scale":
        kw = dict(scale=float("nan"))
        exc, msg = ValueError, "scale"
    elif case == "out_shape":
        out = np.full((8, 63), 7.0, dtype=np.float32)
        exc, msg = ValueError, "out must be"
    elif case == "list_input":
        q = q.tolist()
        exc, msg = TypeError, "numpy array or a torch tensor"
    else:  # broadcast
        k = np.broadcast_to(k[:1], k.shape)
        v = np.broadcast_to(v[:1], v.shape)
        exc, msg = ValueError, "overlap"
    before = out.copy()
    with pytest.raises(exc, match=msg.replace("(", r"\(").replace(")", r"\)")):
        flashdec.decode(q, k, v, out=out, **kw)
    assert np.array_equal(out, before)


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch", reason="torch is optional; not installed here")
    rng = np.random.default_rng(5)
    q, k, v = rand(rng, (16, 128), np.float32), rand(rng, (100, 4, 128), np.float32), rand(rng, (100, 4, 128), np.float32)
    out = flashdec.decode(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v))
    assert isinstance(out, torch.Tensor)
    check(out.numpy(), reference(q, k, v, 100)[0], np.float32)


def torch_cuda():
    """torch, where it and a CUDA device and flashdec's CUDA backend are all here; else the test skips."""
    torch = pytest.importorskip("torch", reason="torch is optional; not installed here")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    if not flashdec.info()["cuda_compiled"]:
        pytest.skip("this build of flashdec has no CUDA backend")
    return torch


def test_torch_cuda_against_sdpa():
    torch = torch_cuda()
    import torch.nn.functional as F
    H, G, L, D = 32, 8, 3000, 128
    q = torch.randn(H, D, device="cuda", dtype=torch.float16)
    kh = torch.randn(G, L, D, device="cuda", dtype=torch.float16)
    vh = torch.randn(G, L, D, device="cuda", dtype=torch.float16)
    out = flashdec.decode(q, kh.transpose(0, 1), vh.transpose(0, 1))  # a view: zero-copy
    ref = F.scaled_dot_product_attention(q[None, :, None].float(), kh[None].float(), vh[None].float(),
                                         enable_gqa=True)[0, :, 0]
    assert out.is_cuda and (out.float() - ref).abs().max().item() < 2e-3


@pytest.mark.parametrize("seed", range(12))
def test_logit_variants(seed):
    """softcap, sinks and ALiBi, alone and together, with windows and rings, against the reference."""
    rng = np.random.default_rng(100 + seed)
    D, G, R = int(rng.choice([7, 64, 128, 256])), int(rng.integers(1, 4)), int(rng.integers(1, 6))
    H = G * R
    n = int(rng.integers(1, 900))
    window, ring, rows, seq_len = 0, 0, n, n
    if seed % 3 == 1:
        window = max(1, n // 2)
    if seed % 3 == 2:
        window = max(1, n // 2)
        ring = window + 3
        rows, seq_len = ring, n + 5 * ring
    q = rand(rng, (H, D), np.float32, amp=3.0)
    k = rand(rng, (rows, G, D), np.float16)
    v = rand(rng, (rows, G, D), np.float16)
    kinds = seed % 4  # 0: softcap, 1: sinks, 2: ALiBi, 3: all three
    softcap = float(rng.uniform(0.5, 5)) if kinds in (0, 3) else None
    sinks = rng.uniform(-3, 8, size=H).astype(np.float32) if kinds in (1, 3) else None
    if sinks is not None:
        sinks[0] = -np.inf  # no sink for head 0
    slopes = (2.0 ** (-8.0 * np.arange(1, H + 1) / H) * 0.1).astype(np.float32) if kinds in (2, 3) else None
    out, lse = flashdec.decode(q, k, v, seq_len=seq_len, window=window, ring_capacity=ring, return_lse=True,
                               softcap=softcap, sinks=sinks, alibi_slopes=slopes)
    ref, ref_lse = reference(q, k, v, seq_len, window, ring, None, softcap, sinks, slopes)
    check(out, ref, np.float32)
    assert np.abs(lse - ref_lse).max() <= 1e-4 * (1 + np.abs(ref_lse).max())


def test_variants_merge_of_shards():
    """The header's recipe: the sink in one shard only, each shard's lse moved by -slope * (seq_len - end)."""
    rng = np.random.default_rng(7)
    H, G, L, D = 8, 2, 1000, 64
    q = rand(rng, (H, D), np.float32, amp=2.0)
    k, v = rand(rng, (L, G, D), np.float32), rand(rng, (L, G, D), np.float32)
    sinks = rng.uniform(0, 3, size=H).astype(np.float32)
    slopes = (0.01 * np.arange(1, H + 1)).astype(np.float32)
    whole, whole_lse = flashdec.decode(q, k, v, return_lse=True, softcap=4.0, sinks=sinks, alibi_slopes=slopes)
    outs, lses = [], []
    for a, b in ((0, 300), (300, 301), (301, L)):
        o, s = flashdec.decode(q, k[a:b], v[a:b], return_lse=True, softcap=4.0, alibi_slopes=slopes,
                               sinks=sinks if b == L else None)
        outs.append(o)
        lses.append((s - slopes * (L - b)).astype(np.float32))
    out, lse = flashdec.merge(outs, lses, return_lse=True)
    assert np.abs(out - whole).max() < 1e-5 and np.abs(lse - whole_lse).max() < 1e-4


@pytest.mark.parametrize("case", ["softcap", "sinks", "slopes", "sinks_shape"])
def test_variant_bad_input(case):
    q = np.zeros((4, 16), np.float32)
    k = np.zeros((10, 2, 16), np.float16)
    args = dict(softcap=-1.0) if case == "softcap" else \
        dict(sinks=np.array([0, np.nan, 0, 0], np.float32)) if case == "sinks" else \
        dict(alibi_slopes=np.array([0, 0, np.inf, 0], np.float32)) if case == "slopes" else \
        dict(sinks=np.zeros(3, np.float32))
    out = np.full((4, 16), 7.0, np.float32)
    with pytest.raises(ValueError, match="softcap|sinks|alibi_slopes"):
        flashdec.decode(q, k, k, out=out, **args)
    assert (out == 7.0).all()


def test_torch_cuda_variants():
    torch = torch_cuda()
    rng = np.random.default_rng(3)
    H, G, L, D = 16, 4, 3000, 128
    q = rand(rng, (H, D), np.float32, amp=3.0)
    k, v = rand(rng, (L, G, D), np.float16), rand(rng, (L, G, D), np.float16)
    sinks = rng.uniform(-2, 6, size=H).astype(np.float32)
    slopes = (2.0 ** (-8.0 * np.arange(1, H + 1) / H) * 0.05).astype(np.float32)
    out, lse = flashdec.decode(torch.from_numpy(q).cuda(), torch.from_numpy(k).cuda(), torch.from_numpy(v).cuda(),
                               return_lse=True, softcap=5.0, sinks=torch.from_numpy(sinks).cuda(),
                               alibi_slopes=slopes)  # a numpy array is copied to the device
    ref, ref_lse = reference(q, k, v, L, softcap=5.0, sinks=sinks, alibi_slopes=slopes)
    assert np.abs(out.cpu().numpy() - ref).max() < 2e-5
    assert np.abs(lse.cpu().numpy() - ref_lse).max() < 1e-4


def test_torch_cuda_merge_of_shards():
    torch = torch_cuda()
    H, G, L, D = 16, 4, 2000, 128
    q = torch.randn(H, D, device="cuda", dtype=torch.float32)
    k = torch.randn(L, G, D, device="cuda", dtype=torch.float16)
    v = torch.randn(L, G, D, device="cuda", dtype=torch.float16)
    whole, whole_lse = flashdec.decode(q, k, v, return_lse=True)
    parts = [flashdec.decode(q, k[a:b], v[a:b], return_lse=True) for a, b in ((0, 700), (700, 701), (701, 2000))]
    out, lse = flashdec.merge([p[0] for p in parts], [p[1] for p in parts], return_lse=True)
    assert out.is_cuda and (out - whole).abs().max().item() < 1e-5
    assert (lse - whole_lse).abs().max().item() < 1e-4


# ---- batches ----

def reference_tokens(q_rows, k, v, seq_len, window=0, **kw):
    """float64 out [n, H, D] for n query tokens at positions seq_len - n .. seq_len - 1, each causal."""
    n = q_rows.shape[0]
    outs = [reference(q_rows[i], k, v, seq_len - n + 1 + i, window, **kw)[0] for i in range(n)]
    return np.stack(outs)


@pytest.mark.parametrize("seed", range(10))
def test_decode_batch_paged_and_contiguous(seed):
    rng = np.random.default_rng(500 + seed)
    D, G, R = int(rng.choice([16, 64, 128])), int(rng.integers(1, 4)), int(rng.integers(1, 5))
    H, B, P = G * R, int(rng.integers(1, 6)), int(rng.choice([1, 7, 16]))
    window = int(rng.choice([0, 0, 50]))
    lens = rng.integers(1, 300, size=B)
    qls = np.minimum(rng.integers(1, 17, size=B), lens)
    cache = flashdec.PagedKVCache(num_pages=int(sum((lens + P - 1) // P)) + 3, page_size=P, num_kv_heads=G,
                                  head_dim=D, dtype=np.float32)
    dense = []
    sids = []
    for b in range(B):
        k = rng.uniform(-1, 1, (lens[b], G, D)).astype(np.float32)
        v = rng.uniform(-1, 1, (lens[b], G, D)).astype(np.float32)
        s = cache.add_sequence()
        cache.append(s, k[: lens[b] // 2], v[: lens[b] // 2])  # two appends: pages taken as the sequence grows
        cache.append(s, k[lens[b] // 2:], v[lens[b] // 2:])
        sids.append(s)
        dense.append((k, v))
    q = rng.uniform(-1, 1, (int(qls.sum()), H, D)).astype(np.float32)
    out, lse = cache.decode(q, sids, q_lens=qls, window=window, return_lse=True)
    # the same batch from contiguous caches
    rows = int(lens.max())
    kc = np.full((B, rows, G, D), np.nan, np.float32)
    vc = np.full((B, rows, G, D), np.nan, np.float32)
    for b in range(B):
        kc[b, :lens[b]], vc[b, :lens[b]] = dense[b]
    out2 = flashdec.decode_batch(q, kc, vc, lens, q_lens=qls, window=window)
    r0 = 0
    for b in range(B):
        ref = reference_tokens(q[r0:r0 + qls[b]], *dense[b], int(lens[b]), window)
        assert np.abs(out[r0:r0 + qls[b]] - ref).max() < 2e-5
        assert np.abs(out2[r0:r0 + qls[b]] - ref).max() < 2e-5
        r0 += qls[b]
    assert lse.shape == (int(qls.sum()), H)


def test_paged_cache_reuses_freed_pages():
    cache = flashdec.PagedKVCache(num_pages=4, page_size=4, num_kv_heads=1, head_dim=8)
    a = cache.add_sequence()
    cache.append(a, np.ones((16, 1, 8), np.float32), np.ones((16, 1, 8), np.float32))
    b = cache.add_sequence()
    with pytest.raises(MemoryError):
        cache.append(b, np.ones((1, 1, 8), np.float32), np.ones((1, 1, 8), np.float32))
    cache.free_sequence(a)
    cache.append(b, np.full((5, 1, 8), 2, np.float32), np.full((5, 1, 8), 3, np.float32))
    out = cache.decode(np.ones((1, 1, 8), np.float32), [b])
    assert np.allclose(out, 3)


def test_kv_write_slots_and_bad_slot():
    k = np.zeros((10, 2, 4), np.float16)
    v = np.zeros((10, 2, 4), np.float16)
    new = np.arange(16, dtype=np.float32).reshape(2, 2, 4)
    flashdec.kv_write(new, new + 1, k, v, [7, -1])
    assert (k[7] == new[0]).all() and (v[7] == new[0] + 1).all() and not k[:7].any()
    with pytest.raises(ValueError, match="slots"):
        flashdec.kv_write(new, new, k, v, [3, 10])
    assert not k[3].any()


def test_decode_batch_bad_input():
    q = np.zeros((2, 2, 8), np.float32)
    k = np.zeros((4, 16, 1, 8), np.float32)
    table = np.array([[0, 1], [2, 9]], np.int32)  # page 9 is outside the pool of 4
    with pytest.raises(ValueError, match="page_table"):
        flashdec.decode_batch(q, k, k, [20, 20], page_table=table)
    with pytest.raises(ValueError, match="q_lens"):
        flashdec.decode_batch(np.zeros((3, 2, 8), np.float32), k, k, [2, 1], q_lens=[1, 2],
                              page_table=np.array([[0], [1]], np.int32))


# ---- quantised caches ----

def dequantize_blocks(b, kind):
    """ggml's Q8_0 / Q4_0 blocks (uint8 [..., nblocks * bytes]) to float64, from the format's definition."""
    nbytes = 34 if kind == "q8_0" else 18
    blocks = b.reshape(b.shape[:-1] + (-1, nbytes))
    d = blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float64)[..., None]
    if kind == "q8_0":
        vals = blocks[..., 2:].view(np.int8).astype(np.float64)
    else:
        nib = blocks[..., 2:]
        vals = np.concatenate([(nib & 15), (nib >> 4)], axis=-1).astype(np.float64) - 8
    return (d * vals).reshape(b.shape[:-1] + (-1,))


def block_caches(k, v, kind):
    """k and v quantised into ggml's blocks (uint8), and the float64 values those blocks hold."""
    kq, vq = flashdec.quantize(k, kind), flashdec.quantize(v, kind)
    return kq, vq, dequantize_blocks(kq, kind), dequantize_blocks(vq, kind)


@pytest.mark.parametrize("kind", ["q8_0", "q4_0", "e4m3", "e5m2"])
def test_quantised_caches(kind):
    rng = np.random.default_rng(11)
    H, G, L, D = 8, 2, 500, 64
    q = rand(rng, (H, D), np.float32)
    k, v = rand(rng, (L, G, D), np.float32), rand(rng, (L, G, D), np.float32)
    if kind.startswith("q"):
        kq, vq, kd, vd = block_caches(k, v, kind)
        out = flashdec.decode(q, kq, vq, kv_dtype=kind, window=300)
    else:
        t = ml_dtypes.float8_e4m3fn if kind == "e4m3" else ml_dtypes.float8_e5m2
        kq, vq = (k / 0.5).astype(t), (v / 0.25).astype(t)
        out = flashdec.decode(q, kq, vq, k_scale=0.5, v_scales=np.array([0.25, 0.25], np.float32), window=300)
        kd, vd = kq.astype(np.float64) * 0.5, vq.astype(np.float64) * 0.25
    ref, _ = reference(q, kd, vd, L, window=300)
    assert np.abs(out - ref).max() < 2e-5  # the reference on the dequantised cache


@pytest.mark.parametrize("kind", ["q8_0", "q4_0", "e4m3", "e5m2"])
def test_torch_cuda_quantised_caches(kind):
    """The same on CUDA tensors: float8 caches with a per-KV-head scale tensor on the device, uint8 blocks."""
    torch = torch_cuda()
    rng = np.random.default_rng(12)
    H, G, L, D = 16, 4, 3000, 128
    q = rand(rng, (H, D), np.float32)
    k, v = rand(rng, (L, G, D), np.float32), rand(rng, (L, G, D), np.float32)
    if kind.startswith("q"):
        kq, vq, kd, vd = block_caches(k, v, kind)
        out = flashdec.decode(torch.from_numpy(q).cuda(), torch.from_numpy(kq).cuda(), torch.from_numpy(vq).cuda(),
                              kv_dtype=kind)
    else:
        tt = torch.float8_e4m3fn if kind == "e4m3" else torch.float8_e5m2
        ks = np.array([0.5, 1.0, 2.0, 0.25], np.float32)
        kq = (torch.from_numpy(k) / torch.from_numpy(ks)[None, :, None]).to(tt)
        vq = (torch.from_numpy(v) / 0.25).to(tt)
        out = flashdec.decode(torch.from_numpy(q).cuda(), kq.cuda(), vq.cuda(), k_scales=torch.from_numpy(ks).cuda(),
                              v_scale=0.25)
        kd = kq.to(torch.float64).numpy() * ks[None, :, None]
        vd = vq.to(torch.float64).numpy() * 0.25
    ref, _ = reference(q, kd, vd, L)
    assert out.is_cuda and np.abs(out.cpu().numpy() - ref).max() < 2e-5


def test_quantised_bad_input():
    q = np.zeros((2, 48), np.float32)
    with pytest.raises(ValueError, match="multiple of 32"):
        flashdec.quantize(np.zeros((4, 1, 48), np.float32), "q8_0")
    k = np.zeros((4, 1, 48), ml_dtypes.float8_e4m3fn)
    with pytest.raises(ValueError, match="k_scale"):
        flashdec.decode(q, k, k, k_scale=-1.0)
    with pytest.raises(ValueError, match="fp8"):
        flashdec.decode(q, np.zeros((4, 1, 48), np.float16), np.zeros((4, 1, 48), np.float16), v_scale=2.0)
