"""torch.ops.flashdec against the float64 reference: the operators on the CPU (and CUDA where present), their
in-place forms, errors, torch.library.opcheck, torch.compile(fullgraph=True), and a captured CUDA graph. Skips
where torch is not installed."""
import numpy as np
import pytest

import flashdec
from test_flashdec import reference, reference_tokens

torch = pytest.importorskip("torch", reason="torch is optional; install it to test flashdec's operators")
import flashdec.ops  # noqa: E402,F401  (registers torch.ops.flashdec)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and flashdec.info()["cuda_compiled"] else [])


def layer(seed, H=8, G=2, D=72, L=300, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    q = torch.rand((H, D), generator=g) * 2 - 1
    k = torch.rand((L, G, D), generator=g) * 2 - 1
    v = torch.rand((L, G, D), generator=g) * 2 - 1
    return (x.to(dtype=dtype, device=device) for x in (q, k, v))


def np64(x):
    return x.detach().float().cpu().numpy().astype(np.float64)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [dict(), dict(window=50), dict(ring_capacity=128, seq_len=1000, window=100),
                                  dict(softcap=3.0), dict(sinks=True), dict(alibi=True)])
def test_decode_op_against_reference(device, case):
    q, k, v = layer(1, device=device)
    H = q.shape[0]
    seq_len = case.get("seq_len", k.shape[0])
    sinks = torch.linspace(-2, 2, H, device=device) if case.get("sinks") else None
    slopes = torch.linspace(0.01, 0.2, H, device=device) if case.get("alibi") else None
    out, lse = torch.ops.flashdec.decode(q, k, v, seq_len, case.get("window", 0), case.get("ring_capacity", 0),
                                         0.0, case.get("softcap", 0.0), sinks, slopes)
    ref, ref_lse = reference(np64(q), np64(k), np64(v), seq_len, case.get("window", 0), case.get("ring_capacity", 0),
                             softcap=case.get("softcap"), sinks=None if sinks is None else np64(sinks),
                             alibi_slopes=None if slopes is None else np64(slopes))
    assert out.shape == q.shape and out.device == q.device and lse.dtype == torch.float32
    assert np.abs(np64(out) - ref).max() < 2e-5
    assert np.abs(np64(lse) - ref_lse).max() < 2e-5
    # the plain function is the same operator: same bits
    again = flashdec.decode(q, k, v, seq_len=seq_len, window=case.get("window", 0),
                            ring_capacity=case.get("ring_capacity", 0), softcap=case.get("softcap"), sinks=sinks,
                            alibi_slopes=slopes)
    assert torch.equal(again, out)


@pytest.mark.parametrize("device", DEVICES)
def test_per_head_arrays_as_lists_or_numpy(device):
    """flashdec.decode and decode_batch on tensors take sinks and slopes as lists or numpy arrays too (copied to q's
    device), as they did before they called the operators."""
    q, k, v = layer(14, device=device)
    H = q.shape[0]
    sinks, slopes = [0.5] * H, np.linspace(0.01, 0.1, H).astype(np.float64)
    out = flashdec.decode(q, k, v, sinks=sinks, alibi_slopes=slopes)
    ref = reference(np64(q), np64(k), np64(v), k.shape[0], sinks=np.array(sinks), alibi_slopes=slopes)[0]
    assert np.abs(np64(out) - ref).max() < 2e-5
    lens = torch.tensor([k.shape[0]], dtype=torch.int32, device=device)
    ob = flashdec.decode_batch(q[None], k[None], v[None], lens, sinks=sinks, alibi_slopes=slopes,
                               max_seq_len=k.shape[0])
    assert np.abs(np64(ob[0]) - ref).max() < 2e-5


@pytest.mark.parametrize("device", DEVICES)
def test_decode_into_writes_in_place(device):
    q, k, v = layer(2, dtype=torch.float16, device=device)
    out = torch.full(q.shape, float("nan"), dtype=torch.float16, device=device)
    lse = torch.full(q.shape[:1], float("nan"), device=device)
    ptr = out.data_ptr()
    torch.ops.flashdec.decode_into(q, k, v, 200, out=out, lse=lse)
    ref, ref_lse = reference(np64(q), np64(k), np64(v), 200)
    assert out.data_ptr() == ptr and np.abs(np64(out) - ref).max() < 2e-3 and np.abs(np64(lse) - ref_lse).max() < 1e-3
    out.fill_(float("nan"))
    torch.ops.flashdec.decode_into(q, k, v, 200, out=out)  # lse left out
    assert np.abs(np64(out) - ref).max() < 2e-3


