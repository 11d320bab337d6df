"""Training statistics of the report, from every run's metrics.jsonl: final token entropy / reward / accuracy (the
mean over the last 10% of a run's steps, `FINAL_FRACTION`, then over seeds, with the Student-t interval over seeds),
clip fraction (off-policy updates when logged), training time per run and summed over seeds (`run_stats`), and the
per-step bands over seeds of the training curves (`seed_bands`). Pure functions of frames."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import bootstrap

from bandpo.analysis.scores import FINAL_FRACTION
from bandpo.stats.resample import bootstrap_ci, mean_of_means, seeded_rng
from bandpo.stats.rule import t_interval
from bandpo.study import MAIN


def _logged(df: pd.DataFrame, column: str) -> pd.Series:
    """A run's logged values of a training metric in step order (empty if it never logged one)."""
    return df.sort_values("step")[column].dropna() if column in df else pd.Series(dtype=float)


def first_value(df: pd.DataFrame, column: str) -> float:
    """A run's first logged value of a training metric (NaN if it never logged one)."""
    values = _logged(df, column)
    return float(values.iloc[0]) if not values.empty else float("nan")


def final_window(df: pd.DataFrame, column: str) -> float:
    """A run's final value of a training metric: the mean over its last 10% of steps (at least one)."""
    values = _logged(df, column)
    if values.empty:
        return float("nan")
    n = max(1, math.ceil(FINAL_FRACTION * len(values)))
    return float(values.iloc[-n:].mean())


def _clipfrac_column(metrics: pd.DataFrame) -> str | None:
    for name in ("offpolicy/clipfrac", "clipfrac"):
        if name in metrics and metrics[name].notna().any():
            return name
    return None


RARE_BUCKET = "p0.0-0.2"  # the lowest old-probability bucket (bandpo.methods.diagnostics.BUCKET_LABELS[0]): rare tokens


@dataclass(frozen=True)
class RunMetric:
    """One statistic of a training run, from one per-step metric of its metrics.jsonl (``source``): ``first`` (its
    first logged value), ``final`` (`final_window`: the mean over the last 10% of its steps) or ``mean`` (over all
    its steps: the area under the curve per step), in ``unit`` (``nats``, ``reward`` or ``fraction``). Declared once
    here; runs.csv, the axes' per-run outcomes and the secondaries that compare runs read it (`run_value`)."""

    name: str
    source: str
    aggregate: str
    unit: str


RUN_METRICS = {m.name: m for m in (
    RunMetric("entropy_first", "entropy", "first", "nats"),  # step 1's: the base model's
    RunMetric("entropy_final", "entropy", "final", "nats"),
    RunMetric("entropy_auc", "entropy", "mean", "nats"),
    RunMetric("reward_final", "reward_mean", "final", "reward"),  # the trainer's scale
    RunMetric("accuracy_final", "accuracy", "final", "fraction"),
    RunMetric("reward_auc", "reward_mean", "mean", "reward"),
    # the clip fractions at each bound, of the rare tokens (old probability < 0.2) and of all tokens
    RunMetric("clip_upper_low", f"clipfrac_upper/{RARE_BUCKET}", "mean", "fraction"),
    RunMetric("clip_lower_low", f"clipfrac_lower/{RARE_BUCKET}", "mean", "fraction"),
    RunMetric("clip_upper", "clipfrac_upper", "mean", "fraction"),
    RunMetric("clip_lower", "clipfrac_lower", "mean", "fraction"),
    # the shares of the tokens with a positive / negative advantage whose gradient the method stops (rare, all)
    RunMetric("stopped_pos_low", f"stopped_frac_pos/{RARE_BUCKET}", "mean", "fraction"),
    RunMetric("stopped_neg_low", f"stopped_frac_neg/{RARE_BUCKET}", "mean", "fraction"),
    RunMetric("stopped_pos", "stopped_frac_pos", "mean", "fraction"),
    RunMetric("stopped_neg", "stopped_frac_neg", "mean", "fraction"),
    RunMetric("approx_kl", "approx_kl", "mean", "nats"),  # the update's k3 estimate
)}  # fmt: skip


