"""The suite's sampler with and without ``torch.compile`` of its per-token step, side by side (issue #23's lead).

One rollout batch of the local trainer (``--prompts`` training prompts x ``--samples`` completions, at most
``--max-new-tokens`` tokens, temperature 1, one thread) is drawn by `bandpo.models.sampling.sample_rows` with the
model's `bandpo.models.fastlm.FastLlama`, first eagerly, then with ``FastLlama.decode`` (the per-token forward pass
over the KV cache, called once per generated token) wrapped by ``torch.compile(dynamic=True)``: the batch shrinks as
rows finish and the cache grows by a column per token, so shapes are dynamic. Prints the median time of a rollout
batch each way over ``--repeats`` (the first compiled batch, which compiles, timed apart), their ratio, and whether
both drew the same tokens from the same seed::

    python benchmarks/bench_sampler_compile.py [--model resources/models/tiny-s] [--data resources/data/tiny-math]
        [--prompts 16] [--samples 8] [--max-new-tokens 48] [--repeats 8] [--threads 1]

Needs a C++ compiler (inductor's CPU code generation) and a model `bandpo.models.fastlm.load_light` loads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resources/models/tiny-s")
    ap.add_argument("--data", default="resources/data/tiny-math")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if min(args.prompts, args.samples, args.max_new_tokens, args.repeats, args.threads) < 1:
        raise SystemExit("--prompts, --samples, --max-new-tokens, --repeats and --threads must be >= 1")
    import torch

    from bandpo.models.fastlm import FastLlama, light_loadable, load_light
    from bandpo.models.sampling import sample_rows

    if not light_loadable(args.model):
        raise SystemExit(f"{args.model}: not a tiny Llama that bandpo.models.fastlm.load_light loads")
    train = Path(args.data) / "train.jsonl"
    if not train.is_file():
        raise SystemExit(f"{train}: no such file")
    torch.set_num_threads(args.threads)
    model, tok = load_light(args.model)
    with open(train, encoding="utf-8") as f:
        prompts = [json.loads(line)["prompt"] for _, line in zip(range(args.prompts), f, strict=False)]
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True)

    def rollout():
        torch.manual_seed(0)
        start = time.perf_counter()
        tokens = sample_rows(model, enc["input_ids"], enc["attention_mask"], args.samples, args.max_new_tokens, 1.0,
                             tok.eos_token_id)[0]  # fmt: skip
        return time.perf_counter() - start, tokens

    eager = [rollout() for _ in range(args.repeats)]
    eager_s = statistics.median(t for t, _ in eager)
    eager_decode = FastLlama.decode
    FastLlama.decode = torch.compile(eager_decode, dynamic=True)
    try:
        first_s, _ = rollout()
        compiled = [rollout() for _ in range(args.repeats)]
    finally:
        FastLlama.decode = eager_decode
    compiled_s = statistics.median(t for t, _ in compiled)
    print(f"{len(prompts)} prompts x {args.samples} samples, <= {args.max_new_tokens} tokens, {args.threads} thread(s)")
    print(f"eager: {eager_s * 1000:.1f} ms a rollout batch (median of {args.repeats})")
    print(f"compiled: first batch (compiles) {first_s:.1f} s, then {compiled_s * 1000:.1f} ms (median)")
    print(f"ratio eager / compiled: {eager_s / compiled_s:.2f}x")
    print(f"same tokens from the same seed: {torch.equal(eager[0][1], compiled[0][1])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
