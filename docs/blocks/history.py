"""This publication's history, the input of docs/statistics.md's plan of the verdict rule's designs ("The verdict
rule and seeds until decided"): the three publications of one design, their primaries, the paired differences of
each read from the publications' per-seed scores in git history (`publication_differences`), the planning SD per
setting (`planning_sds`: the one-sided upper confidence bound of the pooled SD, `bandpo.stats.plan.upper_sd`) and
their training cost (`publication_costs`). The block that writes them is `docs.blocks.designs.sequential_plan`.
"""

from __future__ import annotations

import io
import math
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from bandpo.stats.plan import upper_sd

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
