"""The suite's sampler, one rollout batch, in several variants side by side: the PyTorch decode (``torch``), the C
attention kernel (``c``, ``sampler_kernel: c``, `bandpo.runtime.ckernel`) and ``torch.compile`` of the per-token
step (``compile``, issue #23's lead).

One rollout batch of the local trainer (``--prompts`` training prompts x ``--samples`` completions, at most
``--max-new-tokens`` tokens, temperature 1, one thread) is drawn by `bandpo.runtime.sampling.sample_rows` with the
model's `bandpo.runtime.fastlm.FastLlama`, ``--repeats`` times per variant, the variants taking turns (round-robin,
so that a change in the machine's load meets them all). ``compile`` wraps ``FastLlama.decode`` in
``torch.compile(dynamic=True)`` (the batch shrinks as rows finish and the cache grows by a column per token, so
shapes are dynamic); its first batch, which compiles, is timed apart. Prints each variant's median time of a
rollout batch, its ratio to ``torch``, and whether it drew the same tokens as ``torch`` from the same seed (``c``
rounds differently, so a draw may flip now and then; ``compile`` computes the same operations)::

    python benchmarks/bench_sampler.py [--variants torch c] [--model resources/models/tiny-s]
        [--data resources/data/tiny-math] [--prompts 16] [--samples 8] [--max-new-tokens 48] [--repeats 8]
        [--threads 1]

Started as a script, it runs MKL's own branch on a CPU that is not Intel's (the line "MKL branch" says which);
the jobs' AVX2 branch needs ``python -m`` or the environment of `bandpo.core.numerics.env` (the decode's matrix
products are MKL's in every variant). ``c`` needs a C compiler, ``compile`` a C++ one (inductor's code generation);
both need a model `bandpo.runtime.fastlm.load_light` loads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

VARIANTS = ("torch", "c", "compile")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=["torch", "c"], choices=VARIANTS)
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
    variants = list(dict.fromkeys(["torch", *args.variants]))  # torch first: the reference of the ratios
    import torch

    from bandpo.core import numerics
    from bandpo.runtime import ckernel
    from bandpo.runtime.fastlm import FastLlama, light_loadable, load_light
    from bandpo.runtime.sampling import sample_rows

    if not light_loadable(args.model):
        raise SystemExit(f"{args.model}: not a tiny Llama that bandpo.runtime.fastlm.load_light loads")
    train = Path(args.data) / "train.jsonl"
    if not train.is_file():
        raise SystemExit(f"{train}: no such file")
    if "c" in variants:
        try:
            ckernel.check("c")
        except RuntimeError as err:
            raise SystemExit(str(err)) from None
    torch.set_num_threads(args.threads)
    model, tok = load_light(args.model)
    with open(train, encoding="utf-8") as f:
        prompts = [json.loads(line)["prompt"] for _, line in zip(range(args.prompts), f, strict=False)]
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True)
    eager_decode = FastLlama.decode
    compiled_decode = torch.compile(eager_decode, dynamic=True) if "compile" in variants else None

    def rollout(variant: str) -> tuple[float, torch.Tensor]:
        FastLlama.decode = compiled_decode if variant == "compile" else eager_decode
        try:
            torch.manual_seed(0)
            start = time.perf_counter()
            tokens = sample_rows(model, enc["input_ids"], enc["attention_mask"], args.samples, args.max_new_tokens,
                                 1.0, tok.eos_token_id, kernel="c" if variant == "c" else "torch")[0]  # fmt: skip
            return time.perf_counter() - start, tokens
        finally:
            FastLlama.decode = eager_decode

    first_compile_s = rollout("compile")[0] if "compile" in variants else None
    runs: dict[str, list[tuple[float, torch.Tensor]]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for variant in variants:
            runs[variant].append(rollout(variant))
    median = {v: statistics.median(t for t, _ in runs[v]) for v in variants}
    print(f"{len(prompts)} prompts x {args.samples} samples, <= {args.max_new_tokens} tokens, {args.threads} thread(s);"
          f" MKL branch {numerics.mkl_branch()}; median of {args.repeats}, round-robin")  # fmt: skip
    print(f"torch    {median['torch'] * 1000:8.1f} ms a rollout batch")
    for v in variants[1:]:
        same = torch.equal(runs[v][0][1], runs["torch"][0][1])
        print(f"{v:8s} {median[v] * 1000:8.1f} ms a rollout batch   torch / {v} {median['torch'] / median[v]:.2f}x   "
              f"same tokens as torch: {same}")  # fmt: skip
    if first_compile_s is not None:
        print(f"compile: the first batch (compiles) {first_compile_s:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
