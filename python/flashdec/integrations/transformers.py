"""Hugging Face transformers' attention through flashdec.

    import flashdec.integrations.transformers            # registers the implementation "flashdec"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="flashdec")   # or from_pretrained
    model.generate(input_ids, attention_mask=mask, max_new_tokens=32)

Decode steps, 1 to 16 new tokens a sequence over the layer's KV cache under the masks generate() makes (causal, left
padding, sliding windows), go to flashdec, with the model's scaling, soft-cap (Gemma 2) and attention sinks
(gpt-oss). Every other call goes to SDPA, or to a plain softmax in torch where SDPA has no such variant: a prompt of
more than 16 tokens, a mask of another form, a position bias, training. The mask is read, not assumed: each sequence's
span of keys (left padding, a static cache's end) comes from it, and the whole mask must be the one that the spans,
causality and the window make.
"""
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

import flashdec

NAME = "flashdec"
MAX_Q_LEN = 16  # flashdec's query tokens a sequence (FDEC_MAX_Q_LEN)


def _spans(mask, B, q_len, kv_len, window):
    """Each sequence's keys as (start, end), where `mask` ([B or 1, 1, q_len, >= kv_len] bool, or additive float with
    0 where visible, or None) is exactly: key j visible to new token i iff start <= j <= p_i and j > p_i - window,
    with p_i = end - q_len + i (end < kv_len in a static cache). None where it is any other mask."""
    if mask is None:  # transformers leaves the mask out only where plain causality (or nothing) is meant
        return [(0, kv_len)] * B if q_len in (1, kv_len) else None
    if mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[2] != q_len or mask.shape[3] < kv_len:
        return None
    m = mask[:, 0, :, :kv_len]
    m = m if m.dtype == torch.bool else m == 0
    m = m.expand(B, q_len, kv_len)
    j = torch.arange(kv_len, device=m.device)
    start = m[:, 0, :].to(torch.uint8).argmax(-1)  # the first token's first key
    end = kv_len - m[:, -1, :].flip(-1).to(torch.uint8).argmax(-1)  # past the last token's last key
    p = (end[:, None] - q_len + torch.arange(q_len, device=m.device))[:, :, None]
    want = (j >= start[:, None, None]) & (j <= p)
    if window:
        want &= j > p - window
    if not (torch.equal(want, m) and bool(m[:, 0, :].any(-1).all())):
        return None
    return list(zip(start.tolist(), end.tolist()))


class _MaskMemo:
    """The last masks' analyses: every layer of a step gets the same mask object, so it is read once a step."""

    def __init__(self):
        self.entries = []

    def spans(self, mask, B, q_len, kv_len, window):
        if mask is None:
            return _spans(None, B, q_len, kv_len, window)
        for m, key, result in self.entries:
            if m is mask and key == (B, q_len, kv_len, window):
                return result
        result = _spans(mask, B, q_len, kv_len, window)
        self.entries = [(mask, (B, q_len, kv_len, window), result)] + self.entries[:3]  # holds them: ids stay theirs
        return result


_memo = _MaskMemo()


def _sinks(module, s_aux):
    """gpt-oss's sinks as the float32 array flashdec reads, converted once and again only when they change."""
    if s_aux is None:
        return None
    held = getattr(module, "_flashdec_sinks", None)
    if held is None or held[0] is not s_aux or held[1] != s_aux._version:
        held = (s_aux, s_aux._version, s_aux.detach().float().contiguous())
        module._flashdec_sinks = held
    return held[2]


