"""The leaderboard's experiments: one section per (experiment, subset), and each experiment's primary comparison.

An experiment (``experiments:`` of the workflow config; ``main`` is the sweep itself) is read from the files: the
``experiment`` of every evaluation summary and run folder (`bandpo.report.load`). Its scores are reported on their
own (statistics, baseline, P(improvement) within the experiment), once per ``subset`` when its tasks score parts of
the data (the probe's ``probe`` and ``rest``), so a row of the leaderboard is (experiment, subset, model, entry).

The primary comparison of an experiment (its config's ``primary``: ``compare: [treatment, control]``, the task and
score family) is paired, as the design is: seed s of both entries trains from base model s with seed s, so the
unit is the per-seed difference treatment - control; its mean with the 95% paired t interval decides
(`primary_results`). A descriptive experiment whose ``primary`` reads ``score: entropy`` (the random-reward
control) has no treatment and control: each run's final token entropy is paired with its own entropy at step 1
(the base model's: the rollout policy of step 1), the same way (`entropy_shift_results`).

Both also give, as a secondary and descriptive column, the rule the first published run was fixed with (before
issue #21): the difference of the seed means with a 95% percentile-bootstrap interval that resamples each side's
seeds independently (``bootstrap_ci_low``, ``bootstrap_ci_high``, ``bootstrap_verdict``); it ignores the pairing and
is too narrow at 3-5 seeds (docs/statistics.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from bandpo.config.sweep import MAIN
from bandpo.report.stats import (
    SCORE_DIFF_RANGE,
    bootstrap_ci,
    mean_of_means,
    minimum_detectable_difference,
    score_stats,
    seeded_rng,
    t_interval,
)
from bandpo.report.tables import entry_graders, entry_labels, leaderboard
from bandpo.report.training import run_stats

SECTION_KEYS = ["experiment", "subset"]
PRIMARY_COLUMNS = ["experiment", "model", "task", "metric", "treatment", "control", "n_treatment", "n_control",
                   "n_pairs", "treatment_mean", "control_mean", "difference", "ci_low", "ci_high", "mde", "verdict",
                   "bootstrap_ci_low", "bootstrap_ci_high", "bootstrap_verdict"]  # fmt: skip
NO_INTERVAL = "no interval (fewer than 2 pairs)"


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


def _verdict(lo: float, hi: float, above: str, below: str, neither: str, missing: str = NO_INTERVAL) -> str:
    """The rule's verdict from an interval: ``above`` if it lies above 0, ``below`` if below, else ``neither``;
    ``missing`` without an interval."""
    if np.isnan(lo) or np.isnan(hi):
        return missing
    return above if lo > 0 else (below if hi < 0 else neither)


def paired_rule(
    treatment: pd.Series, control: pd.Series, confidence: float = 0.95, bounds: tuple[float, float] = SCORE_DIFF_RANGE
) -> dict[str, Any]:
    """The paired primary rule on per-seed values (indexed by seed; seed s of both sides trained from base model s
    with seed s): the differences treatment_s - control_s over the seeds both have, their mean and its 95% paired t
    interval (`t_interval`, cut to ``bounds``). Returns n_pairs, treatment_mean and control_mean (over the paired
    seeds, so that difference = treatment_mean - control_mean), difference, ci_low, ci_high, and mde: the
    minimum detectable difference of this paired t test at 80% power (`minimum_detectable_difference`, exact
    noncentral t), with the SD of these few differences standing in for the true one."""
    seeds = sorted(set(treatment.index) & set(control.index))
    x = treatment.loc[seeds].to_numpy(np.float64)
    y = control.loc[seeds].to_numpy(np.float64)
    d = x - y
    lo, hi = t_interval(d, confidence, bounds)
    nan = float("nan")
    return {
        "n_pairs": len(seeds),
        "treatment_mean": float(x.mean()) if seeds else nan,
        "control_mean": float(y.mean()) if seeds else nan,
        "difference": float(d.mean()) if seeds else nan,
        "ci_low": lo,
        "ci_high": hi,
        "mde": minimum_detectable_difference(float(np.std(d, ddof=1)), len(seeds)) if len(seeds) >= 2 else nan,
    }


def primary_results(
    scores: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Each experiment's primary comparison, per model: ``specs`` maps an experiment to its config (``primary``:
    ``compare: [treatment, control]``, ``task`` (default: every task of the experiment, averaged per seed),
    ``score`` (a metric family, default ``mean``: mean@k at the largest k)). The rule is paired (`paired_rule`):
    the mean over seeds of treatment_s - control_s with its 95% paired t interval, and the verdict it fixes:
    ``treatment better`` (interval above 0), ``control better`` (below 0), else ``unresolved``; seeds only one
    side has are left out (n_treatment, n_control and n_pairs show them). Secondary: the difference of the two
    sides' seed means with a percentile-bootstrap interval resampling each side's seeds on their own
    (``bootstrap_*``, the rule before issue #21)."""
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
            tasks = sorted(g["task"].unique())
            # a seed's score: its mean over the tasks, for the seeds that have every one of them
            wide = g.pivot_table(index=["entry", "seed"], columns="task", values="value", aggfunc="mean")
            per_seed = wide.reindex(columns=tasks).dropna().mean(axis=1)
            arms = [per_seed.xs(e, level="entry") if e in per_seed.index.get_level_values("entry")
                    else pd.Series(dtype=float) for e in compare]  # fmt: skip
            if any(a.empty for a in arms):
                continue
            rule = paired_rule(arms[0], arms[1], confidence)
            better = (f"{compare[0]} better", f"{compare[1]} better", "unresolved")
            verdict = _verdict(rule["ci_low"], rule["ci_high"], *better)
            values = [a.to_numpy(np.float64) for a in arms]
            rng = seeded_rng(seed, "primary", xp, model)
            b_lo, b_hi = bootstrap_ci(values, _diff_of_means, n_resamples, rng, confidence)
            b_verdict = _verdict(b_lo, b_hi, *better, missing="no interval")
            k = g["k"].max()
            metric = f"{family}@{int(k)}" if k == k else family
            rows.append({"experiment": xp, "model": model, "task": primary.get("task") or ",".join(tasks),
                         "metric": metric, "treatment": compare[0], "control": compare[1],
                         "n_treatment": len(values[0]), "n_control": len(values[1]), **rule, "verdict": verdict,
                         "bootstrap_ci_low": b_lo, "bootstrap_ci_high": b_hi,
                         "bootstrap_verdict": b_verdict})  # fmt: skip
    return pd.DataFrame(rows, columns=PRIMARY_COLUMNS)


