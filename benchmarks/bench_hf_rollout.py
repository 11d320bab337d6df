"""The CPU verl profile's rollout server (`bandpo.verl.hf_rollout.HFRolloutServer`): three ways of serving one step.

verl's agent loop sends every sample of a step to the rollout server at once, one ``generate`` call per sample. This
benchmark makes the same calls (``--prompts`` prompts of the data set x ``--samples`` samples each, all awaited
together, as in one step of ``config/verl-cpu.yaml``) on three servers built from the same model, side by side in
one process: one request at a time through transformers ``generate`` (``max_batch=1``), the step as one left-padded
``generate`` batch (``sampler="generate"``), and the profile's server (the step as one batch drawn by the suite's
sampler, each prompt pre-filled once for its samples). It prints the seconds per step of each, over ``--repeats``
alternating rounds, and their ratios to the profile's server::

    python benchmarks/bench_hf_rollout.py [--model resources/models/tiny-s/seed0]
        [--data resources/data/tiny-math/train.jsonl] [--prompts 32] [--samples 8] [--repeats 3] [--threads 2]

Needs a model and the data the DAG builds (or any causal LM folder and a JSONL file with a ``prompt`` field).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import torch

from bandpo.core.files import read_jsonl
from bandpo.models.tiny import MAX_NEW_TOKENS

ROOT = Path(__file__).resolve().parents[1]


def one_step(server, prompts: list[list[int]], samples: int, params: dict) -> float:
    """Seconds for all ``samples`` completions of every prompt, requested at once."""

    async def run():
        calls = [
            server.generate(f"p{i}s{j}", prompt_ids=p, sampling_params=params)
            for i, p in enumerate(prompts)
            for j in range(samples)
        ]
        return await asyncio.gather(*calls)

    t0 = time.perf_counter()
    outs = asyncio.run(run())
    assert len(outs) == len(prompts) * samples and all(o.token_ids for o in outs)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resources/models/tiny-s/seed0")
    ap.add_argument("--data", default="resources/data/tiny-math/train.jsonl")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    for path in (Path(args.model) / "config.json", Path(args.data)):
        if not path.is_file():
            ap.error(f"{path} not found: build it with the DAG first (snakemake --cores all {path})")

    from transformers import AutoTokenizer

    from bandpo.verl.hf_rollout import HFRolloutServer

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    rows = read_jsonl(args.data)[: args.prompts]
    prompts = [tokenizer(r["prompt"], add_special_tokens=False)["input_ids"] for r in rows]
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    n = len(prompts) * args.samples
    common = (args.model, MAX_NEW_TOKENS, 128, "float32", 0)
    servers = {  # the profile's server last: the ratios are to it
        "generate, one at a time": HFRolloutServer(*common, max_batch=1, batch_wait_s=0.01, sampler="generate"),
        "generate, one batch": HFRolloutServer(*common, max_batch=n, sampler="generate"),
        "suite sampler, one batch": HFRolloutServer(*common, max_batch=n),
    }
    seconds: dict[str, list[float]] = {name: [] for name in servers}
    for _ in range(args.repeats):  # alternate, so that a slow spell of the machine hits both
        for name, server in servers.items():
            seconds[name].append(one_step(server, prompts, args.samples, params))
    print(f"{len(prompts)} prompts x {args.samples} samples = {n} requests per step, {args.threads} threads, "
          f"{args.repeats} rounds; model {args.model}")  # fmt: skip
    medians = {name: statistics.median(v) for name, v in seconds.items()}
    for name, v in seconds.items():
        print(f"  {name:26s} median {medians[name]:7.2f} s per step  (rounds: {', '.join(f'{x:.2f}' for x in v)})")
    profile = medians["suite sampler, one batch"]
    for name in list(servers)[:-1]:
        print(f"  ratio {name} / suite sampler, one batch: {medians[name] / profile:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
