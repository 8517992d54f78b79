"""flashdec as a transformers attention implementation: small random-weight models built from configurations (nothing
downloaded) generate greedily with attn_implementation="flashdec" and with SDPA (eager where SDPA lacks the
model's variant), and must give the same tokens and close logits, with flashdec used for every decode step.
Skips where torch or transformers is not installed; on a CUDA machine the models run there too."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is optional; install torch and transformers to run these tests")
transformers = pytest.importorskip("transformers", reason="transformers is optional; install it to run these tests")
import flashdec  # noqa: E402
import flashdec.integrations.transformers as fhf  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and flashdec.info()["cuda_compiled"] else [])
SMALL = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)


def config(family):
    """(config, reference implementation) of a family, small; windows of 8 so they bite within the test."""
    if family == "llama":
        return transformers.LlamaConfig(**SMALL), "sdpa"
    if family == "qwen2":
        return transformers.Qwen2Config(**SMALL), "sdpa"
    if family == "qwen3":  # head_dim 24: not a power of two
        return transformers.Qwen3Config(**SMALL, head_dim=24), "sdpa"
    if family == "gemma2":  # soft-cap 50 and sliding layers; SDPA has no soft-cap, so eager is the reference
        return transformers.Gemma2Config(**SMALL, head_dim=32, sliding_window=8, attn_logit_softcapping=50.0,
                                         query_pre_attn_scalar=32), "eager"
    if family == "gemma3":  # sliding layers with full ones between
        return transformers.Gemma3TextConfig(**SMALL, head_dim=32, sliding_window=8,
                                             layer_types=["sliding_attention", "full_attention",
                                                          "sliding_attention"]), "sdpa"
    if family == "gpt_oss":  # attention sinks and sliding layers; SDPA has no sinks, so eager is the reference
        kw = dict(SMALL, num_local_experts=4, num_experts_per_tok=2, head_dim=16, sliding_window=8)
        return transformers.GptOssConfig(**kw), "eager"
    raise ValueError(family)


def models(family, device, dtype=torch.float32):
    cfg, ref_impl = config(family)
    torch.manual_seed(0)
    ref = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=ref_impl)
    ours = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="flashdec")
    ours.load_state_dict(ref.state_dict())
    return ref.to(device, dtype).eval(), ours.to(device, dtype).eval(), cfg


class Count:
    """Counts the decode calls that reached flashdec (not the fallback)."""

    def __init__(self, monkeypatch):
        self.calls = []
        orig = fhf._decode_rows

        def spy(q_rows, kb, *args):
            self.calls.append((q_rows.shape[0], kb.shape[1]))
            return orig(q_rows, kb, *args)
        monkeypatch.setattr(fhf, "_decode_rows", spy)


def generate(model, ids, mask, **kw):
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, max_new_tokens=32, do_sample=False, output_logits=True,
                              return_dict_in_generate=True, pad_token_id=0, **kw)


def compare(ref, ours, ids, mask, tol, **kw):
    a, b = generate(ref, ids, mask, **kw), generate(ours, ids, mask, **kw)
    assert torch.equal(a.sequences, b.sequences), "flashdec's greedy tokens differ from the reference's"
    worst = max((x.float() - y.float()).abs().max().item() for x, y in zip(a.logits, b.logits))
    assert worst < tol, f"logits differ by {worst}"
    return a


FAMILIES = ["llama", "qwen2", "qwen3", "gemma2", "gemma3", "gpt_oss"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_generate_matches_reference_batched_with_padding(family, device, monkeypatch):
    """Three prompts of 20, 15 and 9 tokens, left-padded, 32 new tokens each."""
    ref, ours, cfg = models(family, device)
    count = Count(monkeypatch)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, cfg.vocab_size, (3, 20), generator=g).to(device)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    mask[2, :11] = 0
    compare(ref, ours, ids, mask, 1e-4)
    # every decode step of every layer went to flashdec (the prompt of 20, over 16 tokens, to the fallback)
    assert len(count.calls) == 31 * cfg.num_hidden_layers
    assert all(rows == 3 for rows, _ in count.calls)


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_short_prompt_and_speculative_steps(family, monkeypatch):
    """A prompt of 10 tokens (its prefill goes to flashdec too: 10 query tokens, causal), then prompt-lookup
    speculative decoding, whose verification steps carry several query tokens a sequence."""
    ref, ours, cfg = models(family, "cpu")
    count = Count(monkeypatch)
    base = torch.randint(1, cfg.vocab_size, (1, 5), generator=torch.Generator().manual_seed(2))
    ids = torch.cat([base, base], dim=1)  # repeats, so that prompt lookup finds drafts
    compare(ref, ours, ids, torch.ones_like(ids), 1e-4)
    assert count.calls[0][0] == 10  # the prefill
    count.calls.clear()
    compare(ref, ours, ids, torch.ones_like(ids), 1e-4, prompt_lookup_num_tokens=3)
    assert max(rows for rows, _ in count.calls) > 1  # a draft was verified in one call


@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 0.1), (torch.float16, 2e-2)])
def test_generate_half_precision(dtype, tol, monkeypatch):
    device = DEVICES[-1]
    ref, ours, cfg = models("llama", device, dtype)
    count = Count(monkeypatch)
    ids = torch.randint(1, cfg.vocab_size, (2, 18), generator=torch.Generator().manual_seed(3)).to(device)
    a, b = generate(ref, ids, torch.ones_like(ids)), generate(ours, ids, torch.ones_like(ids))
    worst = max((x.float() - y.float()).abs().max().item() for x, y in zip(a.logits, b.logits))
    # half-precision rounding may flip a near tie; the logits of the first steps (same prefix) must be close
    assert (a.logits[0].float() - b.logits[0].float()).abs().max().item() < tol
    assert count.calls and worst == worst


def test_masks_read_not_assumed():
    """_spans: the masks generate() makes are recognised; any other mask is refused (it goes to the fallback)."""
    B, q, kv = 2, 1, 10
    m = torch.ones(B, 1, q, kv, dtype=torch.bool)
    m[1, :, :, :4] = False  # left padding of 4
    assert fhf._spans(m, B, q, kv, 0) == [(0, 10), (4, 10)]
    assert fhf._spans(torch.where(m, 0.0, float("-inf")), B, q, kv, 0) == [(0, 10), (4, 10)]  # additive form
    static = m.clone()
    static[..., 7:] = False  # a static cache: rows past the current position are not there yet
    assert fhf._spans(static, B, q, kv, 0) == [(0, 7), (4, 7)]
    holes = m.clone()
    holes[0, :, :, 5] = False  # a hole inside the sequence: not a span, not a window
    assert fhf._spans(holes, B, q, kv, 0) is None
    # three new tokens, causal, window 4
    j = torch.arange(kv)
    p = kv - 3 + torch.arange(3)[:, None]
    w = ((j <= p) & (j > p - 4))[None, None].expand(B, 1, 3, kv)
    assert fhf._spans(w, B, 3, kv, 4) == [(4, 10), (4, 10)]  # token 0 (position 7) sees 4..7
    assert fhf._spans(w, B, 3, kv, 0) is None  # the mask has a window the call does not say
    assert fhf._spans(w, B, 3, kv, 5) is None  # or another window
    assert fhf._spans(None, B, 1, kv, 0) == [(0, 10), (0, 10)]
    assert fhf._spans(None, B, 3, kv, 0) is None  # several new tokens and no mask: not the decode layout
    dead = m.clone()
    dead[1] = False
    assert fhf._spans(dead, B, q, kv, 0) is None  # a sequence that sees nothing


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_generate_static_cache(family, monkeypatch):
    """A static cache holds rows past the current position; the mask says where each sequence ends."""
    ref, ours, cfg = models(family, "cpu")
    count = Count(monkeypatch)
    ids = torch.randint(1, cfg.vocab_size, (2, 18), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    compare(ref, ours, ids, mask, 1e-4, cache_implementation="static")
    assert len(count.calls) == 31 * cfg.num_hidden_layers


def test_registered_name():
    assert "flashdec" in transformers.AttentionInterface._global_mapping
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**SMALL),
                                                          attn_implementation="flashdec")
    assert model.config._attn_implementation == "flashdec"
