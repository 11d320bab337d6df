"""The plan of the verdict rule's designs from the three publications of one design (docs/statistics.md, "The
verdict rule and seeds until decided"): the paired differences of each primary read from the publications' per-seed
scores in git history (`publication_differences`), the planning SD per setting (the one-sided 90% upper confidence
bound of the pooled SD, `planning_sds`), each setting's design (`bandpo.verdict.design.plan_design`) with its
simulated error rates, expected pairs and the stability of each published primary (`bandpo.verdict.simulate`), and
the generated block of docs/statistics.md (`plan_body`).

``python -m bandpo.analysis.sequential plan`` prints a design's table; ``plan --from-publications`` the block of
docs/statistics.md. Seeded: the same numbers on every machine.
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

from bandpo.verdict.design import ALPHA, BETA, FUTILITY_SPENDING, SPENDING, SequentialDesign, boundaries, plan_design
from bandpo.verdict.rule import BETTER, NOT_BETTER, POINTS, UNDECIDED, single_look_n
from bandpo.verdict.simulate import (
    agreement,
    bootstrap_stability,
    fixed_n_stability,
    operating_characteristics,
    stability,
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
BLOCK = "sequential-plan"  # the generated block of docs/statistics.md
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


def _pts(x: float, digits: int = 2) -> str:
    return f"{x * POINTS:.{digits}f}"


def _pct(x: float) -> str:
    return f"{x:.3f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
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
    return _table(header, rows, "rrrrrrrr")


def plan_lines(design: SequentialDesign, deltas: Sequence[float], sds: Sequence[float], reps: int, seed: int) -> list:
    """A design's plan: its parameters, boundaries, and the simulated P(better), expected pairs and stability of
    the t procedure at each Δ (points) and SD (fractions)."""
    lines = [
        f"Design: one-sided α = {design.alpha:g} at Δ = 0, power {1 - design.beta:g} at Δ = δ = "
        f"{design.margin * POINTS:g} points with planning SD {_pts(design.planning_sd)} points; a look every "
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
            rows.append([_pts(sd), f"{delta:+g}", _pct(oc.p_better), f"{oc.expected_n:.1f}",
                         _pct(agreement(oc.p_better, reps))])  # fmt: skip
    header = ["SD (points)", "true Δ (points)", "P(better)", "expected pairs", "stability"]
    return lines + _table(header, rows, "rrrrr")


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


def plan_body(repo: str | Path = ".", k: int = DEFAULT_K, reps: int = 40_000, seed: int = 0) -> str:
    """The body of docs/statistics.md's block ``sequential-plan`` ("The verdict rule and seeds until decided"): the
    SDs the three publications measured, each setting's design at its planning SD with its simulated error rates,
    expected pairs and training cost, the headline's boundaries, each primary's stability at its observed mean and
    SD, the stability over the true difference, and what the pairs run so far reach at a fixed n."""
    diffs = publication_differences(repo)
    plans = planning_sds(diffs).set_index("setting")
    costs = publication_costs(repo).groupby("setting", sort=False)["cpu_min"].agg(["min", "max"])
    margin = 2.0 / POINTS
    out = []
    # 1. the SDs measured
    rows = []
    for (c, primary), g in diffs.groupby(["publication", "primary"], sort=False):
        d = g["diff"].to_numpy()
        rows.append([f"`{c}`", primary, str(d.size), _pts(d.mean()), _pts(d.std(ddof=1))])
    out += ["The paired differences (BandPO-KL − GRPO, final mean@8, points) in each publication:", ""]
    out += _table(["publication", "primary", "pairs", "mean", "SD"], rows, "llrrr") + [""]
    cols = ["pooled_mean", "pooled_sd", "largest_sd", "planning_sd"]
    rows = [[st, f"{p['samples']:.0f}", f"{p['df']:.0f}", *(_pts(p[c]) for c in cols)] for st, p in plans.iterrows()]
    out += [f"Pooled per setting (planning SD: the one-sided {SD_CONFIDENCE:.0%} upper confidence bound):", ""]
    header = ["setting", "samples", "df", "pooled mean", "pooled SD", "largest SD", "planning SD"]
    out += _table(header, rows, "lrrrrrr") + [""]
    # 2. a design per setting; its operating characteristics and cost
    designs = {st: plan_design(margin, k, p["planning_sd"]) for st, p in plans.iterrows()}
    rows = []
    for st, p in plans.iterrows():
        des = designs[st]
        oc0 = operating_characteristics(des, 0.0, des.planning_sd, reps, seed)
        ocd = operating_characteristics(des, margin, des.planning_sd, reps, seed)
        ocw = operating_characteristics(des, margin, p["largest_sd"], reps, seed)
        oco = operating_characteristics(des, p["pooled_mean"], p["pooled_sd"], reps, seed)
        lo, hi = costs.loc[st, "min"], costs.loc[st, "max"]
        rows.append([st, str(des.n_max), _pct(oc0.p_better), _pct(1 - ocd.p_better), _pct(1 - ocw.p_better),
                     f"{oc0.expected_n:.1f}", f"{ocd.expected_n:.1f}", f"{oco.expected_n:.1f}",
                     f"{lo:.1f}–{hi:.1f}", f"{des.n_max * lo:.0f}–{des.n_max * hi:.0f}"])  # fmt: skip
    header = ["setting", "n_max", "α (Δ = 0)", "β (Δ = δ)", "β at largest SD", "pairs at Δ = 0", "pairs at Δ = δ",
              "pairs at pooled mean, SD", "CPU-min a pair", "CPU-min at n_max"]  # fmt: skip
    out += [f"Each setting's design (k = {k}; n_max the smallest that meets at the planning SD), simulated "
            f"({reps} runs a cell; training CPU-minutes of one pair in the three publications):", ""]  # fmt: skip
    out += _table(header, rows, "lrrrrrrrrr") + [""]
    head = designs[HEADLINE_SETTING]
    out += [f"The headline's boundaries ({HEADLINE_SETTING}):", ""] + boundaries_table(head) + [""]
    # 3. stability at the observed mean and SD of each primary and publication, and pooled
    rows = []
    groups = [((c, pr), g) for (c, pr), g in diffs.groupby(["publication", "primary"], sort=False)]
    groups += [((c, POOLED), diffs[(diffs["publication"] == c) & (diffs["setting"] == HEADLINE_SETTING)])
               for c in PUBLICATIONS]  # fmt: skip
    for (c, primary), g in groups:
        d = g["diff"].to_numpy()
        des = designs[PRIMARIES[primary][0] if primary in PRIMARIES else HEADLINE_SETTING]
        st = stability(des, float(d.mean()), float(d.std(ddof=1)), d.size, reps, seed)
        bs = bootstrap_stability(des, d, reps, seed)
        rows.append([f"`{c}`", primary, str(d.size), _pts(d.mean()), _pts(d.std(ddof=1)), _pct(st.p_better),
                     f"{st.expected_n:.1f}", _pct(st.stability), _pct(bs.stability), _pct(st.predictive)])  # fmt: skip
    header = ["publication", "primary", "pairs", "mean", "SD", "P(better)", "expected pairs", "stability",
              "bootstrap", "predictive"]  # fmt: skip
    out += ["Stability of each primary's verdict under its setting's design, from its observed mean and SD:", ""]
    out += _table(header, rows, "llrrrrrrrr") + [""]
    # 4. the stability over the true Δ at the headline's planning SD
    rows = []
    for delta in DELTA_GRID:
        oc = operating_characteristics(head, delta / POINTS, head.planning_sd, reps, seed)
        rows.append([f"{delta:+g}", _pct(oc.p_better), f"{oc.expected_n:.1f}", _pct(agreement(oc.p_better, reps))])
    out += [f"The headline's design over the true Δ at its planning SD ({_pts(head.planning_sd)} points):", ""]
    out += _table(["true Δ (points)", "P(better)", "expected pairs", "stability"], rows, "rrrr") + [""]
    # 5. what a fixed n reaches (the pairs each setting's primary ran in the publications)
    rows, words = [], (BETTER, NOT_BETTER, UNDECIDED)
    for st, p in plans.iterrows():
        n = int(diffs[diffs["setting"] == st].groupby(["publication", "primary"]).size().min())
        stab, probs = fixed_n_stability(p["pooled_mean"], p["pooled_sd"], n, margin, reps=reps, rng=seed)
        rows.append([st, str(n), _pts(p["pooled_mean"]), _pts(p["pooled_sd"]), *(_pct(probs[w]) for w in words),
                     _pct(stab), str(single_look_n(p["pooled_sd"], margin))])  # fmt: skip
    header = ["setting", "pairs", "pooled mean", "pooled SD", "P(better)", "P(not better)", "P(undecided)",
              "stability", "single look decides from"]  # fmt: skip
    out += ["A single look at the pairs each primary ran (`fixed_n_decision`), at the pooled mean and SD:", ""]
    out += _table(header, rows, "lrrrrrrrr")
    return "\n".join(out)


def publication_plan(repo: str | Path = ".", k: int = DEFAULT_K, reps: int = 40_000, seed: int = 0) -> str:
    """`plan_body` between the block's markers, as docs/statistics.md holds it."""
    return f"<!-- generated:{BLOCK} -->\n{plan_body(repo, k, reps, seed)}\n<!-- /generated:{BLOCK} -->"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bandpo.analysis.sequential", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="print a design's boundaries, error rates, expected pairs and stability")
    p.add_argument(
        "--from-publications",
        action="store_true",
        help="plan from the three publications' scores (git history): docs/statistics.md's block",
    )
    p.add_argument("--repo", default=".", help="the repository whose history holds the publications")
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
        if args.from_publications:
            print(publication_plan(args.repo, args.k, args.reps, args.seed))
            return 0
        if args.sd is None:
            parser.error("--sd is needed without --from-publications")
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