def test_fast_path_checks_what_changes_between_calls():
    """The second call of a shape takes the cached set-up: a seq_len past the rows, or another lse, must still be
    refused with nothing written, and a changed value of a per-head array still read."""
    q, k, v = layer(3)
    out = torch.zeros_like(q)
    torch.ops.flashdec.decode_into(q, k, v, 300, out=out)
    with pytest.raises(ValueError, match="rows"):
        torch.ops.flashdec.decode_into(q, k, v, 301, out=out.fill_(7))
    assert (out == 7).all()
    with pytest.raises(ValueError, match="lse"):
        torch.ops.flashdec.decode_into(q, k, v, 300, out=out, lse=torch.empty(3))
    assert (out == 7).all()
    sinks = torch.zeros(q.shape[0])
    a = torch.ops.flashdec.decode(q, k, v, 300, sinks=sinks)[0]
    sinks += 5  # the same tensor, new values: read again
    b = torch.ops.flashdec.decode(q, k, v, 300, sinks=sinks)[0]
    ref = reference(np64(q), np64(k), np64(v), 300, sinks=np64(sinks))[0]
    assert not torch.equal(a, b) and np.abs(np64(b) - ref).max() < 2e-5


@pytest.mark.parametrize("call, exc, match", [
    (lambda q, k, v: torch.ops.flashdec.decode(q, k, v, 0), ValueError, "seq_len"),
    (lambda q, k, v: torch.ops.flashdec.decode(q, k[:, :, :70], v[:, :, :70], 10), ValueError, "head_dim"),
    (lambda q, k, v: torch.ops.flashdec.decode(q, k, v.double(), 10), TypeError, "dtype"),
    (lambda q, k, v: torch.ops.flashdec.decode(q, k, v, 10, softcap=-1.0), ValueError, "soft"),
    (lambda q, k, v: torch.ops.flashdec.decode(q, k, v, 10, sinks=torch.zeros(3)), ValueError, "sinks"),
    (lambda q, k, v: torch.ops.flashdec.decode(q.t(), k, v, 10), ValueError, "q"),
])
def test_op_errors(call, exc, match):
    q, k, v = layer(4)
    with pytest.raises(exc, match=match):
        call(q, k, v)


def test_cpp_kernels_serve():
    """The operators' kernels are _torch_ops.cpp's wherever it can be built (ninja and a compiler), unless
    FLASHDEC_TORCH_EXT=0 asks for the Python ones: a build that breaks must not pass for the fallback."""
    import os
    from torch.utils import cpp_extension
    if os.environ.get("FLASHDEC_TORCH_EXT", "1") == "0" or not cpp_extension.is_ninja_available():
        assert not flashdec.ops.EXTENSION
    else:
        assert flashdec.ops.EXTENSION


