"""The command line of the models stage, ``python -m bandpo.models``: build (and pretrain) a tiny model, evaluate a
model's sampled accuracy on a split, or download a hub model.

    python -m bandpo.models build --size tiny-s --data resources/data/tiny-math --out resources/models/tiny-s \\
        --seed 0 --threads 1
    python -m bandpo.models eval --model resources/models/tiny-s --data resources/data/tiny-math/test.jsonl --k 8
    python -m bandpo.models download --repo-id Qwen/Qwen2.5-3B-Instruct --out resources/models/qwen2.5-3b
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch

from bandpo.core.files import read_jsonl, write_json
from bandpo.core.options import parse_assignments
from bandpo.models.hub import DEFAULT_ALLOW_PATTERNS, download_model
from bandpo.models.sizes import SIZES, SizeSpec
from bandpo.models.tiny import build_model, load_model, sample_accuracy


def _fmt(x: float) -> str:
    return "nan" if isinstance(x, float) and math.isnan(x) else f"{x:.3f}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bandpo.models", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="build and pretrain a tiny model")
    b.add_argument("--size", required=True, choices=sorted(SIZES))
    b.add_argument("--data", required=True, help="tiny-math folder with train.jsonl and validation.jsonl")
    b.add_argument("--out", required=True)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--steps", type=int, default=None, help="override the size's step count")
    b.add_argument("--lr", type=float, default=None)
    b.add_argument("--direct-frac", type=float, default=None)
    b.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override any SizeSpec field, e.g. --set batch_size=32 --set decay_frac=0.5")  # fmt: skip
    b.add_argument("--eval-limit", type=int, default=None)
    b.add_argument("--no-progress", action="store_true")

    e = sub.add_parser("eval", help="sample accuracy of a model on a JSONL split")
    e.add_argument("--model", required=True)
    e.add_argument("--data", required=True, help="a JSONL split (e.g. resources/data/tiny-math/test.jsonl)")
    e.add_argument("--k", type=int, default=8)
    e.add_argument("--temperature", type=float, default=1.0)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--out", default=None, help="write the result as JSON here")

    d = sub.add_parser("download", help="snapshot a hub model (GPU profile)")
    d.add_argument("--repo-id", required=True)
    d.add_argument("--out", required=True)
    d.add_argument("--revision", default=None)
    d.add_argument("--allow-patterns", nargs="*", default=None, help=f"default: {' '.join(DEFAULT_ALLOW_PATTERNS)}")

    args = ap.parse_args(argv)
    if args.cmd == "build":
        try:
            extra = parse_assignments(args.set, SizeSpec)
        except ValueError as e:
            ap.error(str(e))
        info = build_model(
            args.size,
            args.data,
            args.out,
            seed=args.seed,
            threads=args.threads,
            progress=not args.no_progress,
            eval_limit=args.eval_limit,
            steps=args.steps,
            lr=args.lr,
            direct_frac=args.direct_frac,
            **extra,
        )
        v = info["validation"]
        print(
            f"{args.size}: {info['params']} params, {info['build_seconds']} s, validation accuracy "
            f"{_fmt(v['accuracy'])} (k={v['k']}, T=1.0), per level {v['per_level']}, entropy "
            f"{_fmt(v['token_entropy'])} nats -> {args.out}"
        )
    elif args.cmd == "eval":
        torch.set_num_threads(args.threads)
        model, tok = load_model(args.model)
        res = sample_accuracy(model, tok, read_jsonl(args.data), k=args.k, temperature=args.temperature,
                              seed=args.seed)  # fmt: skip
        print(json.dumps(res, indent=2))
        if args.out:
            write_json(Path(args.out), res)
    else:
        patterns = args.allow_patterns if args.allow_patterns else DEFAULT_ALLOW_PATTERNS
        print(download_model(args.repo_id, args.out, revision=args.revision, allow_patterns=patterns))
    return 0
