"""The plan of the verdict rule's designs from the three publications of one design (docs/statistics.md, "The
verdict rule and seeds until decided"): the paired differences of each primary read from the publications' per-seed
scores in git history (`publication_differences`), the planning SD per setting (the one-sided 90% upper confidence
bound of the pooled SD, `planning_sds`), their training cost (`publication_costs`), and a design's table of
boundaries, error rates, expected pairs and stability (`plan_lines`). docs/statistics.md's block of the designs as
the published config applies them is `docs.blocks.designs.sequential_plan`, which reads these.

``python -m bandpo.analysis.sequential plan --sd SD`` prints a design's table. Seeded: the same numbers on every
machine.
"""

from __future__ import annotations

import argparse
import io
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from scipy.stats import chi2

from bandpo.stats.design import ALPHA, BETA, FUTILITY_SPENDING, SPENDING, SequentialDesign, boundaries, plan_design
from bandpo.stats.rule import POINTS
from bandpo.stats.simulate import (
    agreement,
    operating_characteristics,
)

SD_CONFIDENCE = 0.90  # the planning SD: this one-sided upper confidence bound of the pooled SD

# ------------------------------------------------------------------------------------------------------------
# The three publications: planning SDs and the plan block of docs/statistics.md
# ------------------------------------------------------------------------------------------------------------
# The publications of one design (the same base models by sha256, the same seeds; numerics changed between them by
# the two speed-ups that passed the recipe check), oldest first
PUBLICATIONS = ("4cefb3a", "580b220", "73d879f")
# primary -> (setting, experiment, model): the settings pool their primaries' SDs (main tiny-s and separation are
# the same setting, tiny-s at D = 4 and 64 steps, on other seeds)
PRIMARIES = {
    "main tiny-s": ("tiny-s, 64 steps", "main", "tiny-s"),
    "separation tiny-s": ("tiny-s, 64 steps", "separation", "tiny-s"),
    "main tiny-m": ("tiny-m, 64 steps", "main", "tiny-m"),
    "horizon tiny-s": ("tiny-s, 256 steps", "horizon", "tiny-s"),
}
POOLED = "main + separation tiny-s"  # the headline, pooled as one primary
HEADLINE_SETTING = "tiny-s, 64 steps"
TREATMENT, CONTROL, TASK = "bandpo_kl", "grpo", "tiny_math"
DEFAULT_K = 5
DELTA_GRID = (-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)  # points


def _git_show(repo: str | Path, commit: str, path: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), "show", f"{commit}:{path}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(
            f"cannot read {path} of publication {commit} with git in {repo} ({e}); the plan from the publications "
            "needs the repository's history (not a shallow clone)"
        ) from e


def publication_differences(repo: str | Path = ".", commits: Sequence[str] = PUBLICATIONS) -> pd.DataFrame:
    """The per-seed paired differences of final mean@8 on tiny_math, BandPO-KL - GRPO, of each primary in each
    publication, read from ``results/scores.csv`` at each commit with ``git show``: columns publication,
    primary, setting, seed, diff (fractions). RuntimeError when git or a commit is not there."""
    rows = []
    for c in commits:
        text = _git_show(repo, c, "results/scores.csv")
        s = pd.read_csv(io.StringIO(text))
        s = s[(s["metric"] == "mean") & (s["k"] == 8) & (s["task"] == TASK) & s["subset"].isna()]
        for primary, (setting, experiment, model) in PRIMARIES.items():
            g = s[(s["experiment"] == experiment) & (s["model"] == model)]
            wide = g.pivot_table(index="seed", columns="entry", values="value", aggfunc="mean")
            d = (wide[TREATMENT] - wide[CONTROL]).dropna()
            rows += [{"publication": c, "primary": primary, "setting": setting, "seed": int(k), "diff": float(v)}
                     for k, v in d.items()]  # fmt: skip
    return pd.DataFrame(rows, columns=["publication", "primary", "setting", "seed", "diff"])


def upper_sd(sd: float, df: int, confidence: float = SD_CONFIDENCE) -> float:
    """The one-sided ``confidence`` upper bound of an SD estimated with ``df`` degrees of freedom (chi-square)."""
    return float(sd * math.sqrt(df / chi2.ppf(1.0 - confidence, df)))


def planning_sds(diffs: pd.DataFrame) -> pd.DataFrame:
    """Per setting, from `publication_differences`: the pooled SD (root of the mean of the samples' variances,
    weighted by their degrees of freedom; each publication's primary is one sample), its degrees of freedom, its
    one-sided `SD_CONFIDENCE` upper bound (the planning SD), the largest single SD, the mean of all differences."""
    rows = []
    for setting, g in diffs.groupby("setting", sort=False):
        samples = [x["diff"].to_numpy() for _, x in g.groupby(["publication", "primary"], sort=False)]
        df = sum(len(x) - 1 for x in samples)
        pooled = math.sqrt(sum((len(x) - 1) * x.var(ddof=1) for x in samples) / df)
        rows.append({"setting": setting, "samples": len(samples), "df": df, "pooled_sd": pooled,
                     "planning_sd": upper_sd(pooled, df), "largest_sd": max(x.std(ddof=1) for x in samples),
                     "pooled_mean": float(g["diff"].mean())})  # fmt: skip
    return pd.DataFrame(rows)