@pytest.mark.parametrize("device", DEVICES)
def test_repeated_calls_follow_the_cache(device):
    """Repeated calls of one shape take the kernels' cached set-up: a cache that grows (the rows are not in the key),
    a view whose one row says nothing of its row stride, and calls from another thread must all still be exact."""
    H, G, D = 8, 2, 40
    g = torch.Generator().manual_seed(12)
    base = (torch.rand((300, 3, G, D), generator=g) * 2 - 1).to(device)
    k, v = base[:, 1], base[:, 2]  # rows 3 * G * D apart
    q = (torch.rand((H, D), generator=g) * 2 - 1).to(device)
    for n in (1, 2, 77, 300):
        out = torch.ops.flashdec.decode(q, k[:n], v[:n], n)[0]
        ref = reference(np64(q), np64(k[:n]), np64(v[:n]), n)[0]
        assert np.abs(np64(out) - ref).max() < 2e-5, n
    # a cache that is a new tensor every step, one row longer ([kv_heads][rows][dim], as transformers' DynamicCache
    # holds it): new strides each call, the set-up reused with them
    stats = torch.ops.flashdec._memo_stats() if flashdec.ops.EXTENSION else None
    for n in range(40, 48):
        kb = (torch.rand((G, n, D), generator=g) * 2 - 1).to(device)
        vb = (torch.rand((G, n, D), generator=g) * 2 - 1).to(device)
        out = torch.ops.flashdec.decode(q, kb.transpose(0, 1), vb.transpose(0, 1), n)[0]
        ref = reference(np64(q), np64(kb.transpose(0, 1)), np64(vb.transpose(0, 1)), n)[0]
        assert np.abs(np64(out) - ref).max() < 2e-5, n
    if stats is not None:  # the C++ kernels took the copy with the new strides for all but the first
        assert torch.ops.flashdec._memo_stats()[1] - stats[1] >= 7
    with pytest.raises(ValueError, match="strides"):  # k and v apart in strides: still refused
        torch.ops.flashdec.decode(q, kb.transpose(0, 1), vb.transpose(0, 1).contiguous(), 47)
    import threading
    errors = []

    def worker(n):
        try:
            for _ in range(3):
                out = torch.ops.flashdec.decode(q, k, v, n)[0]
                assert np.abs(np64(out) - reference(np64(q), np64(k), np64(v), n)[0]).max() < 2e-5
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in (5, 150, 299)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def random_batch(seed, device="cpu", dtype=torch.float32):
    rng = np.random.default_rng(seed)
    H, G, D, B, P = 8, 2, 64, 4, 16
    lens = rng.integers(1, 200, size=B)
    qls = np.minimum(rng.integers(1, 5, size=B), lens)
    pages = (lens + P - 1) // P
    perm = rng.permutation(int(pages.sum()) + 2)
    table = np.full((B, int(pages.max())), -1, np.int32)
    kp = torch.full((len(perm), P, G, D), float("nan"), dtype=dtype)
    vp = kp.clone()
    dense, at = [], 0
    for b in range(B):
        k = rng.uniform(-1, 1, (lens[b], G, D))
        v = rng.uniform(-1, 1, (lens[b], G, D))
        for i in range(pages[b]):
            pid = int(perm[at])
            at += 1
            table[b, i] = pid
            n = min(P, lens[b] - i * P)
            kp[pid, :n] = torch.from_numpy(k[i * P:i * P + n]).to(dtype)
            vp[pid, :n] = torch.from_numpy(v[i * P:i * P + n]).to(dtype)
        dense.append((np64(torch.from_numpy(k).to(dtype)), np64(torch.from_numpy(v).to(dtype))))
    q = torch.from_numpy(rng.uniform(-1, 1, (int(qls.sum()), H, D))).to(dtype)
    t = (lambda x: torch.as_tensor(x, device=device))
    return (q.to(device), kp.to(device), vp.to(device), t(lens.astype(np.int32)), t(qls.astype(np.int32)), t(table),
            dense, lens, qls)


@pytest.mark.parametrize("device", DEVICES)
def test_decode_batch_op_paged(device):
    q, kp, vp, lens, qls, table, dense, lens_h, qls_h = random_batch(5, device)
    out, lse = torch.ops.flashdec.decode_batch(q, kp, vp, lens, qls, table, 30, max_seq_len=int(lens_h.max()),
                                               max_q_len=int(qls_h.max()))
    r0 = 0
    for b in range(len(lens_h)):
        ref = reference_tokens(np64(q[r0:r0 + qls_h[b]]), *dense[b], int(lens_h[b]), 30)
        assert np.abs(np64(out[r0:r0 + qls_h[b]]) - ref).max() < 2e-5
        r0 += qls_h[b]
    into = torch.empty_like(out)
    torch.ops.flashdec.decode_batch_into(q, kp, vp, lens, qls, table, 30, max_seq_len=int(lens_h.max()),
                                         max_q_len=int(qls_h.max()), out=into)
    assert torch.equal(into, out)
    again = flashdec.decode_batch(q, kp, vp, lens, q_lens=qls, page_table=table, window=30,
                                  max_seq_len=int(lens_h.max()), max_q_len=int(qls_h.max()))
    assert torch.equal(again, out)


def test_decode_batch_op_bad_page():
    q, kp, vp, lens, qls, table, *_ = random_batch(6)
    table[0, 0] = kp.shape[0]  # past the pool
    with pytest.raises(ValueError, match="page"):
        torch.ops.flashdec.decode_batch(q, kp, vp, lens, qls, table)


