"""Common random numbers on a tier: the arms' correlation and the paired SD under each way of drawing (issue #67).

Reads the scores of a run of ``config/crn-check.yaml`` (its experiments ``stream`` and ``keyed``: the same pair,
model and seeds, the sampler's stream of draws against common random numbers, ``train: sampler_draws``) and prints,
per experiment, over the seeds both arms have: the paired difference (treatment - control, points) with its 95%
paired t interval, the SD of the differences, each arm's SD and the correlation of the two arms' scores; then the
ratio of the two paired SDs (keyed / stream) with a 95% percentile-bootstrap interval over the seeds (the seeds
resampled together in both experiments: they share base model and seeds) and the adoption rule the config declared
before the runs: keyed draws are adopted if the ratio is at most 0.75.

    python benchmarks/crn_check.py results/embedded-crn
    python benchmarks/crn_check.py results/real-lm-crn --stream results/real-lm --model smollm2-135m \
        --task tiny_math_answer_line     # the real LM: its stream arm is the published comparison's runs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

ADOPT_AT = 0.75  # config/crn-check.yaml: the paired SD falls by at least 25%


def pairs(scores: pd.DataFrame, experiment: str, model: str, task: str, metric: str, treatment: str,
          control: str) -> pd.DataFrame:  # fmt: skip
    """Seed -> (treatment, control) scores in points, the seeds both arms have, in seed order."""
    rows = scores[(scores.experiment == experiment) & (scores.model == model) & (scores.task == task)
                  & (scores.name == metric) & scores.entry.isin([treatment, control])]  # fmt: skip
    wide = rows.pivot_table(index="seed", columns="entry", values="value", aggfunc="first") * 100.0
    if treatment not in wide or control not in wide:
        raise SystemExit(f"{experiment}: no scores of {treatment} and {control} ({metric}, {model}, {task})")
    return wide[[treatment, control]].dropna().sort_index()


def describe(p: pd.DataFrame) -> dict[str, float]:
    d = p.iloc[:, 0] - p.iloc[:, 1]
    n = len(d)
    half = stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / np.sqrt(n)
    return {"n": n, "mean": d.mean(), "lo": d.mean() - half, "hi": d.mean() + half, "sd": d.std(ddof=1),
            "sd_t": p.iloc[:, 0].std(ddof=1), "sd_c": p.iloc[:, 1].std(ddof=1),
            "r": float(np.corrcoef(p.iloc[:, 0], p.iloc[:, 1])[0, 1])}  # fmt: skip


def sd_ratio_interval(a: pd.DataFrame, b: pd.DataFrame, resamples: int = 20000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of SD(b's differences) / SD(a's), the seeds resampled together."""
    seeds = a.index.intersection(b.index)
    da = (a.iloc[:, 0] - a.iloc[:, 1]).loc[seeds].to_numpy()
    db = (b.iloc[:, 0] - b.iloc[:, 1]).loc[seeds].to_numpy()
    idx = np.random.default_rng(seed).integers(0, len(seeds), size=(resamples, len(seeds)))
    sa, sb = da[idx].std(axis=1, ddof=1), db[idx].std(axis=1, ddof=1)
    ratios = sb[sa > 0] / sa[sa > 0]
    return float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a results folder with scores.csv (results/embedded-crn)")
    ap.add_argument("--model", default="tiny-s")
    ap.add_argument("--task", default="tiny_math")
    ap.add_argument("--metric", default="mean@8")
    ap.add_argument("--pair", nargs=2, default=["bandpo_kl", "grpo"], metavar=("TREATMENT", "CONTROL"))
    ap.add_argument("--experiments", nargs=2, default=None, metavar=("BEFORE", "AFTER"),
                    help="default: stream keyed; with --stream: main keyed")  # fmt: skip
    ap.add_argument("--stream", default=None, metavar="FOLDER",
                    help="read the BEFORE experiment from this published folder's scores.csv (the real LM's stream "
                         "arm: results/real-lm, experiment main), on the seeds the AFTER one has")  # fmt: skip
    args = ap.parse_args(argv)
    experiments = args.experiments or (["main", "keyed"] if args.stream else ["stream", "keyed"])
    before, after = experiments
    folders = {before: Path(args.stream or args.results), after: Path(args.results)}
    got = {}
    for xp, folder in folders.items():
        path = folder / "scores.csv"
        if not path.is_file():
            raise SystemExit(f"{path}: not found (run the config's DAG first: config/crn-check*.yaml)")
        got[xp] = pairs(pd.read_csv(path), xp, args.model, args.task, args.metric, *args.pair)
    common = got[before].index.intersection(got[after].index)  # the seeds both draws have, paired by seed
    got = {xp: p.loc[common] for xp, p in got.items()}
    treatment, control = args.pair
    print(f"{args.model}, {args.metric} on {args.task} (points), {treatment} - {control}, paired by seed:")
    for xp, p in got.items():
        s = describe(p)
        print(f"  {xp:>7}: {s['n']} pairs (seeds {', '.join(map(str, p.index))}): {s['mean']:+.1f} "
              f"[{s['lo']:+.1f}, {s['hi']:+.1f}]; SD of the differences {s['sd']:.2f}; arms' SD {s['sd_t']:.2f} / "
              f"{s['sd_c']:.2f}; correlation of the arms {s['r']:+.2f}")  # fmt: skip
    ratio = describe(got[after])["sd"] / describe(got[before])["sd"]
    lo, hi = sd_ratio_interval(got[before], got[after])
    adopt = ratio <= ADOPT_AT
    print(f"paired SD, {after} / {before}: {ratio:.2f} [{lo:.2f}, {hi:.2f}] (95% bootstrap over the seeds)")
    print(f"adoption rule (config/crn-check.yaml, fixed before the runs: ratio <= {ADOPT_AT}): "
          f"{'adopt' if adopt else 'not adopted on this tier'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
