"""The leaderboard's experiments: one section per (experiment, subset), and each experiment's primary comparison.

An experiment (``experiments:`` of the workflow config; ``main`` is the sweep itself) is read from the files: the
``experiment`` of every evaluation summary and run folder (`bandpo.report.load`). Its scores are reported on their
own (statistics, baseline, P(improvement) within the experiment), once per ``subset`` when its tasks score parts of
the data (the probe's ``probe`` and ``rest``), so a row of the leaderboard is (experiment, subset, model, entry).

The primary comparison of an experiment (its config's ``primary``: ``compare: [treatment, control]``, the task and
score family) is the difference of the two entries' means over seeds of the final score, with a 95% percentile-
bootstrap interval that resamples each entry's seeds independently (`primary_results`). A descriptive experiment
whose ``primary`` reads ``score: entropy`` (the random-reward control) has no treatment and control: each entry's
final token entropy is set against the base model's entropy at step 1 (`entropy_shift_results`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from bandpo.report.stats import bootstrap_ci, mean_of_means, run_stats, score_stats, seeded_rng
from bandpo.report.tables import entry_graders, entry_labels, leaderboard
from bandpo.sweep import MAIN

SECTION_KEYS = ["experiment", "subset"]
PRIMARY_COLUMNS = ["experiment", "model", "task", "metric", "treatment", "control", "n_treatment", "n_control",
                   "treatment_mean", "control_mean", "difference", "ci_low", "ci_high", "verdict"]  # fmt: skip


def experiment_order(*frames: pd.DataFrame) -> list[str]:
    """Experiments present in the frames: main first, then by name."""
    names = set()
    for f in frames:
        if "experiment" in f and not f.empty:
            names |= set(f["experiment"].fillna(MAIN).astype(str))
    return sorted(names, key=lambda x: (x != MAIN, x))


def of_experiment(frame: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """The rows of one experiment (a frame without the column: all its rows are main's)."""
    if frame.empty or "experiment" not in frame:
        return frame.iloc[0:0] if experiment != MAIN else frame
    return frame[frame["experiment"].fillna(MAIN) == experiment]


def build_sections(
    scores: pd.DataFrame,
    metrics: pd.DataFrame,
    summaries: pd.DataFrame,
    baseline: str | None,
    n_resamples: int,
    confidence: float,
    seed: int,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(leaderboard, stats, per-run stats) over every experiment, each computed within its (experiment, subset)
    and led by the columns ``experiment`` and ``subset`` ("" when the tasks score the whole data)."""
    boards, stats_all, runs_all = [], [], []
    for xp in experiment_order(scores, metrics, summaries):
        xs, xm, xsum = of_experiment(scores, xp), of_experiment(metrics, xp), of_experiment(summaries, xp)
        per_run, per_entry = run_stats(xm, xsum, confidence)
        subsets = sorted(set(xs["subset"].astype(object).fillna(""))) if "subset" in xs and not xs.empty else [""]
        for subset in subsets:
            ss = xs[xs["subset"].astype(object).fillna("") == subset] if "subset" in xs else xs
            st = score_stats(ss, baseline, n_resamples, confidence, seed)
            board = leaderboard(st, per_entry, per_run, entry_labels(xsum), entry_graders(ss))
            for frame in (board, st):
                if not frame.empty:
                    frame.insert(0, "subset", subset)
                    frame.insert(0, "experiment", xp)
            boards.append(board)
            stats_all.append(st)
        if not per_run.empty:
            per_run.insert(0, "experiment", xp)
        runs_all.append(per_run)
    return _concat(boards), _concat(stats_all), _concat(runs_all)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()


def _diff_of_means(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def primary_results(
    scores: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Each experiment's primary comparison, per model: ``specs`` maps an experiment to its config (``primary``:
    ``compare: [treatment, control]``, ``task`` (default: every task of the experiment, averaged per seed),
    ``score`` (a metric family, default ``mean``: mean@k at the largest k)). Difference treatment - control of
    the means over seeds, its bootstrap CI (seeds resampled within each entry), and the verdict the rule fixes:
    ``treatment better`` (CI above 0), ``control better`` (CI below 0), else ``unresolved``."""
    rows = []
    for xp, spec in specs.items():
        primary = (spec or {}).get("primary") or {}
        compare = primary.get("compare")
        if not compare or primary.get("score") == ENTROPY:
            continue
        xs = of_experiment(scores, xp)
        family = primary.get("score", "mean")
        xs = xs[xs["metric"] == family] if not xs.empty else xs
        if primary.get("task"):
            xs = xs[xs["task"] == primary["task"]]
        if xs.empty:
            continue
        xs = xs[xs["k"] == xs.groupby("task")["k"].transform("max")]
        for model, g in xs.groupby("model", sort=True):
            per_seed = g.groupby(["entry", "seed"])["value"].mean()
            arms = [per_seed.get(e, pd.Series(dtype=float)).to_numpy(np.float64) for e in compare]
            if any(a.size == 0 for a in arms):
                continue
            diff = float(arms[0].mean() - arms[1].mean())
            lo, hi = bootstrap_ci(arms, _diff_of_means, n_resamples, seeded_rng(seed, "primary", xp, model), confidence)
            verdict = "unresolved"
            if lo > 0:
                verdict = f"{compare[0]} better"
            elif hi < 0:
                verdict = f"{compare[1]} better"
            k = g["k"].max()
            task = primary.get("task") or ",".join(sorted(g["task"].unique()))
            metric = f"{family}@{int(k)}" if k == k else family
            rows.append([xp, model, task, metric, compare[0], compare[1], arms[0].size, arms[1].size,
                         float(arms[0].mean()), float(arms[1].mean()), diff, lo, hi, verdict])  # fmt: skip
    return pd.DataFrame(rows, columns=PRIMARY_COLUMNS)


ENTROPY = "entropy"  # primary ``score`` of a descriptive experiment read from training, not from lm-eval


def entropy_shift_results(
    per_run: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """The rule of an experiment whose ``primary`` has ``score: entropy``, read from the per-run statistics
    (`build_sections`' third frame, ``runs.csv``): per (model, entry), the final token entropy of each seed's run
    (``entropy_final``: mean over the last 10% of its steps) and the 95% percentile-bootstrap CI of their mean,
    against the reference: the base model's entropy at step 1 (``entropy_first``: the rollout policy of step 1 is
    the base model), averaged over every run of the experiment on that model. ``entropy rises`` if the CI lies above
    the reference, ``entropy falls`` if below, else ``unmoved``. Rows have `PRIMARY_COLUMNS`: treatment = the entry,
    control = ``step 1``, difference and CI = final entropy minus the reference (nats), n_control = runs averaged
    into the reference."""
    rows = []
    for xp, spec in specs.items():
        primary = (spec or {}).get("primary") or {}
        if primary.get("score") != ENTROPY:
            continue
        xr = of_experiment(per_run, xp)
        if xr.empty or "entropy_first" not in xr:
            continue
        xr = xr.dropna(subset=["entropy_first", "entropy_final"])
        for model, gm in xr.groupby("model", sort=True):
            reference = float(gm["entropy_first"].mean())
            for entry, ge in gm.groupby("entry", sort=True):
                final = ge.sort_values("seed")["entropy_final"].to_numpy(np.float64)
                rng = seeded_rng(seed, "entropy", xp, model, entry)
                lo, hi = bootstrap_ci([final], mean_of_means, n_resamples, rng, confidence)
                verdict = "unmoved"
                if np.isnan(lo):
                    verdict = "no interval (fewer than 2 seeds)"
                elif lo > reference:
                    verdict = "entropy rises"
                elif hi < reference:
                    verdict = "entropy falls"
                rows.append([xp, model, "", "entropy_final", entry, "step 1", final.size, len(gm),
                             float(final.mean()), reference, float(final.mean()) - reference, lo - reference,
                             hi - reference, verdict])  # fmt: skip
    return pd.DataFrame(rows, columns=PRIMARY_COLUMNS)