def run_value(g: pd.DataFrame, metric: RunMetric) -> float:
    """One run's value of ``metric`` from its per-step metrics ``g``; NaN when the run never logged the source."""
    if metric.aggregate == "first":
        return first_value(g, metric.source)
    if metric.aggregate == "final":
        return final_window(g, metric.source)
    return float(g[metric.source].mean()) if metric.source in g else float("nan")  # NaN steps skipped


# runs.csv's statistics of each run, in its column order (`RUN_METRICS`; clipfrac: `_clipfrac_column`)
RUN_STATS = ("entropy_first", "entropy_final", "entropy_auc", "reward_final", "accuracy_final", "clipfrac")
RUN_COLUMNS = ["profile", "model", "entry", "method", "params", "seed", "steps", *RUN_STATS, "train_seconds"]
RUN_KEYS = ["experiment", "model", "entry", "seed"]


def with_run_metrics(per_run: pd.DataFrame, metrics: pd.DataFrame, names: Sequence[str]) -> pd.DataFrame:
    """``per_run`` (rows of `RUN_KEYS`) with a column for each statistic of ``names`` (`RUN_METRICS`) it lacks,
    computed from the runs' per-step ``metrics`` (`run_value`; NaN for a run without them)."""
    missing = [n for n in names if n not in per_run]
    if not missing or per_run.empty:
        return per_run
    values = {}
    if not metrics.empty:
        m = metrics.assign(experiment=metrics["experiment"].fillna(MAIN) if "experiment" in metrics else MAIN)
        for key, g in m.groupby(RUN_KEYS, sort=False):
            values[(key[0], key[1], key[2], int(key[3]))] = [run_value(g, RUN_METRICS[n]) for n in missing]
    nan = [float("nan")] * len(missing)
    keys = zip(per_run["experiment"], per_run["model"], per_run["entry"], per_run["seed"].astype(int), strict=True)
    table = pd.DataFrame([values.get(k, nan) for k in keys], columns=missing, index=per_run.index)
    return pd.concat([per_run, table], axis=1)


ENTRY_COLUMNS = ["model", "entry", "n_runs", "entropy_final", "entropy_final_ci_low", "entropy_final_ci_high",
                 "reward_final", "clipfrac", "train_seconds_mean", "train_seconds_total"]  # fmt: skip


def run_stats(
    metrics: pd.DataFrame, summaries: pd.DataFrame, confidence: float = 0.95
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training statistics. Returns (per_run, per_entry).

    per_run (`RUN_COLUMNS`): one row per run with entropy_first (at its first logged step: the base model's, since
    the rollout policy of step 1 is the base model), entropy_final, reward_final and accuracy_final (mean over the
    last 10% of steps; the reward's scale is the trainer's, accuracy is comparable across trainers), entropy_auc
    (the mean of the per-step entropy: the area under the entropy curve per step), clipfrac (mean over steps,
    off-policy updates when logged), train_seconds, steps: each statistic declared in `RUN_METRICS` (other run
    statistics, for the experiments that compare them: `with_run_metrics`). per_entry (`ENTRY_COLUMNS`): one row per
    (model, entry) with n_runs, entropy_final (mean over seeds) and its Student-t interval, reward_final, clipfrac,
    train_seconds_mean (per run) and train_seconds_total (all seeds)."""
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
            **{name: run_value(g, RUN_METRICS[name]) for name in RUN_STATS if name != "clipfrac"},
            "clipfrac": float(g[clip_col].mean()) if clip_col else float("nan"),
            "train_seconds": float("nan"),
        }
        if info is not None and (model, entry, seed_) in info.index:
            s = info.loc[(model, entry, seed_)]
            row.update(method=s["method"], params=s["params"], train_seconds=s["train_seconds"])
        per_run.append(row)
    per_run_df = pd.DataFrame(per_run, columns=RUN_COLUMNS)
    return per_run_df, entry_stats(per_run_df, confidence)


def entry_stats(per_run: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """`run_stats`' per_entry: the runs of each (model, entry) summarised over seeds (`ENTRY_COLUMNS`)."""
    per_entry = []
    for (model, entry), g in per_run.groupby(["model", "entry"], sort=True):
        ent = g["entropy_final"].dropna().to_numpy(np.float64)
        lo, hi = t_interval(ent, confidence, (0.0, math.inf))
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
    return pd.DataFrame(per_entry, columns=ENTRY_COLUMNS)


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