def pts(x: float, digits: int = 2) -> str:
    """A fraction in points, ``digits`` decimals."""
    return f"{x * POINTS:.{digits}f}"


def pct(x: float) -> str:
    """A probability, 3 decimals."""
    return f"{x:.3f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """A Markdown table's lines; ``align`` one letter a column (r: right)."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def boundaries_table(design: SequentialDesign) -> list[str]:
    rows = []
    for j, lk in enumerate(boundaries(design)):
        fut = "= efficacy" if j == design.looks - 1 else (f"{lk.futility_t:.3f}" if lk.futility_t > -1e300 else "-")
        eff = f"{lk.efficacy_t:.3f}" if lk.efficacy_t < 1e300 else "-"
        rows.append([str(j + 1), str(lk.n), eff, fut, f"{lk.efficacy_z:.3f}", f"{lk.futility_z:.3f}",
                     f"{lk.alpha_spent:.4f}", f"{lk.beta_spent:.4f}"])  # fmt: skip
    header = ["look", "pairs", "better if t ≥", "not better if t ≤", "z efficacy", "z futility", "α spent", "β spent"]
    return table(header, rows, "rrrrrrrr")


def plan_lines(design: SequentialDesign, deltas: Sequence[float], sds: Sequence[float], reps: int, seed: int) -> list:
    """A design's plan: its parameters, boundaries, and the simulated P(better), expected pairs and stability of
    the t procedure at each Δ (points) and SD (fractions)."""
    lines = [
        f"Design: one-sided α = {design.alpha:g} at Δ = 0, power {1 - design.beta:g} at Δ = δ = "
        f"{design.margin * POINTS:g} points with planning SD {pts(design.planning_sd)} points; a look every "
        f"{design.k} pairs, at most {design.n_max} ({design.looks} looks); spending: α {design.spending}, "
        f"β {design.futility_spending}; {'binding' if design.binding else 'non-binding'} efficacy boundaries.",
        "",
        *boundaries_table(design),
        "",
    ]
    rows = []
    for sd in sds:
        for delta in deltas:
            oc = operating_characteristics(design, delta / POINTS, sd, reps, seed)
            rows.append([pts(sd), f"{delta:+g}", pct(oc.p_better), f"{oc.expected_n:.1f}",
                         pct(agreement(oc.p_better, reps))])  # fmt: skip
    header = ["SD (points)", "true Δ (points)", "P(better)", "expected pairs", "stability"]
    return lines + table(header, rows, "rrrrr")


def publication_costs(repo: str | Path = ".", commits: Sequence[str] = PUBLICATIONS) -> pd.DataFrame:
    """Training CPU-minutes of one seed pair (BandPO-KL + GRPO, mean over the pair's seeds) of each primary in each
    publication, from ``results/runs.csv`` at each commit (``train_seconds``; scoring not counted): columns
    publication, setting, primary, cpu_min."""
    rows = []
    for c in commits:
        runs = pd.read_csv(io.StringIO(_git_show(repo, c, "results/runs.csv")))
        for primary, (setting, experiment, model) in PRIMARIES.items():
            g = runs[(runs["experiment"] == experiment) & (runs["model"] == model)]
            per_entry = g[g["entry"].isin([TREATMENT, CONTROL])].groupby("entry")["train_seconds"].mean()
            rows.append({"publication": c, "setting": setting, "primary": primary, "cpu_min": per_entry.sum() / 60})
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bandpo.analysis.sequential", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="print a design's boundaries, error rates, expected pairs and stability")
    p.add_argument("--sd", type=float, help="planning SD of the paired differences (fractions: 0.027 = 2.7 points)")
    p.add_argument("--margin", type=float, default=0.02)
    p.add_argument("--k", type=int, default=DEFAULT_K)
    p.add_argument("--n-max", type=int, help="default: the smallest that meets at --sd")
    p.add_argument("--alpha", type=float, default=ALPHA)
    p.add_argument("--beta", type=float, default=BETA)
    p.add_argument("--spending", default=SPENDING)
    p.add_argument("--futility-spending", default=FUTILITY_SPENDING)
    p.add_argument("--delta", type=float, nargs="*", default=[0.0, 2.0], help="true differences to simulate, points")
    p.add_argument("--true-sd", type=float, nargs="*", help="SDs to simulate at (fractions; default --sd)")
    p.add_argument("--reps", type=int, default=40_000)
    p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.sd is None:
            parser.error("--sd is needed")
        if args.n_max is None:
            design = plan_design(args.margin, args.k, args.sd, args.alpha, args.beta, args.spending,
                                 args.futility_spending)  # fmt: skip
        else:
            design = SequentialDesign(args.margin, args.k, args.n_max, args.sd, args.alpha, args.beta, args.spending,
                                      args.futility_spending)  # fmt: skip
        print("\n".join(plan_lines(design, args.delta, args.true_sd or [args.sd], args.reps, args.seed)))
        return 0
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
