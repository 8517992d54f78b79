"""A transformers model from a configuration generates with SDPA and with flashdec: the tokens compared, the time per
new token printed, and with --profile the attention's share of a decode step (torch profiler).

    python examples/hf_generate.py                                   # a small Llama on the CPU
    python examples/hf_generate.py --preset llama3-8b --layers 4 --context 4096 --device cuda --dtype bfloat16
    python examples/hf_generate.py --preset llama3-8b --layers 2 --context 32768 --random-cache --profile

Needs torch and transformers (pip install torch transformers). Nothing is downloaded: the weights are random, so the
text means nothing, but the work of a decode step is the real model's.
"""
import argparse
import copy
import time

import torch
import transformers

import flashdec.integrations.transformers  # noqa: F401  (registers attn_implementation="flashdec")

PRESETS = {
    # the attention geometry and widths of the real models; --layers picks how many layers
    "small": dict(cls="LlamaConfig", hidden_size=256, intermediate_size=512, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=1000),
    "llama3-8b": dict(cls="LlamaConfig", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0),
    "qwen3-8b": dict(cls="Qwen3Config", hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936),
    "gemma2-9b": dict(cls="Gemma2Config", hidden_size=3584, intermediate_size=14336, num_attention_heads=16,
                      num_key_value_heads=8, head_dim=256, vocab_size=256000, sliding_window=4096,
                      attn_logit_softcapping=50.0, query_pre_attn_scalar=256),
}


def build(args):
    p = dict(PRESETS[args.preset])
    cls = getattr(transformers, p.pop("cls"))
    cfg = cls(**p, num_hidden_layers=args.layers, max_position_embeddings=args.context + args.new_tokens + 16)
    torch.manual_seed(0)
    with torch.device(args.device):
        ref = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=args.reference,
                                                            dtype=getattr(torch, args.dtype))
    ours = copy.deepcopy(ref)
    ours.set_attn_implementation("flashdec")
    return ref.eval(), ours.eval(), cfg


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def start(model, ids, args):
    """The cache and the first new token: a prefill of the prompt ids, or (--random-cache) random K/V rows of
    args.context positions in every layer and the prompt's last token as the first input."""
    if not args.random_cache:
        out = model(ids, use_cache=True, logits_to_keep=1)
        return out.past_key_values, out.logits[:, -1:].argmax(-1)
    cfg = model.config
    g = torch.Generator(args.device).manual_seed(2)
    cache = transformers.DynamicCache(config=cfg)
    G = cfg.num_key_value_heads
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    for layer in range(cfg.num_hidden_layers):
        kv = [torch.randn(args.batch, G, args.context, D, generator=g, device=args.device, dtype=model.dtype)
              for _ in range(2)]
        cache.update(kv[0], kv[1], layer)
    return cache, ids[:, -1:]


def run(model, ids, args):
    """The cache (not timed), then the new tokens one by one: (tokens, seconds a new token)."""
    with torch.no_grad():
        cache, nxt = start(model, ids, args)
        tokens = [nxt]
        sync(args.device)
        t0 = time.perf_counter()
        for _ in range(args.new_tokens - 1):
            out = model(nxt, past_key_values=cache, use_cache=True)
            cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
            tokens.append(nxt)
        sync(args.device)
    return torch.cat(tokens, 1), (time.perf_counter() - t0) / (args.new_tokens - 1)


def attention_share(model, name, ids, args):
    """Profiles three decode steps; returns the attention calls' share of a step (host time on the CPU, kernel time
    on CUDA) and their milliseconds a step."""
    from torch.profiler import ProfilerActivity, profile, record_function
    inner = transformers.AttentionInterface._global_mapping[name]

    def timed(*a, **kw):
        with record_function("attention"):
            return inner(*a, **kw)
    transformers.AttentionInterface.register(name, timed)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    try:
        with torch.no_grad():
            cache, nxt = start(model, ids, args)
            with profile(activities=acts) as prof:
                for _ in range(3):
                    with record_function("step"):
                        out = model(nxt, past_key_values=cache, use_cache=True)
                        cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
                sync(args.device)
    finally:
        transformers.AttentionInterface.register(name, inner)
    ev = {e.key: e for e in prof.key_averages()}
    if args.device == "cuda":
        total = sum(e.self_device_time_total for e in prof.key_averages())
        att = ev["attention"].device_time_total
    else:
        total, att = ev["step"].cpu_time_total, ev["attention"].cpu_time_total
    return att / total, att / 3 / 1e3  # the share, and ms of attention a step (us in the profiler)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--context", type=int, default=512, help="positions in the cache before the timed decode steps")
    ap.add_argument("--random-cache", action="store_true",
                    help="fill the cache with random K/V rows instead of a prefill of the prompt (long contexts on a "
                         "CPU, where the prefill would take long)")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--reference", default="sdpa", help="the implementation compared with (gemma2: eager)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each; the medians are printed")
    ap.add_argument("--profile", action="store_true", help="the attention's share of a decode step")
    args = ap.parse_args()
    if args.preset == "gemma2-9b" and args.reference == "sdpa":
        args.reference = "eager"  # SDPA has no soft-cap
    ref, ours, cfg = build(args)
    ids = torch.randint(1, cfg.vocab_size, (args.batch, args.context), device=args.device,
                        generator=torch.Generator(args.device).manual_seed(1))
    times = {"ref": [], "flashdec": []}
    for _ in range(args.repeats):  # alternated, so that both see the same machine
        t_ref, s_ref = run(ref, ids, args)
        t_fd, s_fd = run(ours, ids, args)
        times["ref"].append(s_ref)
        times["flashdec"].append(s_fd)
    same = (t_ref == t_fd).float().mean().item()
    med = {k: sorted(v)[len(v) // 2] * 1e3 for k, v in times.items()}
    print(f"{args.preset}, {args.layers} layers, batch {args.batch}, context {args.context}, {args.dtype} on "
          f"{args.device}: {args.new_tokens} greedy tokens, {same:.0%} the same as {args.reference}'s")
    print(f"ms a token: {args.reference} {med['ref']:.3f}, flashdec {med['flashdec']:.3f} "
          f"({med['ref'] / med['flashdec']:.2f}x)")
    if args.profile:
        what = "kernel time" if args.device == "cuda" else "host time"
        for name, model in ((args.reference, ref), ("flashdec", ours)):
            if name not in transformers.AttentionInterface._global_mapping:
                continue  # eager is each model's own function
            share, ms = attention_share(model, name, ids, args)
            print(f"profile, {name}: attention {ms:.3f} ms a step ({args.layers} layers), {share:.0%} of the step's "
                  f"{what}")


if __name__ == "__main__":
    main()
