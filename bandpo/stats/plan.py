"""A sequential design's plan as tables: its parameters and boundaries (`boundaries_table`), and the simulated
P(better), expected pairs and stability of the t procedure at true differences and SDs (`plan_lines`); the one-sided
upper confidence bound of an estimated SD that plans a design (`upper_sd`).

``python -m bandpo.stats.plan --sd SD`` prints a design's plan (the smallest n_max that meets its power at SD unless
``--n-max`` fixes it). Seeded: the same numbers on every machine.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from scipy.stats import chi2

from bandpo.stats.design import ALPHA, BETA, FUTILITY_SPENDING, SPENDING, SequentialDesign, boundaries, plan_design
from bandpo.stats.rule import POINTS
from bandpo.stats.simulate import (
    agreement,
    operating_characteristics,
)

SD_CONFIDENCE = 0.90  # the planning SD: this one-sided upper confidence bound of an estimated SD
DEFAULT_K = 5  # pairs per look


def upper_sd(sd: float, df: int, confidence: float = SD_CONFIDENCE) -> float:
    """The one-sided ``confidence`` upper bound of an SD estimated with ``df`` degrees of freedom (chi-square)."""
    return float(sd * math.sqrt(df / chi2.ppf(1.0 - confidence, df)))


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bandpo.stats.plan", description=__doc__.split("\n")[0])
    p = parser
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