def test_batch_fast_path_reads_each_call():
    """A repeated batch shape takes the cached set-up: new lengths and page ids are read for each call, and bad ones
    (or token counts that do not add up to q's rows) are still refused with nothing written."""
    q, kp, vp, lens, qls, table, dense, lens_h, qls_h = random_batch(5)
    kw = dict(max_seq_len=int(lens_h.max()), max_q_len=int(qls_h.max()))
    first = torch.ops.flashdec.decode_batch(q, kp, vp, lens, qls, table, **kw)[0]
    shorter = lens.clone()
    shorter[0] = int(qls_h[0])  # the first sequence cut to its new tokens
    out = torch.ops.flashdec.decode_batch(q, kp, vp, shorter, qls, table, **kw)[0]
    ref = reference_tokens(np64(q[:qls_h[0]]), dense[0][0][:qls_h[0]], dense[0][1][:qls_h[0]], int(qls_h[0]))
    assert np.abs(np64(out[:qls_h[0]]) - ref).max() < 2e-5 and torch.equal(out[qls_h[0]:], first[qls_h[0]:])
    bad = table.clone()
    bad[1, 0] = kp.shape[0] + 5
    into = torch.full_like(out, 7.0)
    with pytest.raises(ValueError, match="page"):
        torch.ops.flashdec.decode_batch_into(q, kp, vp, lens, qls, bad, **kw, out=into)
    assert (into == 7).all()
    wrong = qls.clone()
    wrong[0] = max(1, int(qls_h[0]) - 1) if qls_h[0] > 1 else 2
    with pytest.raises(ValueError):
        torch.ops.flashdec.decode_batch_into(q, kp, vp, lens, wrong, table, **kw, out=into)
    assert (into == 7).all()


def test_opcheck():
    """torch.library's own checks of the schemas, the fake kernels and the registrations."""
    q, k, v = layer(7, H=4, G=2, D=32, L=40)
    torch.library.opcheck(torch.ops.flashdec.decode.default, (q, k, v, 40), dict(window=16))
    torch.library.opcheck(torch.ops.flashdec.decode_into.default, (q, k, v, 40), dict(out=torch.empty_like(q)))
    qb, kp, vp, lens, qls, table, *_ = random_batch(8)
    torch.library.opcheck(torch.ops.flashdec.decode_batch.default, (qb, kp, vp, lens, qls, table))
    torch.library.opcheck(torch.ops.flashdec.decode_batch_into.default, (qb, kp, vp, lens, qls, table),
                          dict(out=torch.empty_like(qb)))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    """A decode step (projections around the attention) compiles as one graph, the operators inside it, and
    computes what eager mode does; a new seq_len does not stop it."""
    torch._dynamo.reset()
    q, k, v = layer(9, H=8, G=2, D=64, L=256, device=device)
    w = torch.randn(64, 64, device=device) / 8

    def step(x, k, v, n):
        out, lse = torch.ops.flashdec.decode(x @ w, k, v, n)
        o2 = flashdec.decode(x @ w, k, v, seq_len=n, window=64)  # the plain function, traced too
        return out @ w + o2, lse

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for n in (200, 256, 130):
        a, la = compiled(q, k, v, n)
        b, lb = step(q, k, v, n)
        assert torch.allclose(a, b, atol=1e-5) and torch.allclose(la, lb, atol=1e-5)


def test_torch_compile_inductor_cpu():
    torch._dynamo.reset()
    q, k, v = layer(10, H=4, G=1, D=32, L=64)

    def step(x, k, v):
        return torch.ops.flashdec.decode(torch.tanh(x), k, v, 64)[0] * 2

    a = torch.compile(step, fullgraph=True)(q, k, v)
    assert torch.allclose(a, step(q, k, v), atol=1e-6)


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs a CUDA device and flashdec's CUDA backend")
def test_cuda_graph_replays_the_op():
    """decode_into captured once in a CUDA graph and replayed over new data in the same buffers; a capture on a
    stream flashdec has not seen is refused with a message, not a CUDA error."""
    q, k, v = layer(11, dtype=torch.float16, device="cuda")
    out = torch.empty_like(q)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.ops.flashdec.decode_into(q, k, v, 300, out=out)  # warm up: the context and its scratch exist
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):  # the stream whose context the warm-up made
        torch.ops.flashdec.decode_into(q, k, v, 300, out=out)
    for seed in (12, 13):
        q2, k2, v2 = layer(seed, dtype=torch.float16, device="cuda")
        q.copy_(q2), k.copy_(k2), v.copy_(v2)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref = reference(np64(q2), np64(k2), np64(v2), 300)[0]
        assert np.abs(np64(out) - ref).max() < 2e-3
    g2 = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="before capturing"):
        with torch.cuda.graph(g2):  # a fresh capture stream
            torch.ops.flashdec.decode_into(q, k, v, 300, out=out)
