"""A trained entry against its base model, paired per test problem: how much did training gain on this test set?

The leaderboard's intervals are over seeds (each seed: its own base model and run), which is what a rerun redraws;
with 2 seeds a t interval is ±12.7 standard errors wide and says little. This script gives the other, narrower
question its interval: for each seed, the gain of the trained model over its own base model on the same test
problems (per-problem mean@k of ``{task}.samples.jsonl``, paired), with a 95% percentile-bootstrap interval that
resamples the problems (the same resample for every seed, so the pooled gain keeps the pairing). It is conditional
on the trained models: it holds the test set's and the sampling's noise, not the seed's.

    python benchmarks/paired_problems.py --eval results/verl-cpu/eval/tiny-s --entry grpo [--base base]
        [--task tiny_math] [--metric mean@8] [--seeds 0 1] [--resamples 10000]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def per_problem(path: Path, metric: str) -> dict[str, float]:
    """{problem id: metric} from an lm-eval samples file (the doc's ``id``, else lm-eval's ``doc_id``)."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if metric not in row:
            raise ValueError(f"{path}: a sample has no {metric!r} (metrics: {row.get('metrics')})")
        key = str((row.get("doc") or {}).get("id", row.get("doc_id")))
        out[key] = float(row[metric])
    return out


def paired_gains(
    eval_dir: Path, entry: str, base: str, task: str, metric: str, seeds: list[int], resamples: int, seed: int = 0
) -> list[tuple[str, int, float, float, float]]:
    """Rows (label, problems, gain, ci_low, ci_high) per seed and pooled over the seeds."""
    diffs = []
    for s in seeds:
        a = per_problem(eval_dir / entry / f"seed{s}" / f"{task}.samples.jsonl", metric)
        b = per_problem(eval_dir / base / f"seed{s}" / f"{task}.samples.jsonl", metric)
        if set(a) != set(b):
            raise ValueError(f"seed {s}: {entry} and {base} scored different problems ({len(a)} vs {len(b)})")
        keys = sorted(a)
        diffs.append(np.array([a[k] - b[k] for k in keys]))
    n = len(diffs[0])
    if any(len(d) != n for d in diffs):
        raise ValueError("the seeds scored different numbers of problems")
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # one resample of problems for all seeds
    rows = []
    for label, d in [*[(f"seed {s}", d[None, :]) for s, d in zip(seeds, diffs, strict=True)],
                     (f"pooled over {len(seeds)} seeds", np.stack(diffs))]:  # fmt: skip
        boot = d[:, idx].mean(axis=(0, 2))
        lo, hi = np.percentile(boot, [2.5, 97.5])
        rows.append((label, n, float(d.mean()), float(lo), float(hi)))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eval", required=True, type=Path, help="results/{profile}/eval/{model}")
    ap.add_argument("--entry", required=True)
    ap.add_argument("--base", default="base")
    ap.add_argument("--task", default="tiny_math")
    ap.add_argument("--metric", default="mean@8")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--resamples", type=int, default=10000)
    args = ap.parse_args(argv)
    try:
        rows = paired_gains(args.eval, args.entry, args.base, args.task, args.metric, args.seeds, args.resamples)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.entry} - {args.base}, {args.metric} on {args.task}, points [95% bootstrap over problems]")
    for label, n, gain, lo, hi in rows:
        print(f"  {label:>22}: {100 * gain:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]  ({n} problems)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
