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


RARE_BUCKET = "p0.0-0.2"  # the lowest old-probability bucket (bandpo.methods.diagnostics.BUCKET_LABELS[0]): rare tokens


@dataclass(frozen=True)
class Display:
    """How the leaderboard pages show an entry's statistic (`bandpo.report.columns.display_columns`): the column's
    header, the scale of its numbers (100: percent), their digits, and whether the Student-t interval over seeds
    stands beside the mean (`entry_stats`' ``<name>_ci_low`` / ``_ci_high``); ``seconds``: a duration, shown as
    one."""

    head: str
    scale: float = 1.0
    digits: int = 1
    interval: bool = False
    seconds: bool = False


@dataclass(frozen=True)
class RunMetric:
    """One statistic of a training run, declared once (`RUN_METRICS`); everything that reads a run statistic reads
    this: runs.csv, the entries' columns of leaderboard.csv and of the pages, the axes' per-run outcomes and the
    secondaries that compare runs.

    - ``source``: the per-step metric of metrics.jsonl it comes from (the trainer's; `bandpo.train.loop`), or for
      ``aggregate: summary`` the field of the run's summary (run.json); ``fallback``: the metric read instead when
      no run of the table logged ``source`` (the off-policy updates' clip fraction, else all updates');
    - ``aggregate``: ``first`` (its first logged value), ``final`` (`final_window`: the mean over the last 10% of
      its steps), ``mean`` (over all its steps: the area under the curve per step) or ``summary`` (the run's own);
    - ``unit``: ``nats``, ``reward``, ``fraction`` or ``seconds``; ``direction``: which way is better for a
      method (``higher`` / ``lower``), None where the statistic describes a run and ranks nothing;
    - ``per_run``: a column of runs.csv (in declaration order); ``entry``: a column of each (model, entry) of
      leaderboard.csv, the mean over seeds (``mean``), with its Student-t interval (``mean_t``), or the mean per run
      and the total over seeds (``mean_total``: ``<name>_mean`` and ``<name>_total``); ``display``: a column of the
      pages (`Display`; an ``entry`` statistic)."""

    name: str
    source: str
    aggregate: str
    unit: str
    direction: str | None = None
    per_run: bool = False
    entry: str | None = None
    display: Display | None = None
    fallback: str | None = None


RUN_METRICS = {m.name: m for m in (
    RunMetric("entropy_first", "entropy", "first", "nats", per_run=True),  # step 1's: the base model's
    RunMetric("entropy_final", "entropy", "final", "nats", "higher", per_run=True, entry="mean_t",
              display=Display("entropy (final)", 1.0, 3, interval=True)),
    RunMetric("entropy_auc", "entropy", "mean", "nats", "higher", per_run=True),
    RunMetric("reward_final", "reward_mean", "final", "reward", "higher", per_run=True, entry="mean"),  # its scale
    RunMetric("accuracy_final", "accuracy", "final", "fraction", "higher", per_run=True),
    RunMetric("clipfrac", "offpolicy/clipfrac", "mean", "fraction", per_run=True, entry="mean",
              display=Display("clipped %", 100.0, 2), fallback="clipfrac"),
    RunMetric("train_seconds", "train_seconds", "summary", "seconds", "lower", per_run=True, entry="mean_total",
              display=Display("train time / run", seconds=True)),  # the total over seeds: leaderboard.csv only
    RunMetric("reward_auc", "reward_mean", "mean", "reward", "higher"),
    # the clip fractions at each bound, of the rare tokens (old probability < 0.2) and of all tokens
    RunMetric("clip_upper_low", f"clipfrac_upper/{RARE_BUCKET}", "mean", "fraction", "lower"),
    RunMetric("clip_lower_low", f"clipfrac_lower/{RARE_BUCKET}", "mean", "fraction", "lower"),
    RunMetric("clip_upper", "clipfrac_upper", "mean", "fraction", "lower"),
    RunMetric("clip_lower", "clipfrac_lower", "mean", "fraction", "lower"),
    # the shares of the tokens with a positive / negative advantage whose gradient the method stops (rare, all)
    RunMetric("stopped_pos_low", f"stopped_frac_pos/{RARE_BUCKET}", "mean", "fraction"),
    RunMetric("stopped_neg_low", f"stopped_frac_neg/{RARE_BUCKET}", "mean", "fraction"),
    RunMetric("stopped_pos", "stopped_frac_pos", "mean", "fraction"),
    RunMetric("stopped_neg", "stopped_frac_neg", "mean", "fraction"),
    RunMetric("approx_kl", "approx_kl", "mean", "nats"),  # the update's k3 estimate
)}  # fmt: skip
STEP_METRICS = [m for m in RUN_METRICS.values() if m.aggregate != "summary"]  # read from metrics.jsonl
SUMMARY_STATS = [m for m in RUN_METRICS.values() if m.per_run and m.aggregate == "summary"]  # runs.csv's, from run.json


def source_in(metrics: pd.DataFrame, metric: RunMetric) -> str:
    """The per-step metric ``metric`` reads in the table ``metrics``: its ``source``, or its ``fallback`` where no
    run of the table logged the source."""
    if metric.fallback is None or (metric.source in metrics and metrics[metric.source].notna().any()):
        return metric.source
    return metric.fallback


