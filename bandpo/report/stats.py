"""Statistics of the report (rliable-style, Agarwal et al. 2021, computed with scipy; all resampling seeded).

Pure functions of frames and arrays: nothing here reads or writes files.

For a (model, entry) and a metric, the unit is one seed's score on one task. Over tasks (``task == "all"``):

* **mean**: mean over tasks of the mean over seeds; 95% CI by the percentile bootstrap, stratified by task (the
  seeds are resampled within each task: `scipy.stats.bootstrap` with one sample per task).
* **IQM**: interquartile mean of all (seed, task) scores, ``scipy.stats.trim_mean(x, 0.25)``; same bootstrap.
  With fewer than 4 scores nothing is trimmed and the IQM equals the mean.
* **P(improvement) over the baseline** (``grpo`` by default): per task, the mean over all pairs (seed of the entry,
  seed of the baseline) of 1[x > y] + 1/2 1[x = y], averaged over tasks; CI by resampling both sets of seeds
  independently within each task.
* training columns: final token entropy / reward (mean over the last 10% of steps of a run, then over seeds, with
  a bootstrap CI), clip fraction (off-policy updates when logged), training time per run and summed over seeds.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

DEFAULT_BASELINE = "grpo"
HEADLINE = ("mean", "pass", "maj", "best_bootstrap")  # metric families of the leaderboard, at k = n samples
ALL_TASKS = "all"
FINAL_FRACTION = 0.1  # "final" training statistics: mean over the last 10% of a run's steps


def metric_label(family: str, k: Any) -> str:
    """lm-eval's metric name from (family, k): ("pass", 8) -> "pass@8", ("best_bootstrap", 8) -> "best@8_bootstrap"."""
    k_str = "n" if k is None or (isinstance(k, float) and math.isnan(k)) else str(int(k))
    head, _, tail = family.partition("_")
    return f"{head}@{k_str}" + (f"_{tail}" if tail else "")


def seeded_rng(seed: int, *key: Any) -> np.random.Generator:
    """A generator that depends only on (seed, key): a row's CI does not change when other rows are added."""
    h = zlib.crc32(json.dumps([str(k) for k in key]).encode("utf-8"))
    return np.random.default_rng([int(seed), h])


