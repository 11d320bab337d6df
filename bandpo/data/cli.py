"""The command line of the data stage, ``python -m bandpo.data``: generate tiny-math or normalise a real data set.

CLI::

    python -m bandpo.data tiny-math --out resources/data/tiny-math --seed 0
    python -m bandpo.data tiny-math --out resources/data/tiny-math-probe --seed 0 --probe '{"decoy_share": 0.95}'
    python -m bandpo.data tiny-math --out resources/data/tiny-math-real-lm --levels 1 --prompt-format answer-line
    python -m bandpo.data real --name aime-2024 --out resources/data/aime-2024 [--path FILE | --download]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from bandpo.data.real import REAL_DATASETS, write_real_dataset
from bandpo.data.tiny_math import KINDS, LEVELS, PROMPT_FORMATS, write_tiny_math


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bandpo.data", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tiny-math", help="generate the tiny-math splits")
    t.add_argument("--out", required=True)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--n-train", type=int, default=50_000)
    t.add_argument("--n-val", type=int, default=300)
    t.add_argument("--n-test", type=int, default=300)
    t.add_argument(
        "--probe", default=None, metavar="JSON", help="the mechanism probe: bandpo.data.tiny_math.ProbeSpec as JSON"
    )
    t.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS), help="problem kinds drawn (all)")
    t.add_argument("--levels", nargs="+", type=int, choices=LEVELS, default=list(LEVELS), help="levels drawn (all)")
    t.add_argument("--prompt-format", choices=sorted(PROMPT_FORMATS), default="tiny",
                   help="the rows' prompt (bandpo.data.tiny_math.PROMPT_FORMATS)")  # fmt: skip
    r = sub.add_parser("real", help="normalise a real data set into our JSONL schema")
    r.add_argument("--name", required=True, choices=sorted(REAL_DATASETS))
    r.add_argument("--out", required=True)
    r.add_argument("--path", default=None, help="local file or folder in the source format")
    r.add_argument("--download", action="store_true", help="allow datasets.load_dataset from the hub (GPU profile)")
    r.add_argument("--limit", type=int, default=None)
    args = ap.parse_args(argv)
    if args.cmd == "tiny-math":
        probe = json.loads(args.probe) if args.probe is not None else None
        paths = write_tiny_math(
            args.out, seed=args.seed, n_train=args.n_train, n_val=args.n_val, n_test=args.n_test, probe=probe,
            kinds=args.kinds, levels=args.levels, prompt_format=args.prompt_format,
        )  # fmt: skip
        for split, p in paths.items():
            print(f"{split}: {p}")
    else:
        p = write_real_dataset(args.name, args.out, path=args.path, allow_download=args.download, limit=args.limit)
        print(p)
    return 0