def run_value(g: pd.DataFrame, metric: RunMetric, source: str | None = None) -> float:
    """One run's value of ``metric`` from its per-step metrics ``g`` (``source``: the column to read, `source_in`
    of the whole table; default the metric's own); NaN when the run never logged it."""
    column = source or metric.source
    if metric.aggregate == "first":
        return first_value(g, column)
    if metric.aggregate == "final":
        return final_window(g, column)
    return float(g[column].mean()) if column in g else float("nan")  # NaN steps skipped


# runs.csv's statistics of each run, in its column order
RUN_STATS = tuple(m.name for m in RUN_METRICS.values() if m.per_run)
RUN_COLUMNS = ["profile", "model", "entry", "method", "params", "seed", "steps", *RUN_STATS]
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
        sources = [source_in(m, RUN_METRICS[n]) for n in missing]
        for key, g in m.groupby(RUN_KEYS, sort=False):
            values[(key[0], key[1], key[2], int(key[3]))] = [
                run_value(g, RUN_METRICS[n], s) for n, s in zip(missing, sources, strict=True)
            ]
    nan = [float("nan")] * len(missing)
    keys = zip(per_run["experiment"], per_run["model"], per_run["entry"], per_run["seed"].astype(int), strict=True)
    table = pd.DataFrame([values.get(k, nan) for k in keys], columns=missing, index=per_run.index)
    return pd.concat([per_run, table], axis=1)


def entry_columns(name: str, entry: str) -> list[str]:
    """The columns of leaderboard.csv that an ``entry`` statistic ``name`` fills (`RunMetric`)."""
    if entry == "mean_t":
        return [name, f"{name}_ci_low", f"{name}_ci_high"]
    if entry == "mean_total":
        return [f"{name}_mean", f"{name}_total"]
    return [name]


ENTRY_STATS = [m for m in RUN_METRICS.values() if m.entry]
UNIT_RANGE = {"nats": (0.0, math.inf), "fraction": (0.0, 1.0), "seconds": (0.0, math.inf)}  # where a mean can lie
ENTRY_COLUMNS = ["model", "entry", "n_runs", *(c for m in ENTRY_STATS for c in entry_columns(m.name, m.entry))]


def run_stats(
    metrics: pd.DataFrame, summaries: pd.DataFrame, confidence: float = 0.95
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training statistics. Returns (per_run, per_entry).

    per_run (`RUN_COLUMNS`): one row per run with its ``per_run`` statistics (`RUN_METRICS`): entropy_first (at
    its first logged step: the base model's, since the rollout policy of step 1 is the base model), entropy_final,
    reward_final and accuracy_final (mean over the last 10% of steps; the reward's scale is the trainer's, accuracy
    is comparable across trainers), entropy_auc (the mean of the per-step entropy: the area under the entropy curve
    per step), clipfrac (mean over steps, off-policy updates when logged), train_seconds (the run's summary), and
    steps (other run statistics, for the experiments that compare them: `with_run_metrics`). per_entry
    (`ENTRY_COLUMNS`, `entry_stats`): one row per (model, entry) with n_runs and each ``entry`` statistic."""
    per_run = []
    step_stats = [m for m in STEP_METRICS if m.per_run]
    sources = {m.name: source_in(metrics, m) for m in step_stats} if not metrics.empty else {}
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
            **{m.name: run_value(g, m, sources[m.name]) for m in step_stats},
            **{m.name: float("nan") for m in SUMMARY_STATS},
        }
        if info is not None and (model, entry, seed_) in info.index:
            s = info.loc[(model, entry, seed_)]
            row.update(method=s["method"], params=s["params"])
            row.update({m.name: s[m.source] for m in SUMMARY_STATS})
        per_run.append(row)
    per_run_df = pd.DataFrame(per_run, columns=RUN_COLUMNS)
    return per_run_df, entry_stats(per_run_df, confidence)


def entry_stats(per_run: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """`run_stats`' per_entry: the runs of each (model, entry) summarised over seeds (`ENTRY_COLUMNS`): each
    ``entry`` statistic of `RUN_METRICS` as it declares (a Student-t interval cut to its unit's range,
    `UNIT_RANGE`)."""
    per_entry = []
    for (model, entry), g in per_run.groupby(["model", "entry"], sort=True):
        row = {"model": model, "entry": entry, "n_runs": len(g)}
        # Each aggregation keeps the arithmetic the published leaderboard.csv was written with, to the bit: numpy's
        # mean of the seeds' values with NaN dropped (mean_t), pandas' skipna mean / sum (mean_total, mean). The two
        # means may differ in their last bit, so they are not merged.
        for m in ENTRY_STATS:
            if m.entry == "mean_t":
                values = g[m.name].dropna().to_numpy(np.float64)
                lo, hi = t_interval(values, confidence, UNIT_RANGE.get(m.unit, (-math.inf, math.inf)))
                row.update({m.name: float(values.mean()) if values.size else float("nan"),
                            f"{m.name}_ci_low": lo, f"{m.name}_ci_high": hi})  # fmt: skip
            elif m.entry == "mean_total":
                values = g[m.name].dropna()
                nan = float("nan")
                row.update({f"{m.name}_mean": float(values.mean()) if len(values) else nan,
                            f"{m.name}_total": float(values.sum()) if len(values) else nan})  # fmt: skip
            else:
                row[m.name] = float(g[m.name].mean())
        per_entry.append(row)
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