ENTROPY = "entropy"  # primary ``score`` of a descriptive experiment read from training, not from lm-eval


def entropy_pair_results(
    per_run: pd.DataFrame, specs: Mapping[str, Mapping[str, Any]], confidence: float = 0.95
) -> pd.DataFrame:
    """The secondary rows of an experiment whose ``primary`` names ``entropy_compare: [entry, ...]``: per model and
    entry, the paired difference of final token entropy (``entropy_final``, mean over the last 10% of steps) from
    the primary's control (same base model and seed), with its 95% paired t interval and MDE (`paired_rule`), in
    nats. Rows have `PRIMARY_COLUMNS`, metric ``entropy_final``; verdict ``higher entropy`` / ``lower entropy`` /
    ``unresolved``."""
    rows = []
    for xp, spec in specs.items():
        primary = (spec or {}).get("primary") or {}
        arms, compare = primary.get("entropy_compare") or [], primary.get("compare") or []
        xr = of_experiment(per_run, xp)
        if not arms or len(compare) < 2 or xr.empty:
            continue
        control = compare[1]
        for model, gm in xr.dropna(subset=["entropy_final"]).groupby("model", sort=True):
            ctrl = gm[gm["entry"] == control].set_index("seed")["entropy_final"]
            for arm in arms:
                runs = gm[gm["entry"] == arm].set_index("seed")["entropy_final"]
                if runs.empty or ctrl.empty:
                    continue
                rule = paired_rule(runs, ctrl, confidence, (-np.inf, np.inf))
                verdict = _verdict(rule["ci_low"], rule["ci_high"], "higher entropy", "lower entropy", "unresolved")
                rows.append({"experiment": xp, "model": model, "task": "", "metric": "entropy_final",
                             "treatment": arm, "control": control, "n_treatment": len(runs), "n_control": len(ctrl),
                             **rule, "verdict": verdict, "bootstrap_ci_low": np.nan, "bootstrap_ci_high": np.nan,
                             "bootstrap_verdict": ""})  # fmt: skip
    return pd.DataFrame(rows, columns=PRIMARY_COLUMNS)


def entropy_shift_results(
    per_run: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """The rule of an experiment whose ``primary`` has ``score: entropy``, read from the per-run statistics
    (`build_sections`' third frame, ``runs.csv``), paired within each run: per (model, entry), each seed's final
    token entropy (``entropy_final``: mean over the last 10% of its steps) minus its own entropy at step 1
    (``entropy_first``: the base model's, since the rollout policy of step 1 is the base model), the mean of these
    differences with its 95% paired t interval (`paired_rule`). ``entropy rises`` if the interval lies above 0,
    ``entropy falls`` if below, else ``unmoved``. Rows have `PRIMARY_COLUMNS`: treatment = the entry, control =
    ``step 1``, treatment_mean / control_mean = mean final / step-1 entropy of its runs, difference and interval in
    nats. Secondary (``bootstrap_*``, the rule before issue #21): the percentile-bootstrap interval of the mean
    final entropy against the step-1 entropy averaged over every run of the experiment on that model, as a
    difference."""
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
                runs = ge.set_index("seed").sort_index()
                rule = paired_rule(runs["entropy_final"], runs["entropy_first"], confidence, (-np.inf, np.inf))
                verdict = _verdict(rule["ci_low"], rule["ci_high"], "entropy rises", "entropy falls", "unmoved")
                final = runs["entropy_final"].to_numpy(np.float64)
                rng = seeded_rng(seed, "entropy", xp, model, entry)
                lo, hi = bootstrap_ci([final], mean_of_means, n_resamples, rng, confidence)
                b_verdict = _verdict(lo - reference, hi - reference, "entropy rises", "entropy falls", "unmoved",
                                     "no interval")  # fmt: skip
                rows.append({"experiment": xp, "model": model, "task": "", "metric": "entropy_final",
                             "treatment": entry, "control": "step 1", "n_treatment": len(runs),
                             "n_control": len(runs), **rule, "verdict": verdict,
                             "bootstrap_ci_low": lo - reference, "bootstrap_ci_high": hi - reference,
                             "bootstrap_verdict": b_verdict})  # fmt: skip
    return pd.DataFrame(rows, columns=PRIMARY_COLUMNS)