def bootstrap_ci(
    samples: Sequence[np.ndarray],
    statistic: Callable[..., np.ndarray],
    n_resamples: int,
    rng: np.random.Generator,
    confidence: float,
) -> tuple[float, float]:
    """Percentile-bootstrap CI of ``statistic`` over independent samples (strata), resampled each within itself.
    NaN when resampling is off or a stratum has fewer than 2 observations (one seed has no spread to resample)."""
    if n_resamples <= 0 or not samples or any(len(s) < 2 for s in samples):
        return float("nan"), float("nan")
    from scipy.stats import bootstrap

    res = bootstrap(
        tuple(np.asarray(s, dtype=np.float64) for s in samples),
        statistic,
        n_resamples=n_resamples,
        vectorized=True,
        axis=-1,
        method="percentile",
        confidence_level=confidence,
        rng=rng,
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def mean_of_means(*strata: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean([np.mean(s, axis=axis) for s in strata], axis=0)


def iqm(*strata: np.ndarray, axis: int = -1) -> np.ndarray:
    from scipy.stats import trim_mean

    return trim_mean(np.concatenate(strata, axis=axis), 0.25, axis=axis)


def _poi_pairs(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mean over all pairs of 1[x > y] + 1/2 1[x = y], over the last axis of each (batch dims broadcast)."""
    xx, yy = x[..., :, None], y[..., None, :]
    return (xx > yy).mean(axis=(-2, -1)) + 0.5 * (xx == yy).mean(axis=(-2, -1))


def _poi_stat(*xy: np.ndarray, axis: int = -1) -> np.ndarray:
    xy = tuple(np.moveaxis(a, axis, -1) for a in xy)
    return np.mean([_poi_pairs(x, y) for x, y in zip(xy[0::2], xy[1::2], strict=True)], axis=0)


def probability_of_improvement(
    x: Mapping[str, Sequence[float]] | Sequence[float],
    y: Mapping[str, Sequence[float]] | Sequence[float],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    rng: np.random.Generator | int = 0,
) -> tuple[float, float, float]:
    """P(X > Y) of the scores ``x`` (an entry's seeds) against ``y`` (the baseline's), with a bootstrap CI.

    Per task (give dicts task -> scores, or two sequences for one task): the mean over all seed pairs of
    1[x > y] + 1/2 1[x = y]; averaged over the tasks both have. Returns (estimate, ci_low, ci_high)."""
    if not isinstance(x, Mapping):
        x, y = {"_": x}, {"_": y}
    tasks = [t for t in x if t in y and len(x[t]) and len(y[t])]
    if not tasks:
        return float("nan"), float("nan"), float("nan")
    samples = [np.asarray(s, dtype=np.float64) for t in tasks for s in (x[t], y[t])]
    estimate = float(_poi_stat(*samples))
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return (estimate, *bootstrap_ci(samples, _poi_stat, n_resamples, rng, confidence))


def _baseline_entry(scores: pd.DataFrame, baseline: str | None) -> str | None:
    """The entry the P(improvement) compares with: the entry named ``baseline`` if there is one, else the only
    entry whose method is ``baseline`` (e.g. entry "grpo_eps02" of method "grpo"), else None."""
    if not baseline:
        return None
    entries = set(scores["entry"])
    if baseline in entries:
        return baseline
    by_method = sorted(set(scores.loc[scores["method"] == baseline, "entry"]))
    return by_method[0] if len(by_method) == 1 else None


def score_stats(
    scores: pd.DataFrame,
    baseline: str | None = DEFAULT_BASELINE,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Statistics of the evaluation scores (`load_eval_scores`), one row per (model, entry, task, metric, k).

    ``task`` is each task and ``"all"``: the aggregate over tasks of every headline metric (mean@n, pass@n, maj@n,
    best@n_bootstrap, where n is the task's sample count), stratified by task. Columns: profile, model, entry,
    method, params, task, metric, k, label, n_seeds, mean, ci_low, ci_high, iqm, iqm_ci_low, iqm_ci_high, poi,
    poi_ci_low, poi_ci_high, baseline. ``poi`` is P(entry > baseline) and NaN in the baseline's own row."""
    columns = [
        "profile",
        "model",
        "entry",
        "method",
        "params",
        "task",
        "metric",
        "k",
        "label",
        "n_seeds",
        "mean",
        "ci_low",
        "ci_high",
        "iqm",
        "iqm_ci_low",
        "iqm_ci_high",
        "poi",
        "poi_ci_low",
        "poi_ci_high",
        "baseline",
    ]
    if scores.empty:
        return pd.DataFrame(columns=columns)
    scores = scores.copy()
    # n = samples per problem; when a summary does not say, the largest pass@k of that run and task
    n = scores["n"].astype(float)
    largest_k = (
        scores["k"]
        .where(scores["metric"] == "pass")
        .groupby([scores["model"], scores["entry"], scores["seed"], scores["task"]])
        .transform("max")
    )
    n = n.fillna(largest_k.astype(float))
    headline = scores["metric"].isin(HEADLINE) & ((scores["metric"] != "pass") | (scores["k"].astype(float) == n))
    # group_k: the metric's k within a task; -2 over tasks, where each task contributes its k = n
    per_task = scores.assign(group_task=scores["task"], group_k=scores["k"].astype(float).fillna(-1.0))
    overall = scores[headline].assign(group_task=ALL_TASKS, group_k=-2.0)
    data = pd.concat([per_task, overall], ignore_index=True)
    ident = scores.groupby(["model", "entry"], sort=False)[["profile", "method", "params"]].first()

    rows = []
    for model, frame in data.groupby("model", sort=True):
        base_entry = _baseline_entry(frame, baseline)
        for (entry, task, metric, k_key), g in frame.groupby(["entry", "group_task", "metric", "group_k"], sort=True):
            strata = {t: gt["value"].to_numpy(np.float64) for t, gt in g.groupby("task", sort=True)}
            samples = list(strata.values())
            key = (model, entry, task, metric, k_key)
            mean = float(mean_of_means(*samples))
            lo, hi = bootstrap_ci(samples, mean_of_means, n_resamples, seeded_rng(seed, "mean", *key), confidence)
            iqm_value = float(iqm(*samples))
            iqm_lo, iqm_hi = bootstrap_ci(samples, iqm, n_resamples, seeded_rng(seed, "iqm", *key), confidence)
            poi = (float("nan"),) * 3
            if base_entry is not None and entry != base_entry:
                ref = frame[
                    (frame["entry"] == base_entry)
                    & (frame["group_task"] == task)
                    & (frame["metric"] == metric)
                    & (frame["group_k"] == k_key)
                ]
                if not ref.empty:
                    y = {t: gt["value"].to_numpy(np.float64) for t, gt in ref.groupby("task", sort=True)}
                    poi = probability_of_improvement(strata, y, n_resamples, confidence, seeded_rng(seed, "poi", *key))
            ks = g["k"].dropna().unique()
            k = float(ks[0]) if len(ks) == 1 else float("nan")
            profile, method, params = ident.loc[(model, entry)]
            rows.append(
                {
                    "profile": profile,
                    "model": model,
                    "entry": entry,
                    "method": method,
                    "params": params,
                    "task": task,
                    "metric": metric,
                    "k": k,
                    "label": metric_label(metric, k),
                    "n_seeds": int(g["seed"].nunique()),
                    "mean": mean,
                    "ci_low": lo,
                    "ci_high": hi,
                    "iqm": iqm_value,
                    "iqm_ci_low": iqm_lo,
                    "iqm_ci_high": iqm_hi,
                    "poi": poi[0],
                    "poi_ci_low": poi[1],
                    "poi_ci_high": poi[2],
                    "baseline": base_entry,
                }
            )
    return pd.DataFrame(rows, columns=columns)


def _final_window(df: pd.DataFrame, column: str) -> float:
    values = df.sort_values("step")[column].dropna() if column in df else pd.Series(dtype=float)
    if values.empty:
        return float("nan")
    n = max(1, math.ceil(FINAL_FRACTION * len(values)))
    return float(values.iloc[-n:].mean())


def _clipfrac_column(metrics: pd.DataFrame) -> str | None:
    for name in ("offpolicy/clipfrac", "clipfrac"):
        if name in metrics and metrics[name].notna().any():
            return name
    return None


def run_stats(
    metrics: pd.DataFrame,
    summaries: pd.DataFrame,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training statistics. Returns (per_run, per_entry).

    per_run: one row per run with entropy_final, reward_final (mean over the last 10% of steps), clipfrac (mean
    over steps, off-policy updates when logged), train_seconds, steps. per_entry: one row per (model, entry) with
    n_runs, entropy_final (mean over seeds) and its CI, reward_final, clipfrac, train_seconds_mean (per run) and
    train_seconds_total (all seeds)."""
    run_cols = [
        "profile",
        "model",
        "entry",
        "method",
        "params",
        "seed",
        "steps",
        "entropy_final",
        "reward_final",
        "clipfrac",
        "train_seconds",
    ]
    entry_cols = [
        "model",
        "entry",
        "n_runs",
        "entropy_final",
        "entropy_final_ci_low",
        "entropy_final_ci_high",
        "reward_final",
        "clipfrac",
        "train_seconds_mean",
        "train_seconds_total",
    ]
    per_run = []
    clip_col = _clipfrac_column(metrics) if not metrics.empty else None
    info = summaries.set_index(["model", "entry", "seed"]) if not summaries.empty else None
    for (model, entry, seed_), g in metrics.groupby(["model", "entry", "seed"], sort=True):
        row = {
            "profile": g["profile"].iloc[0],
            "model": model,
            "entry": entry,
            "seed": int(seed_),
            "method": None,
            "params": None,
            "steps": int(g["step"].max()),
            "entropy_final": _final_window(g, "entropy"),
            "reward_final": _final_window(g, "reward_mean"),
            "clipfrac": float(g[clip_col].mean()) if clip_col else float("nan"),
            "train_seconds": float("nan"),
        }
        if info is not None and (model, entry, seed_) in info.index:
            s = info.loc[(model, entry, seed_)]
            row.update(method=s["method"], params=s["params"], train_seconds=s["train_seconds"])
        per_run.append(row)
    per_run_df = pd.DataFrame(per_run, columns=run_cols)
    per_entry = []
    for (model, entry), g in per_run_df.groupby(["model", "entry"], sort=True):
        ent = g["entropy_final"].dropna().to_numpy(np.float64)
        lo, hi = bootstrap_ci([ent], mean_of_means, n_resamples, seeded_rng(seed, "entropy", model, entry), confidence)
        secs = g["train_seconds"].dropna()
        per_entry.append(
            {
                "model": model,
                "entry": entry,
                "n_runs": len(g),
                "entropy_final": float(ent.mean()) if ent.size else float("nan"),
                "entropy_final_ci_low": lo,
                "entropy_final_ci_high": hi,
                "reward_final": float(g["reward_final"].mean()),
                "clipfrac": float(g["clipfrac"].mean()),
                "train_seconds_mean": float(secs.mean()) if len(secs) else float("nan"),
                "train_seconds_total": float(secs.sum()) if len(secs) else float("nan"),
            }
        )
    return per_run_df, pd.DataFrame(per_entry, columns=entry_cols)


def seed_bands(
    data: pd.DataFrame,
    by: Sequence[str],
    x: str,
    value: str = "value",
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Mean over seeds of ``value`` at each ``x`` within each ``by`` group, with a percentile-bootstrap CI over
    seeds: one vectorised `scipy.stats.bootstrap` per group (all x at once; x values where some seed has no value
    are bootstrapped on their own). Columns: *by, x, mean, ci_low, ci_high, n_seeds."""
    from scipy.stats import bootstrap

    rows = []
    for key, g in data.groupby(list(by), sort=True):
        key = key if isinstance(key, tuple) else (key,)
        wide = g.pivot_table(index="seed", columns=x, values=value, aggfunc="mean")
        mat = wide.to_numpy(np.float64)
        lo = np.full(mat.shape[1], np.nan)
        hi = np.full(mat.shape[1], np.nan)
        full = ~np.isnan(mat).any(axis=0)
        rng = seeded_rng(seed, "bands", *key)
        if n_resamples > 0 and mat.shape[0] >= 2 and full.any():
            res = bootstrap((mat[:, full],), np.mean, n_resamples=n_resamples, axis=0, vectorized=True,
                            method="percentile", confidence_level=confidence, rng=rng)  # fmt: skip
            lo[full], hi[full] = res.confidence_interval.low, res.confidence_interval.high
        for j in np.flatnonzero(~full):
            col = mat[:, j][~np.isnan(mat[:, j])]
            lo[j], hi[j] = bootstrap_ci([col], mean_of_means, n_resamples, rng, confidence)
        for j, xv in enumerate(wide.columns):
            col = mat[:, j][~np.isnan(mat[:, j])]
            rows.append((*key, xv, float(col.mean()), float(lo[j]), float(hi[j]), int(col.size)))
    return pd.DataFrame(rows, columns=[*by, x, "mean", "ci_low", "ci_high", "n_seeds"])