def _torch_attention(query, key, value, mask, scaling, softcap, sinks):
    """The reference softmax attention in torch for the variants SDPA lacks: [B, q, H, D] out."""
    B, H, q_len, D = query.shape
    G = key.shape[1]
    key = key.repeat_interleave(H // G, dim=1)
    value = value.repeat_interleave(H // G, dim=1)
    s = torch.matmul(query.float(), key.float().transpose(2, 3)) * (D ** -0.5 if scaling is None else scaling)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    # masked logits at the float32 minimum rather than -inf, as transformers' eager attention has them: a query that
    # sees nothing (a padding token's) gets finite junk, not NaN that its K/V would carry into later layers
    low = torch.finfo(torch.float32).min
    if mask is not None:
        m = mask[..., :key.shape[2]]
        s = s.masked_fill(~m, low) if m.dtype == torch.bool else s + m.float().clamp(min=low)
    elif q_len > 1:
        s = s.masked_fill(torch.ones(q_len, key.shape[2], dtype=torch.bool, device=s.device)
                          .tril(key.shape[2] - q_len).logical_not(), low)
    if sinks is not None:
        s = torch.cat([s, sinks.float().reshape(1, H, 1, 1).expand(B, H, q_len, 1)], dim=-1)
    w = torch.softmax(s, dim=-1)
    if sinks is not None:
        w = w[..., :-1]
    return torch.matmul(w, value.float()).to(query.dtype).transpose(1, 2).contiguous()


def _decode_rows(q_rows, kb, vb, out, spans, q_len, window, kw):
    """flashdec for q_rows [B * q_len, H, D] over the caches kb, vb [B, kv_len, G, D] into out, sequence b's keys
    spans[b] = (start, end): one call for the sequences that share a span, one a sequence where they differ."""
    B = kb.shape[0]
    if B == 1 and q_len == 1:  # one token of one sequence: fdec_decode, the shorter call
        (s, e), = spans
        flashdec.decode(q_rows[0], kb[0, s:e], vb[0, s:e], seq_len=e - s, window=window, out=out[0], **kw)
        return
    groups = [(0, B)] if len(set(spans)) == 1 else [(b, b + 1) for b in range(B)]
    for b0, b1 in groups:
        (s, e), rows = spans[b0], slice(b0 * q_len, b1 * q_len)
        lens = torch.full((b1 - b0,), e - s, dtype=torch.int32, device=q_rows.device)
        qls = torch.full((b1 - b0,), q_len, dtype=torch.int32, device=q_rows.device)
        flashdec.decode_batch(q_rows[rows], kb[b0:b1, s:e], vb[b0:b1, s:e], lens, q_lens=qls, window=window,
                              max_seq_len=e - s, max_q_len=q_len, out=out[rows], **kw)


def flashdec_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                               sliding_window=None, softcap=None, s_aux=None, **kwargs):
    """transformers' attention-function signature: query [B, H, q, D], key and value [B, G, kv, D] (the cache's,
    new tokens included), the mask from sdpa_mask. Returns ([B, q, H, D], None)."""
    B, H, q_len, D = query.shape
    kv_len = key.shape[2]
    window = int(sliding_window or 0)
    spans = None
    if (q_len <= MAX_Q_LEN and not dropout and kwargs.get("position_bias") is None and key.shape == value.shape
            and not torch.is_grad_enabled() and query.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and key.dtype == query.dtype and D <= 512 and not kwargs.get("output_attentions")):
        spans = _memo.spans(attention_mask, B, q_len, kv_len, window)
    if spans is None:
        if softcap or s_aux is not None:
            return _torch_attention(query, key, value, attention_mask, scaling, softcap, s_aux), None
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    q_rows = query.transpose(1, 2).reshape(B * q_len, H, D).contiguous()
    out = torch.empty_like(q_rows)
    kw = dict(scale=scaling, softcap=softcap or None, sinks=_sinks(module, s_aux))
    _decode_rows(q_rows, key.transpose(1, 2), value.transpose(1, 2), out, spans, q_len, window, kw)
    return out.view(B, q_len, H, D), None


def _not_flash_attention(name):
    """transformers takes every implementation whose name holds "flash" for a FlashAttention kernel
    (`is_flash_attention_requested`): it would try to load one by that name, or swap in a model's own FlashAttention
    kernel. Its modules loaded now get a version of that test that answers no for `name`."""
    import sys

    from transformers.utils import generic
    test = getattr(generic, "is_flash_attention_requested", None)
    if test is None:  # a transformers without the test
        return
    names = getattr(test, "_flashdec_names", None)
    if names is not None:
        names.add(name)
        return

    def is_flash_attention_requested(config=None, requested_attention_implementation=None, version=None):
        impl = requested_attention_implementation if config is None else getattr(config, "_attn_implementation",
                                                                                 None)
        if isinstance(impl, str) and impl in is_flash_attention_requested._flashdec_names:
            return False
        return test(config, requested_attention_implementation, version)

    is_flash_attention_requested._flashdec_names = {name}
    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "").startswith("transformers")
                and getattr(module, "is_flash_attention_requested", None) is test):
            module.is_flash_attention_requested = is_flash_attention_requested


def register(name=NAME):
    """Registers flashdec as transformers' attention implementation `name` (done once on import), with sdpa_mask as
    its mask function, so that the masks flashdec reads are the ones SDPA would get."""
    AttentionInterface.register(name, flashdec_attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    if "flash" in name:
        _not_flash_attention(name)


register()
