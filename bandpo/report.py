"""The report stage: every run's metrics and lm-eval scores turned into a leaderboard, statistics and figures.

Inputs (read from one profile's results folder, ``results/{profile}``; the sweep config is not needed)::

    runs/{model}/{entry}/seed{seed}/metrics.jsonl     one JSON object per step (bandpo.train, or any trainer that
    runs/{model}/{entry}/seed{seed}/run.json          writes the same layout; run.json is optional)
    eval/{model}/{entry}/seed{seed}/{task}.json       the evaluation summary (bandpo.evaluate) naming lm-eval's
    eval/{model}/{entry}/seed{seed}/lm_eval_results.json   own results file, from which every score is read

The entry ``base`` is the untrained base model (the step-0 row); it has scores but no training run.

Outputs of `build_report` (``--out``, default: the results folder itself; every file written atomically)::

    leaderboard.csv        one row per (model, entry): numbers as fractions, CI / IQM / P(improvement) columns
    leaderboard.md         the same, one table per model size (and per task when there are several), in
                           percent, with notes on the statistics and links to the figures
    leaderboard.html       standalone page: inline CSS, a small inline script for sortable columns, figures embedded
                           as data URIs, a Content-Security-Policy that admits only that script
    stats.csv              long table: every (model, entry, task or "all", metric@k) with its statistics
    scores.csv             the per-seed scores exactly as read from lm-eval's files (`load_eval_scores`)
    runs.csv               one row per training run: final entropy / reward, clip fraction, training time
    figures/bounds.png             (a) ratio bounds, (b) probability-change bounds against old probability
    figures/training_curves.png    token entropy and reward against step, mean over seeds with a 95% CI band
    figures/clipfrac_buckets.png   clip fraction by old-probability bucket and direction
    figures/final_scores.png       final mean@k and pass@k with 95% CIs, per model size
    figures/{name}.csv             the data each figure plotted

`publish` copies a profile's ``leaderboard.{csv,md,html}`` and ``figures/*.png`` to the top-level ``results/`` (the
published leaderboard of the embedded profile): ``results/leaderboard.*``, ``results/figures/*.png``. The Markdown
links its figures as ``figures/<name>.png`` and the HTML embeds them, so both read the same in either place.

Statistics (rliable-style, Agarwal et al. 2021, computed with scipy; all resampling seeded and deterministic)
-----------------------------------------------------------------------------------------------------------
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

CLI::

    python -m bandpo.report build --results results/embedded [--out results/embedded] [--baseline grpo]
    python -m bandpo.report publish --src results/embedded --dest results
    python -m bandpo.report bounds --out bounds.png [--delta 0.1]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import html
import io
import json
import math
import os
import re
import sys
import warnings
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bandpo.files import atomic_write_bytes, atomic_write_text

__all__ = [
    "BASE_ENTRY",
    "FIGURES",
    "LEADERBOARD_FILES",
    "bounds_data",
    "build_report",
    "clipfrac_data",
    "entry_order",
    "entry_palette",
    "leaderboard",
    "leaderboard_html",
    "leaderboard_markdown",
    "load_eval_scores",
    "load_run_metrics",
    "load_run_summaries",
    "metric_label",
    "params_label",
    "per_task_table",
    "plot_bounds",
    "plot_clipfrac",
    "plot_final_scores",
    "plot_training_curves",
    "probability_of_improvement",
    "publish",
    "run_stats",
    "score_stats",
    "seed_bands",
]

BASE_ENTRY = "base"  # the reserved entry id of the untrained base model (bench_config.BASE_ENTRY)
DEFAULT_BASELINE = "grpo"
LEADERBOARD_FILES = ("leaderboard.csv", "leaderboard.md", "leaderboard.html")
PUBLISHED_TABLES = ("stats.csv", "scores.csv", "runs.csv")  # published with the leaderboard when present
FIGURES = ("bounds", "training_curves", "clipfrac_buckets", "final_scores")
HEADLINE = ("mean", "pass", "maj", "best_bootstrap")  # metric families of the leaderboard, at k = n samples
ALL_TASKS = "all"
EVAL_SCHEMA_PREFIX = "bandpo-bench/eval-summary/"
FINAL_FRACTION = 0.1  # "final" training statistics: mean over the last 10% of a run's steps
_METRIC = re.compile(r"^(?P<family>[A-Za-z_]+)@(?P<k>\d+|n)(?P<suffix>_[A-Za-z]+)?$")
_SEED_DIR = re.compile(r"^seed(\d+)$")

SCORE_COLUMNS = [
    "profile",
    "model",
    "entry",
    "method",
    "params",
    "seed",
    "task",
    "k",
    "metric",
    "value",
    "name",
    "n",
    "stderr",
    "source",
]


# ----------------------------------------------------------------------------------------------------------------
# Small helpers


def _canonical_params(params: Any) -> str:
    """Parameters as canonical JSON (sorted keys); "" for none (the base model)."""
    if params is None:
        return ""
    if isinstance(params, str):
        return params
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def params_label(method: str | None, params: str | Mapping[str, Any] | None) -> str:
    """Short human label of an entry's parameters: the method config's `MethodConfig.label` (the parameters that
    identify the variant, then the others that differ from the registered defaults); every parameter when the
    method is not in this registry or its parameters do not validate here; "" when there is nothing to say."""
    if not method or params in (None, ""):
        return ""
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except json.JSONDecodeError:
            return params
    if not isinstance(params, Mapping):
        return str(params)
    try:
        from bandpo.methods import make_config

        return make_config(method, params).label()
    except Exception:  # a method of another trainer, or not registered here: show everything
        return ", ".join(f"{k}={v}" for k, v in sorted(params.items()))


def metric_label(family: str, k: Any) -> str:
    """lm-eval's metric name from (family, k): ("pass", 8) -> "pass@8", ("best_bootstrap", 8) -> "best@8_bootstrap"."""
    k_str = "n" if k is None or (isinstance(k, float) and math.isnan(k)) else str(int(k))
    head, _, tail = family.partition("_")
    return f"{head}@{k_str}" + (f"_{tail}" if tail else "")


def _parse_metric(name: str) -> tuple[str, float]:
    m = _METRIC.match(name)
    if not m:
        return name, float("nan")
    return m["family"] + (m["suffix"] or ""), float(int(m["k"])) if m["k"].isdigit() else float("nan")


def _rng(seed: int, *key: Any) -> np.random.Generator:
    """A generator that depends only on (seed, key): a row's CI does not change when other rows are added."""
    h = zlib.crc32(json.dumps([str(k) for k in key]).encode("utf-8"))
    return np.random.default_rng([int(seed), h])


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    atomic_write_text(path, df.to_csv(index=False, float_format="%.6g", lineterminator="\n"))


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _run_dirs(root: Path) -> Iterable[tuple[str, str, int, Path]]:
    """(model, entry, seed, folder) for every ``{model}/{entry}/seed{seed}`` folder under ``root``, sorted."""
    if not root.is_dir():
        return
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for entry_dir in sorted(p for p in model_dir.iterdir() if p.is_dir()):
            for seed_dir in sorted(p for p in entry_dir.iterdir() if p.is_dir()):
                m = _SEED_DIR.match(seed_dir.name)
                if m:
                    yield model_dir.name, entry_dir.name, int(m[1]), seed_dir


# ----------------------------------------------------------------------------------------------------------------
# Loading


def load_run_metrics(results_dir: str | os.PathLike) -> pd.DataFrame:
    """Every finished run's ``metrics.jsonl`` as one frame: profile, model, entry, seed, then one column per logged
    key (step, entropy, reward_mean, clipfrac_upper/p0.0-0.2, ...). Runs still training (``.partial``) are skipped."""
    results_dir = Path(results_dir)
    frames = []
    for model, entry, seed, folder in _run_dirs(results_dir / "runs"):
        path = folder / "metrics.jsonl"
        if not path.is_file():
            continue
        rows = []
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{i}: not valid JSON ({e.msg})") from None
        if not rows:
            continue
        df = pd.DataFrame(rows)
        if "step" not in df:
            df["step"] = np.arange(1, len(df) + 1)
        df.insert(0, "seed", seed)
        df.insert(0, "entry", entry)
        df.insert(0, "model", model)
        df.insert(0, "profile", results_dir.name)
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["profile", "model", "entry", "seed", "step"])
    return pd.concat(frames, ignore_index=True, sort=False)


def load_run_summaries(results_dir: str | os.PathLike) -> pd.DataFrame:
    """One row per training run: identity (method and params from run.json when present) and its training time.

    ``train_seconds`` is run.json's ``train_seconds_total`` (sum of step times over resumes), else the sum of the
    metrics' ``step_seconds``, else NaN (a trainer that logs neither)."""
    results_dir = Path(results_dir)
    rows = []
    for model, entry, seed, folder in _run_dirs(results_dir / "runs"):
        run_json, metrics = folder / "run.json", folder / "metrics.jsonl"
        if not run_json.is_file() and not metrics.is_file():
            continue
        info = _read_json(run_json) if run_json.is_file() else {}
        cfg = info.get("config") or {}
        params = info.get("method_params", cfg.get("params"))
        seconds = info.get("train_seconds_total")
        steps = info.get("steps", cfg.get("steps"))
        if seconds is None and metrics.is_file():
            with open(metrics, encoding="utf-8") as f:
                lines = [json.loads(line) for line in f if line.strip()]
            times = [m["step_seconds"] for m in lines if isinstance(m.get("step_seconds"), (int, float))]
            seconds = float(sum(times)) if times else None
            steps = steps if steps is not None else len(lines)
        rows.append(
            {
                "profile": results_dir.name,
                "model": model,
                "entry": entry,
                "seed": seed,
                "method": cfg.get("method"),
                "params": _canonical_params(params) if params is not None else None,
                "steps": steps,
                "train_seconds": float(seconds) if seconds is not None else float("nan"),
                "finished": run_json.is_file(),
            }
        )
    columns = ["profile", "model", "entry", "seed", "method", "params", "steps", "train_seconds", "finished"]
    return pd.DataFrame(rows, columns=columns)


def load_eval_scores(results_dir: str | os.PathLike) -> pd.DataFrame:
    """Every evaluation score under ``results_dir/eval`` as a tidy frame, one row per (run, task, metric).

    Columns: profile, model, entry, method, params, seed, task, k, metric, value (the spec), then name (lm-eval's
    metric name, e.g. ``pass@4``), n (samples per problem), stderr (lm-eval's), source (the file the value came from).
    ``metric`` is the family (mean, pass, maj, best_bootstrap) and ``k`` its k: ``pass@4`` -> ("pass", 4).

    This is the one place that knows the evaluation file format (bandpo.evaluate, schema
    ``bandpo-bench/eval-summary/v1``): the per-task summary ``{task}.json`` gives the run's identity and names
    lm-eval's aggregated results file and filter; the values are read from that lm-eval file
    (``results[task]["<metric>,<filter>"]``). Only when that file is missing are the summary's copies used (they
    were read from the same file by bandpo.evaluate), and ``source`` says so.
    """
    results_dir = Path(results_dir)
    rows = []
    lm_cache: dict[Path, Any] = {}
    for model, entry, seed, folder in _run_dirs(results_dir / "eval"):
        for path in sorted(folder.glob("*.json")):
            try:
                summary = _read_json(path)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if not isinstance(summary, dict) or not str(summary.get("schema", "")).startswith(EVAL_SCHEMA_PREFIX):
                continue  # lm_eval_results.json and anything else that is not a summary
            task = summary.get("task") or path.stem
            lm = summary.get("lm_eval") or {}
            filter_name = lm.get("filter", "all_k")
            values: dict[str, float] = {}
            stderr: dict[str, float | None] = {}
            source = ""
            results_file = folder / lm["results_file"] if lm.get("results_file") else None
            if results_file is not None and results_file.is_file():
                if results_file not in lm_cache:
                    lm_cache[results_file] = _read_json(results_file)
                task_res = (lm_cache[results_file].get("results") or {}).get(task, {})
                suffix = f",{filter_name}"
                for key, value in task_res.items():
                    if not key.endswith(suffix):
                        continue
                    name = key[: -len(suffix)]
                    if name.endswith("_stderr"):
                        stderr[name[: -len("_stderr")]] = value if isinstance(value, (int, float)) else None
                    elif isinstance(value, (int, float)) and not isinstance(value, bool):
                        values[name] = float(value)
                source = str(results_file.relative_to(results_dir))
            if not values:
                for name, value in (summary.get("metrics") or {}).items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        values[name] = float(value)
                stderr = dict(summary.get("stderr") or {})
                source = str(path.relative_to(results_dir))
                if values and results_file is not None:
                    warnings.warn(f"{results_file} missing: scores of {path} read from the summary", stacklevel=2)
            method = summary.get("method")
            for name, value in values.items():
                family, k = _parse_metric(name)
                err = stderr.get(name)
                rows.append(
                    {
                        "profile": summary.get("profile") or results_dir.name,
                        "model": summary.get("model") or model,
                        "entry": summary.get("entry") or entry,
                        "method": method if method else (BASE_ENTRY if entry == BASE_ENTRY else None),
                        "params": _canonical_params(summary.get("params")),
                        "seed": int(summary.get("seed", seed)),
                        "task": task,
                        "k": k,
                        "metric": family,
                        "value": value,
                        "name": name,
                        "n": summary.get("k"),
                        "stderr": float(err) if isinstance(err, (int, float)) else float("nan"),
                        "source": source,
                    }
                )
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


# ----------------------------------------------------------------------------------------------------------------
# Statistics


def _bootstrap_ci(
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


def _mean_of_means(*strata: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean([np.mean(s, axis=axis) for s in strata], axis=0)


def _iqm(*strata: np.ndarray, axis: int = -1) -> np.ndarray:
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
    return (estimate, *_bootstrap_ci(samples, _poi_stat, n_resamples, rng, confidence))


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
            mean = float(_mean_of_means(*samples))
            lo, hi = _bootstrap_ci(samples, _mean_of_means, n_resamples, _rng(seed, "mean", *key), confidence)
            iqm = float(_iqm(*samples))
            iqm_lo, iqm_hi = _bootstrap_ci(samples, _iqm, n_resamples, _rng(seed, "iqm", *key), confidence)
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
                    poi = probability_of_improvement(strata, y, n_resamples, confidence, _rng(seed, "poi", *key))
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
                    "iqm": iqm,
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
        lo, hi = _bootstrap_ci([ent], _mean_of_means, n_resamples, _rng(seed, "entropy", model, entry), confidence)
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


def entry_order(entries: Iterable[str], baseline: str | None = DEFAULT_BASELINE) -> list[str]:
    """A stable display order: the base model, the baseline, then the rest alphabetically."""
    entries = sorted(set(entries))
    first = [e for e in (BASE_ENTRY, baseline) if e in entries]
    return first + [e for e in entries if e not in first]


def leaderboard(stats: pd.DataFrame, per_entry: pd.DataFrame, per_run: pd.DataFrame | None = None) -> pd.DataFrame:
    """The wide leaderboard: one row per (model, entry), the base model first, then by mean@k (best first).

    Per headline metric L (e.g. ``mean@8``): L, L_ci_low, L_ci_high, L_iqm, L_poi, L_poi_ci_low, L_poi_ci_high
    (P(improvement) over ``baseline``); then the training columns of `run_stats`."""
    overall = stats[stats["task"] == ALL_TASKS] if not stats.empty else stats
    keys = set()
    if not overall.empty:
        keys |= set(map(tuple, overall[["model", "entry"]].to_numpy()))
    if not per_entry.empty:
        keys |= set(map(tuple, per_entry[["model", "entry"]].to_numpy()))
    ident: dict[tuple[str, str], dict[str, Any]] = {}
    for frame in (per_run, overall):  # eval identity wins over run.json's (same values when both exist)
        if frame is None or frame.empty:
            continue
        for r in frame.drop_duplicates(["model", "entry"]).itertuples():
            ident.setdefault((r.model, r.entry), {}).update(
                {k: getattr(r, k) for k in ("profile", "method", "params") if isinstance(getattr(r, k), str)}
            )
    rows = []
    for model, entry in sorted(keys):
        meta = ident.get((model, entry), {})
        method = meta.get("method") or (BASE_ENTRY if entry == BASE_ENTRY else "")
        row: dict[str, Any] = {
            "profile": meta.get("profile", ""),
            "model": model,
            "entry": entry,
            "method": method,
            "params": params_label(method, meta.get("params")),
            "params_json": meta.get("params", ""),
        }
        sub = overall[(overall["model"] == model) & (overall["entry"] == entry)] if not overall.empty else overall
        row["n_seeds"] = int(sub["n_seeds"].max()) if not sub.empty else 0
        row["baseline"] = sub["baseline"].dropna().iloc[0] if not sub.empty and sub["baseline"].notna().any() else ""
        for family in HEADLINE:
            s = sub[sub["metric"] == family] if not sub.empty else sub
            if s.empty:
                continue
            r = s.iloc[0]
            label = r["label"]
            row.update(
                {
                    label: r["mean"],
                    f"{label}_ci_low": r["ci_low"],
                    f"{label}_ci_high": r["ci_high"],
                    f"{label}_iqm": r["iqm"],
                    f"{label}_poi": r["poi"],
                    f"{label}_poi_ci_low": r["poi_ci_low"],
                    f"{label}_poi_ci_high": r["poi_ci_high"],
                }
            )
        t = per_entry[(per_entry["model"] == model) & (per_entry["entry"] == entry)] if not per_entry.empty else None
        if t is not None and not t.empty:
            row.update({c: t.iloc[0][c] for c in per_entry.columns if c not in ("model", "entry")})
        rows.append(row)
    board = pd.DataFrame(rows)
    if board.empty:
        return board
    for c in ("n_runs",):
        if c in board:
            board[c] = board[c].fillna(0).astype(int)
    sort_col = _headline_label(board, "mean")
    board["_base"] = board["entry"] != BASE_ENTRY
    board["_score"] = -board[sort_col].astype(float) if sort_col else 0.0
    board = board.sort_values(["model", "_base", "_score", "entry"], na_position="last", kind="stable")
    return board.drop(columns=["_base", "_score"]).reset_index(drop=True)


def _headline_label(board: pd.DataFrame, family: str) -> str | None:
    """The leaderboard column of a metric family (``mean`` -> ``mean@8``), None if absent."""
    for c in board.columns:
        if "_ci_" in c or c.endswith(("_iqm", "_poi")):
            continue
        fam, _ = _parse_metric(c)
        if fam == family or (family == "mean" and c == "mean@n"):
            return c
    return None


# ----------------------------------------------------------------------------------------------------------------
# Markdown and HTML

STATS_NOTE = (
    "Scores are fractions of problems solved, shown in percent: the mean over seeds of each seed's lm-eval score "
    "(averaged over tasks with equal weight), with a 95% percentile-bootstrap confidence interval that resamples "
    "seeds within each task (stratified bootstrap, seeded). IQM is the interquartile mean of the (seed, task) "
    "scores; with fewer than 4 of them nothing is trimmed and it equals the mean. P(>{baseline}) is the "
    "probability of improvement over the baseline: the share of (seed, baseline seed) pairs in which this entry "
    "scores higher, ties counting one half; 0.5 means no difference. pass@k is the unbiased estimator "
    "1 - C(n-c, k)/C(n, k); best@k (bootstrap) is the paper's resampled variant, labelled as such. Entropy is "
    "the rollout policy's mean token entropy over the last 10% of training steps; time is per training run."
)
SEEDS_NOTE = (
    "With only {n} seed(s) per row these intervals are wide, and a percentile bootstrap over so few seeds (a "
    "handful of distinct resamples) is if anything too narrow: treat differences whose intervals overlap as "
    "unresolved, and read P(improvement) near 0.5 as no evidence either way."
)


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f


def _fmt(v: Any, scale: float = 1.0, digits: int = 1) -> str:
    f = _num(v)
    return "—" if math.isnan(f) else f"{f * scale:.{digits}f}"


def _fmt_ci(v: Any, lo: Any, hi: Any, scale: float = 100.0, digits: int = 1) -> str:
    s = _fmt(v, scale, digits)
    if s == "—" or math.isnan(_num(lo)) or math.isnan(_num(hi)):
        return s
    return f"{s} [{_fmt(lo, scale, digits)}, {_fmt(hi, scale, digits)}]"


def _fmt_seconds(v: Any) -> str:
    f = _num(v)
    if math.isnan(f):
        return "—"
    if f < 10:
        return f"{f:.1f} s"
    if f < 120:
        return f"{f:.0f} s"
    if f < 7200:
        return f"{f / 60:.1f} min"
    return f"{f / 3600:.1f} h"


@dataclass(frozen=True)
class _Column:
    """A column of the Markdown / HTML tables: sort key, header, cell text of a row, numeric sort value (None:
    sorted as text)."""

    key: str
    head: str
    text: Callable[[Mapping[str, Any]], str]
    sort: Callable[[Mapping[str, Any]], float] | None = None


def _ci_column(key: str, head: str, scale: float = 100.0, digits: int = 1) -> _Column:
    """``value [ci_low, ci_high]`` of the columns key, key_ci_low, key_ci_high."""
    return _Column(
        key,
        head,
        lambda r: _fmt_ci(r.get(key), r.get(f"{key}_ci_low"), r.get(f"{key}_ci_high"), scale, digits),
        lambda r: _num(r.get(key)),
    )


def _baseline_of(board: pd.DataFrame) -> str:
    return next((b for b in board.get("baseline", []) if isinstance(b, str) and b), DEFAULT_BASELINE)


def _identity_columns(board: pd.DataFrame) -> list[_Column]:
    cols = [
        _Column("entry", "entry", lambda r: str(r["entry"])),
        _Column("method", "method", lambda r: str(r.get("method") or "")),
        _Column("params", "params", lambda r: str(r.get("params") or "")),
    ]
    if "n_seeds" in board:
        cols.append(_Column("n_seeds", "seeds", lambda r: _fmt(r.get("n_seeds"), 1.0, 0), lambda r: _num(r["n_seeds"])))
    return cols


def _display_columns(board: pd.DataFrame) -> list[_Column]:
    """The columns of the leaderboard tables (Markdown and HTML)."""
    cols = _identity_columns(board)
    baseline = _baseline_of(board)
    for family in HEADLINE:
        label = _headline_label(board, family)
        if not label:
            continue
        cols.append(_ci_column(label, label.replace("_bootstrap", " (bootstrap)") + " %"))
        if family == "mean":
            cols.append(
                _Column(f"{label}_iqm", f"{label} IQM %", lambda r, c=label: _fmt(r.get(f"{c}_iqm"), 100.0),
                        lambda r, c=label: _num(r.get(f"{c}_iqm")))
            )  # fmt: skip
        if family in ("mean", "pass"):
            cols.append(
                _Column(f"{label}_poi", f"{label} P(>{baseline})", lambda r, c=label: _poi_text(r, c),
                        lambda r, c=label: _num(r.get(f"{c}_poi")))
            )  # fmt: skip
    if "entropy_final" in board:
        cols.append(_ci_column("entropy_final", "entropy (final)", 1.0, 3))
    if "clipfrac" in board:
        cols.append(_Column("clipfrac", "clipped %", lambda r: _fmt(r.get("clipfrac"), 100.0, 2),
                            lambda r: _num(r.get("clipfrac"))))  # fmt: skip
    for key, head in (("train_seconds_mean", "train time / run"), ("train_seconds_total", "train time (all seeds)")):
        if key in board:
            cols.append(_Column(key, head, lambda r, k=key: _fmt_seconds(r.get(k)), lambda r, k=key: _num(r.get(k))))
    return cols


def per_task_table(
    stats: pd.DataFrame, board: pd.DataFrame, families: Sequence[str] = ("mean", "pass")
) -> pd.DataFrame:
    """One row per (model, entry), in the leaderboard's order, with each task's headline scores: for task T and
    metric label L (k = the task's n), columns ``T L``, ``T L_ci_low``, ``T L_ci_high``. Empty with one task."""
    if stats.empty or board.empty:
        return pd.DataFrame()
    per = stats[(stats["task"] != ALL_TASKS) & stats["metric"].isin(families)]
    per = per[per["k"] == per.groupby(["task", "metric"])["k"].transform("max")]  # pass@n, not pass@2 ...
    if per["task"].nunique() < 2:
        return pd.DataFrame()
    out = board[["profile", "model", "entry", "method", "params", "params_json", "n_seeds", "baseline"]].copy()
    for (task, label), g in per.groupby(["task", "label"], sort=True):
        name = f"{task} {label}"
        values = g.set_index(["model", "entry"])[["mean", "ci_low", "ci_high"]]
        values.columns = [name, f"{name}_ci_low", f"{name}_ci_high"]
        out = out.join(values, on=["model", "entry"])
    return out


def _task_columns(table: pd.DataFrame) -> list[_Column]:
    cols = _identity_columns(table)
    for c in table.columns:
        if " " in c and not c.endswith(("_ci_low", "_ci_high")):
            cols.append(_ci_column(c, f"{c} %"))
    return cols


def _poi_text(r: Mapping[str, Any], label: str) -> str:
    if r.get("entry") == r.get("baseline"):
        return "(baseline)"
    return _fmt_ci(r.get(f"{label}_poi"), r.get(f"{label}_poi_ci_low"), r.get(f"{label}_poi_ci_high"), 1.0, 2)


def _md_cell(text: str) -> str:
    """Markdown table cell: HTML-escaped (renderers pass raw HTML through) and with | and newlines neutralised."""
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def _md_table(rows: pd.DataFrame, cols: Sequence[_Column]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(c.head) for c in cols) + " |"]
    lines.append("|" + "|".join("---" if c.sort is None else "---:" for c in cols) + "|")
    for _, r in rows.iterrows():
        lines.append("| " + " | ".join(_md_cell(c.text(r)) for c in cols) + " |")
    return lines


def _max_seeds(board: pd.DataFrame) -> int:
    return int(board["n_seeds"].max()) if "n_seeds" in board and len(board) else 0


def _by_model(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return [] if table.empty else list(table.groupby("model", sort=False))


def _title(board: pd.DataFrame, title: str | None) -> str:
    profile = next((p for p in board.get("profile", []) if isinstance(p, str) and p), "")
    return title or f"BandPO-Bench leaderboard: {profile or 'results'}"


def leaderboard_markdown(
    board: pd.DataFrame,
    figures: Sequence[str] = (),
    title: str | None = None,
    per_task: pd.DataFrame | None = None,
) -> str:
    """The leaderboard as Markdown: one table per model size (and per-task tables when there are several tasks),
    the notes on the statistics, links to the figures (``figures/<name>.png``). Every cell is escaped."""
    lines = [f"# {_md_cell(_title(board, title))}", ""]
    if board.empty:
        lines += ["No finished runs or evaluation scores were found.", ""]
    cols = _display_columns(board)
    for model, g in _by_model(board):
        lines += [f"## {_md_cell(str(model))}", "", *_md_table(g, cols), ""]
    if per_task is not None and not per_task.empty:
        tcols = _task_columns(per_task)
        for model, g in _by_model(per_task):
            lines += [f"## {_md_cell(str(model))}: per task", "", *_md_table(g, tcols), ""]
    lines += ["## How to read these numbers", "", STATS_NOTE.format(baseline=_md_cell(_baseline_of(board))), ""]
    lines += [SEEDS_NOTE.format(n=_max_seeds(board)), ""]
    if figures:
        lines += ["## Figures", ""]
        for name in figures:
            lines += [f"![{name}](figures/{name}.png)", ""]
    return "\n".join(lines)


_CSS = """
:root { color-scheme: light; --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --head: #f6f8fa; --hi: #fff8c5; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); margin: 0;
       background: #fff; }
main { max-width: 1400px; margin: 0 auto; padding: 24px; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; }
p.meta, p.note { color: var(--muted); max-width: 110ch; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: right; white-space: nowrap; }
th { background: var(--head); position: sticky; top: 0; }
td.t, th.t { text-align: left; } td.params { white-space: normal; max-width: 32ch; overflow-wrap: anywhere; }
th button { all: unset; cursor: pointer; font-weight: 600; }
th button::after { content: " \\2195"; color: var(--muted); }
th[aria-sort="ascending"] button::after { content: " \\2191"; color: var(--fg); }
th[aria-sort="descending"] button::after { content: " \\2193"; color: var(--fg); }
tr.base td { background: #f3f4f6; } tr.baseline td { background: var(--hi); }
tbody tr:hover td { background: #eaeef2; }
figure { margin: 16px 0 32px; } figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); }
"""

# Sortable columns: a click on a header sorts its table by that column (numbers by data-v, NaN last; text by
# content), a second click reverses. ``#sort=<column key>[:asc|:desc]`` in the URL sorts every table on load.
_JS = """
(function () {
  "use strict";
  function key(td, numeric) {
    if (!numeric) { return td.textContent.trim().toLowerCase(); }
    var v = parseFloat(td.getAttribute("data-v"));
    return isNaN(v) ? null : v;
  }
  function sortTable(table, index, dir) {
    var ths = table.tHead.rows[0].cells, numeric = ths[index].getAttribute("data-type") === "num";
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[index], numeric), y = key(b.cells[index], numeric);
      if (x === y) { return 0; }
      if (x === null) { return 1; }
      if (y === null) { return -1; }
      return (x < y ? -1 : 1) * (dir === "descending" ? -1 : 1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
    for (var i = 0; i < ths.length; i++) { ths[i].setAttribute("aria-sort", i === index ? dir : "none"); }
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      var button = th.querySelector("button");
      if (!button) { return; }
      button.addEventListener("click", function () {
        var now = th.getAttribute("aria-sort");
        var first = th.getAttribute("data-type") === "num" ? "descending" : "ascending";
        var flip = now === "descending" ? "ascending" : "descending";
        sortTable(table, index, now === "none" || !now ? first : flip);
      });
    });
  });
  var m = /(?:^#|&)sort=([^&:]+)(?::(asc|desc))?/.exec(window.location.hash);
  if (m) {
    var want = decodeURIComponent(m[1]), dir = m[2] === "asc" ? "ascending" : "descending";
    Array.prototype.forEach.call(tables, function (table) {
      var ths = table.tHead.rows[0].cells;
      for (var i = 0; i < ths.length; i++) {
        if (ths[i].getAttribute("data-key") === want) { sortTable(table, i, dir); }
      }
    });
  }
  document.documentElement.setAttribute("data-sortable", "ready");
})();
"""


def _html_table(rows: pd.DataFrame, cols: Sequence[_Column], model: str, kind: str) -> list[str]:
    """A sortable table: numeric cells carry their raw value in data-v (empty for NaN); all text escaped."""
    esc = html.escape
    heads = []
    for c in cols:
        typ, cls = ("text", ' class="t"') if c.sort is None else ("num", "")
        heads.append(f'<th scope="col" data-key="{esc(c.key)}" data-type="{typ}" aria-sort="none"{cls}>'
                     f'<button type="button">{esc(c.head)}</button></th>')  # fmt: skip
    out = ['<div class="scroll">', f'<table class="sortable {kind}" data-model="{esc(model)}">']
    out += ["<thead><tr>" + "".join(heads) + "</tr></thead>", "<tbody>"]
    for _, r in rows.iterrows():
        klass = "base" if r["entry"] == BASE_ENTRY else ("baseline" if r["entry"] == r.get("baseline") else "")
        cells = []
        for c in cols:
            text = esc(c.text(r))
            if c.sort is None:
                if c.key == "params":
                    cells.append(f'<td class="t params" title="{esc(str(r.get("params_json") or ""))}">{text}</td>')
                else:
                    cells.append(f'<td class="t">{text}</td>')
            else:
                v = c.sort(r)
                cells.append(f'<td data-v="{"" if math.isnan(v) else repr(float(v))}">{text}</td>')
        cls_attr = f' class="{klass}"' if klass else ""
        out.append(f'<tr{cls_attr} data-entry="{esc(str(r["entry"]))}">' + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return out


def leaderboard_html(
    board: pd.DataFrame,
    figures: Mapping[str, str | os.PathLike] | None = None,
    captions: Mapping[str, str] | None = None,
    title: str | None = None,
    per_task: pd.DataFrame | None = None,
) -> str:
    """A standalone HTML page of the leaderboard: no external assets, every text escaped, sortable columns.

    ``figures`` maps names to PNG files embedded as data URIs. The page's Content-Security-Policy allows no
    network access and only its own inline script (by hash), so even an unescaped string could not run code."""
    esc = html.escape
    title = _title(board, title)
    script_hash = base64.b64encode(hashlib.sha256(_JS.encode("utf-8")).digest()).decode("ascii")
    csp = (
        f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'; "
        "base-uri 'none'; form-action 'none'"
    )
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp, quote=False)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        "<main>",
        f"<h1>{esc(title)}</h1>",
    ]
    n_models = board["model"].nunique() if not board.empty else 0
    n_entries = board["entry"].nunique() if not board.empty else 0
    out.append(
        f'<p class="meta">{n_entries} entries on {n_models} model size(s); up to {_max_seeds(board)} '
        "seed(s) per entry. Click a column header to sort.</p>"
    )
    if board.empty:
        out.append("<p>No finished runs or evaluation scores were found.</p>")
    cols = _display_columns(board)
    baseline = _baseline_of(board)
    for i, (model, g) in enumerate(_by_model(board)):
        out.append(f'<h2 id="model-{i}">{esc(str(model))}</h2>')
        out += _html_table(g, cols, str(model), "leaderboard")
    if per_task is not None and not per_task.empty:
        tcols = _task_columns(per_task)
        for i, (model, g) in enumerate(_by_model(per_task)):
            out.append(f'<h2 id="tasks-{i}">{esc(str(model))}: per task</h2>')
            out += _html_table(g, tcols, str(model), "per-task")
    out.append("<h2>How to read these numbers</h2>")
    out.append(f'<p class="note">{esc(STATS_NOTE.format(baseline=baseline))}</p>')
    out.append(f'<p class="note">{esc(SEEDS_NOTE.format(n=_max_seeds(board)))}</p>')
    if figures:
        out.append("<h2>Figures</h2>")
        for name, path in figures.items():
            data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            cap = (captions or {}).get(name, name)
            out.append(
                f'<figure id="fig-{esc(name)}"><img alt="{esc(cap)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{esc(cap)}</figcaption></figure>"
            )
    out += ["</main>", f"<script>{_JS}</script>", "</body>", "</html>", ""]
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------------------------
# Figures (matplotlib Agg + seaborn; each returns the data it plotted)

FIGURE_CAPTIONS = {
    "bounds": "Ratio bounds (a) and allowed probability change p(r - 1) (b) against the old probability p, "
    "BandPO KL / TV / chi2 at delta = 0.1 (uncapped), GRPO, Clip-Higher and DCPO; dashed: the simplex limits.",
    "training_curves": "Token entropy and reward against training step, mean over seeds with a 95% bootstrap band.",
    "clipfrac_buckets": "Fraction of tokens clipped, by old-probability bucket and direction (upper: r > r_hi with "
    "A > 0; lower: r < r_lo with A < 0), off-policy updates, mean over steps and seeds with 95% CI.",
    "final_scores": "Final mean@k and pass@k per method (percent), mean over seeds with 95% stratified-bootstrap CI.",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def _style():
    """seaborn's whitegrid style, and text taken literally: an entry named ``a$b$`` is not parsed as mathtext."""
    import matplotlib
    import seaborn as sns

    with matplotlib.rc_context({"text.parse_math": False}), sns.axes_style("whitegrid"):
        yield


def _save(fig, path: str | os.PathLike) -> Path:
    """Render ``fig`` as PNG and write it atomically (`bandpo.files.atomic_write_bytes`); closes the figure."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    finally:
        _pyplot().close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def _placeholder(path: str | os.PathLike, title: str, message: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, wrap=True)
    _save(fig, path)


def entry_palette(entries: Iterable[str], baseline: str | None = DEFAULT_BASELINE) -> dict[str, Any]:
    """One colour per entry, the same in every figure (the base model grey)."""
    import seaborn as sns

    order = entry_order(entries, baseline)
    others = [e for e in order if e != BASE_ENTRY]
    colours = sns.color_palette("tab10" if len(others) <= 10 else "husl", n_colors=max(len(others), 1))
    palette = dict(zip(others, colours, strict=False))
    if BASE_ENTRY in order:
        palette[BASE_ENTRY] = (0.55, 0.55, 0.55)
    return palette


BOUND_METHODS = (
    ("BandPO-KL", "bandpo", {"divergence": "kl"}),
    ("BandPO-TV", "bandpo", {"divergence": "tv"}),
    ("BandPO-chi2", "bandpo", {"divergence": "chi2"}),
    ("GRPO", "grpo", {}),
    ("Clip-Higher", "clip_higher", {}),
    ("DCPO", "dcpo", {}),
)
SIMPLEX = "simplex limit"


def bounds_data(delta: float = 0.1, p: Sequence[float] | None = None, cap: float | None = None) -> pd.DataFrame:
    """Ratio bounds and probability-change bounds against old probability p, from the registered bounds functions
    (`bandpo.methods.compute_bounds`): columns method, p, r_lo, r_hi, dq_lo = p (r_lo - 1), dq_hi = p (r_hi - 1).
    BandPO uses radius ``delta``; ``cap`` caps BandPO's and DCPO's r_hi (None: the uncapped region). The rows of
    method "simplex limit" are r in [0, 1/p], i.e. the new probability q = p r in [0, 1]."""
    import torch

    from bandpo.methods import compute_bounds

    grid = np.asarray(p if p is not None else np.linspace(0.005, 0.995, 397), dtype=np.float64)
    log_p = torch.log(torch.as_tensor(grid, dtype=torch.float64)).unsqueeze(0)
    mask = torch.ones_like(log_p, dtype=torch.bool)
    frames = []
    for label, method, params in BOUND_METHODS:
        params = dict(params)
        if method == "bandpo":
            params.update(delta=delta, cap=cap)
        elif method == "dcpo":
            params.update(cap=cap)
        lo, hi = compute_bounds(method, log_p, mask, params)
        frames.append(pd.DataFrame({"method": label, "p": grid, "r_lo": lo[0].numpy(), "r_hi": hi[0].numpy()}))
    frames.append(pd.DataFrame({"method": SIMPLEX, "p": grid, "r_lo": 0.0, "r_hi": 1.0 / grid}))
    df = pd.concat(frames, ignore_index=True)
    df["dq_lo"] = df["p"] * (df["r_lo"] - 1.0)
    df["dq_hi"] = df["p"] * (df["r_hi"] - 1.0)
    return df


def plot_bounds(path: str | os.PathLike, delta: float = 0.1, cap: float | None = None) -> pd.DataFrame:
    """The paper's bound figure: (a) ratio bounds r_lo(p), r_hi(p); (b) allowed probability change p (r - 1),
    for BandPO KL / TV / chi2 at ``delta``, GRPO, Clip-Higher and DCPO, with the simplex limits r in [0, 1/p]
    (q in [0, 1]). Returns `bounds_data` (what was plotted)."""
    import seaborn as sns

    plt = _pyplot()
    data = bounds_data(delta=delta, cap=cap)
    long = pd.concat(
        [
            data.melt(
                id_vars=["method", "p"], value_vars=["r_lo", "r_hi"], var_name="bound", value_name="value"
            ).assign(panel="ratio"),
            data.melt(
                id_vars=["method", "p"], value_vars=["dq_lo", "dq_hi"], var_name="bound", value_name="value"
            ).assign(panel="dq"),
        ],
        ignore_index=True,
    )
    long["bound"] = long["bound"].str.endswith("_hi").map({True: "upper", False: "lower"})
    methods = [m for m, _, _ in BOUND_METHODS]
    palette = dict(zip(methods, sns.color_palette("tab10", len(methods)), strict=True))
    with _style():
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
        for ax, panel in zip(axes, ("ratio", "dq"), strict=True):
            d = long[long["panel"] == panel]
            sns.lineplot(
                data=d[d["method"] != SIMPLEX],
                x="p",
                y="value",
                hue="method",
                hue_order=methods,
                units="bound",
                estimator=None,
                palette=palette,
                ax=ax,
                linewidth=1.6,
            )
            simplex = d[d["method"] == SIMPLEX]
            for i, (_, s) in enumerate(simplex.groupby("bound")):
                ax.plot(
                    s["p"], s["value"], color="black", linestyle="--", linewidth=1.0, label=SIMPLEX if i == 0 else None
                )
            ax.axhline(1.0 if panel == "ratio" else 0.0, color="grey", linewidth=0.8)
            ax.set_xlim(0, 1)
            ax.set_xlabel("old probability p")
        axes[0].set_ylim(0, 4)
        axes[0].set_ylabel("ratio bound r")
        axes[0].set_title(f"(a) ratio bounds [r_lo, r_hi] (delta = {delta:g})")
        axes[1].set_ylim(-0.4, 0.4)
        axes[1].set_ylabel("probability change q - p = p (r - 1)")
        axes[1].set_title("(b) allowed probability change")
        handles, labels = axes[0].get_legend_handles_labels()
        for ax in axes:
            if ax.get_legend() is not None:
                ax.get_legend().remove()
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    _save(fig, path)
    return data


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
        rng = _rng(seed, "bands", *key)
        if n_resamples > 0 and mat.shape[0] >= 2 and full.any():
            res = bootstrap((mat[:, full],), np.mean, n_resamples=n_resamples, axis=0, vectorized=True,
                            method="percentile", confidence_level=confidence, rng=rng)  # fmt: skip
            lo[full], hi[full] = res.confidence_interval.low, res.confidence_interval.high
        for j in np.flatnonzero(~full):
            col = mat[:, j][~np.isnan(mat[:, j])]
            lo[j], hi[j] = _bootstrap_ci([col], _mean_of_means, n_resamples, rng, confidence)
        for j, xv in enumerate(wide.columns):
            col = mat[:, j][~np.isnan(mat[:, j])]
            rows.append((*key, xv, float(col.mean()), float(lo[j]), float(hi[j]), int(col.size)))
    return pd.DataFrame(rows, columns=[*by, x, "mean", "ci_low", "ci_high", "n_seeds"])


def plot_training_curves(
    metrics: pd.DataFrame,
    path: str | os.PathLike,
    columns: Sequence[str] = ("entropy", "reward_mean"),
    baseline: str | None = DEFAULT_BASELINE,
    n_resamples: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Token entropy and reward against step per method entry: mean over seeds with a 95% bootstrap band over
    seeds (`seed_bands`); one row of panels per model size, entropy on a log axis. Returns the plotted bands:
    model, entry, metric, step, mean, ci_low, ci_high, n_seeds."""
    import matplotlib.ticker
    import seaborn as sns

    present = [c for c in columns if c in metrics and metrics[c].notna().any()]
    cols = ["model", "entry", "metric", "step", "mean", "ci_low", "ci_high", "n_seeds"]
    if metrics.empty or not present:
        _placeholder(path, "training curves", "no training metrics found")
        return pd.DataFrame(columns=cols)
    long = metrics.melt(id_vars=["model", "entry", "seed", "step"], value_vars=present, var_name="metric",
                        value_name="value").dropna(subset=["value"])  # fmt: skip
    bands = seed_bands(long, ["model", "entry", "metric"], "step", n_resamples=n_resamples, seed=seed)[cols]
    models = sorted(bands["model"].unique())
    order = entry_order(bands["entry"], baseline)
    palette = entry_palette(order, baseline)
    plt = _pyplot()
    with _style():
        fig, axes = plt.subplots(len(models), len(present), figsize=(5.5 * len(present) + 2, 3.6 * len(models)),
                                 squeeze=False)  # fmt: skip
        for i, model in enumerate(models):
            for j, metric in enumerate(present):
                ax = axes[i, j]
                d = bands[(bands["model"] == model) & (bands["metric"] == metric)]
                hue_order = [e for e in order if e in set(d["entry"])]
                sns.lineplot(data=d, x="step", y="mean", hue="entry", hue_order=hue_order, palette=palette,
                             errorbar=None, ax=ax, linewidth=1.4)  # fmt: skip
                for entry, e in d.groupby("entry"):
                    ax.fill_between(e["step"], e["ci_low"], e["ci_high"], color=palette[entry], alpha=0.18, lw=0)
                if metric == "entropy" and (d["mean"] > 0).all():
                    ax.set_yscale("log")
                    # plain tick labels: math text is off in these figures (entry names are user text)
                    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
                    ax.yaxis.set_major_formatter(plain)
                    ax.yaxis.set_minor_formatter(plain)
                ax.set_title(f"{model}: {metric}")
                ax.set_ylabel(f"{metric} (mean over seeds)")
                if ax.get_legend() is not None and not (i == 0 and j == len(present) - 1):
                    ax.get_legend().remove()
        if axes[0, -1].get_legend() is not None:
            sns.move_legend(axes[0, -1], "upper left", bbox_to_anchor=(1.02, 1.0))
        fig.tight_layout()
    _save(fig, path)
    return bands.reset_index(drop=True)


def clipfrac_data(metrics: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Per run (model, entry, seed), bucket and direction: the clipped fraction of the bucket's tokens, mean over
    steps. Uses the off-policy updates' statistics (``offpolicy/...``) when logged, else all updates; returns the
    data and which ("off-policy updates" / "all updates")."""
    from bandpo.methods import BUCKET_LABELS

    prefix, which = "offpolicy/", "off-policy updates"
    if not any(c.startswith("offpolicy/clipfrac_upper/") for c in metrics.columns):
        prefix, which = "", "all updates"
    rows = []
    for direction in ("upper", "lower"):
        for bucket in BUCKET_LABELS:
            col = f"{prefix}clipfrac_{direction}/{bucket}"
            if col not in metrics:
                continue
            g = metrics.groupby(["model", "entry", "seed"], sort=True)[col].mean().dropna()
            for (model, entry, seed), value in g.items():
                rows.append(
                    {
                        "model": model,
                        "entry": entry,
                        "seed": seed,
                        "bucket": bucket,
                        "direction": direction,
                        "value": float(value),
                    }
                )
    return pd.DataFrame(rows, columns=["model", "entry", "seed", "bucket", "direction", "value"]), which


def _ci_callable(n_resamples: int, confidence: float, seed: int) -> Callable[[Any], tuple[float, float]]:
    """A seaborn ``errorbar=`` callable: the percentile-bootstrap CI of the mean of a vector (scipy, seeded)."""

    def ci(values) -> tuple[float, float]:
        x = np.asarray(values, dtype=np.float64)
        lo, hi = _bootstrap_ci([x], _mean_of_means, n_resamples, np.random.default_rng(seed), confidence)
        return (lo, hi) if not math.isnan(lo) else (float(x.mean()), float(x.mean()))

    return ci


def plot_clipfrac(
    metrics: pd.DataFrame,
    path: str | os.PathLike,
    baseline: str | None = DEFAULT_BASELINE,
    n_resamples: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Clip fraction by old-probability bucket (x) and direction (columns), one bar per method entry, one row of
    panels per model size; bars are means over seeds of each run's mean over steps, with 95% bootstrap CIs.
    Returns `clipfrac_data`'s frame."""
    import seaborn as sns

    data, which = clipfrac_data(metrics) if not metrics.empty else (pd.DataFrame(), "")
    if data.empty:
        _placeholder(path, "clip fraction by bucket", "no per-bucket clip statistics found")
        return pd.DataFrame(columns=["model", "entry", "seed", "bucket", "direction", "value"])
    from bandpo.methods import BUCKET_LABELS

    models = sorted(data["model"].unique())
    order = entry_order(data["entry"], baseline)
    palette = entry_palette(order, baseline)
    plt = _pyplot()
    with _style():
        fig, axes = plt.subplots(len(models), 2, figsize=(13, 3.8 * len(models)), squeeze=False, sharey="row")
        for i, model in enumerate(models):
            for j, direction in enumerate(("upper", "lower")):
                ax = axes[i, j]
                d = data[(data["model"] == model) & (data["direction"] == direction)].copy()
                d["value"] = 100.0 * d["value"]
                sns.barplot(
                    data=d,
                    x="bucket",
                    y="value",
                    hue="entry",
                    order=list(BUCKET_LABELS),
                    hue_order=[e for e in order if e in set(d["entry"])],
                    palette=palette,
                    errorbar=_ci_callable(n_resamples, 0.95, seed),
                    ax=ax,
                )
                arrow = "r > r_hi, A > 0" if direction == "upper" else "r < r_lo, A < 0"
                ax.set_title(f"{model}: {direction} clip ({arrow})")
                ax.set_xlabel("old probability p bucket")
                ax.set_ylabel(f"clipped tokens in bucket (%), {which}", fontsize=9)
                if ax.get_legend() is not None and not (i == 0 and j == 1):
                    ax.get_legend().remove()
        if axes[0, 1].get_legend() is not None:
            sns.move_legend(axes[0, 1], "upper left", bbox_to_anchor=(1.02, 1.0))
        fig.tight_layout()
    _save(fig, path)
    return data


def plot_final_scores(
    stats: pd.DataFrame,
    path: str | os.PathLike,
    families: Sequence[str] = ("mean", "pass"),
    baseline: str | None = DEFAULT_BASELINE,
) -> pd.DataFrame:
    """Final mean@k and pass@k per method entry with the 95% stratified-bootstrap CIs of `score_stats` (over tasks:
    ``task == "all"``), one row of panels per model size. Returns the plotted rows: model, entry, metric, label,
    mean, ci_low, ci_high (fractions)."""
    import seaborn as sns

    cols = ["model", "entry", "metric", "label", "mean", "ci_low", "ci_high"]
    data = stats[(stats["task"] == ALL_TASKS) & stats["metric"].isin(families)][cols] if not stats.empty else None
    if data is None or data.empty:
        _placeholder(path, "final scores", "no evaluation scores found")
        return pd.DataFrame(columns=cols)
    data = data.reset_index(drop=True)
    models = sorted(data["model"].unique())
    fams = [f for f in families if f in set(data["metric"])]
    order = entry_order(data["entry"], baseline)
    palette = entry_palette(order, baseline)
    plt = _pyplot()
    with _style():
        fig, axes = plt.subplots(
            len(models),
            len(fams),
            figsize=(6 * len(fams), 0.45 * len(order) * len(models) + 1.6 * len(models)),
            squeeze=False,
        )
        for i, model in enumerate(models):
            for j, fam in enumerate(fams):
                ax = axes[i, j]
                d = data[(data["model"] == model) & (data["metric"] == fam)]
                entries = [e for e in order if e in set(d["entry"])]
                d = d.set_index("entry").loc[entries].reset_index()
                sns.barplot(
                    data=d.assign(pct=100 * d["mean"]),
                    y="entry",
                    x="pct",
                    hue="entry",
                    order=entries,
                    hue_order=entries,
                    palette=palette,
                    errorbar=None,
                    legend=False,
                    ax=ax,
                )
                lo = 100 * (d["mean"] - d["ci_low"])
                hi = 100 * (d["ci_high"] - d["mean"])
                ok = lo.notna() & hi.notna()
                ax.errorbar(
                    100 * d["mean"][ok],
                    np.arange(len(d))[ok.to_numpy()],
                    xerr=[lo[ok], hi[ok]],
                    fmt="none",
                    ecolor="black",
                    capsize=3,
                    linewidth=1,
                )
                ax.set_title(f"{model}: {d['label'].iloc[0]}")
                ax.set_xlabel(f"{d['label'].iloc[0]} (%)")
                ax.set_ylabel("")
                if j > 0:
                    ax.set_yticklabels([])
        fig.tight_layout()
    _save(fig, path)
    return data


# ----------------------------------------------------------------------------------------------------------------
# The whole stage


def build_report(
    results_dir: str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    baseline: str | None = DEFAULT_BASELINE,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    delta: float = 0.1,
    embed_figures: bool = True,
) -> dict[str, Path]:
    """Load everything under ``results_dir`` (= ``results/{profile}``), compute the statistics, write the tables
    and figures into ``out_dir`` (default: ``results_dir``). Returns {name: path} of what was written."""
    results_dir = Path(results_dir)
    out = Path(out_dir) if out_dir is not None else results_dir
    if not results_dir.is_dir():
        raise FileNotFoundError(f"results folder not found: {results_dir}")
    scores = load_eval_scores(results_dir)
    metrics = load_run_metrics(results_dir)
    summaries = load_run_summaries(results_dir)
    stats = score_stats(scores, baseline, n_resamples, confidence, seed)
    per_run, per_entry = run_stats(metrics, summaries, n_resamples, confidence, seed)
    board = leaderboard(stats, per_entry, per_run)
    if board.empty:
        raise ValueError(
            f"nothing to report under {results_dir}: no runs/*/*/seed*/metrics.jsonl and no "
            "eval/*/*/seed*/*.json evaluation summaries"
        )

    written: dict[str, Path] = {}
    fig_dir = out / "figures"
    fig_data = {
        "bounds": plot_bounds(fig_dir / "bounds.png", delta=delta),
        "training_curves": plot_training_curves(metrics, fig_dir / "training_curves.png", baseline=baseline, seed=seed),
        "clipfrac_buckets": plot_clipfrac(metrics, fig_dir / "clipfrac_buckets.png", baseline=baseline, seed=seed),
        "final_scores": plot_final_scores(stats, fig_dir / "final_scores.png", baseline=baseline),
    }
    for name, df in fig_data.items():
        written[f"figures/{name}.png"] = fig_dir / f"{name}.png"
        _write_csv(df, fig_dir / f"{name}.csv")
        written[f"figures/{name}.csv"] = fig_dir / f"{name}.csv"
    for name, df in (("scores.csv", scores), ("stats.csv", stats), ("runs.csv", per_run), ("leaderboard.csv", board)):
        _write_csv(df, out / name)
        written[name] = out / name
    tasks = per_task_table(stats, board)
    atomic_write_text(out / "leaderboard.md", leaderboard_markdown(board, figures=FIGURES, per_task=tasks))
    written["leaderboard.md"] = out / "leaderboard.md"
    figs = {name: fig_dir / f"{name}.png" for name in FIGURES} if embed_figures else None
    atomic_write_text(out / "leaderboard.html", leaderboard_html(board, figs, FIGURE_CAPTIONS, per_task=tasks))
    written["leaderboard.html"] = out / "leaderboard.html"
    return written


PROVENANCE_PACKAGES = ("torch", "transformers", "lm_eval", "math-verify", "verl", "snakemake", "pandas", "scipy",
                       "seaborn", "datasets")  # fmt: skip


def provenance(config: Mapping | None = None) -> dict:
    """Where published numbers come from: git commit (and whether the tree had uncommitted changes), Python and
    package versions, platform, and the resolved run config when given."""
    import platform
    import subprocess
    from importlib import metadata

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30, check=True,
                                  cwd=Path(__file__).resolve().parent)  # the suite's checkout  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip()

    versions = {}
    for name in PROVENANCE_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "packages": versions,
        "config": dict(config) if config is not None else None,
    }


def publish(src: str | os.PathLike, dest: str | os.PathLike = "results", config: Mapping | None = None) -> list[Path]:
    """Copy a profile's leaderboard (``src/leaderboard.{csv,md,html}``), tables (``stats.csv``, ``scores.csv``,
    ``runs.csv``) and figures (``src/figures/*.png``) to ``dest`` (same names), each file atomically, and write
    ``dest/provenance.json`` (`provenance`: git commit, package versions, the run config). Returns the written
    paths."""
    src, dest = Path(src), Path(dest)
    missing = [n for n in LEADERBOARD_FILES if not (src / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{src}: missing {', '.join(missing)} (run `python -m bandpo.report build` first)")
    written = []
    pairs = [(src / n, dest / n) for n in LEADERBOARD_FILES]
    pairs += [(src / n, dest / n) for n in PUBLISHED_TABLES if (src / n).is_file()]
    pairs += [(p, dest / "figures" / p.name) for p in sorted((src / "figures").glob("*.png"))]
    for s, d in pairs:
        if s.resolve() == d.resolve():
            continue
        atomic_write_bytes(d, s.read_bytes())
        written.append(d)
    atomic_write_text(dest / "provenance.json", json.dumps(provenance(config), indent=2, default=str) + "\n")
    written.append(dest / "provenance.json")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bandpo.report", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="leaderboard, statistics and figures of one profile's results")
    b.add_argument("--results", required=True, help="results/{profile}: holds runs/ and eval/")
    b.add_argument("--out", default=None, help="output folder (default: the results folder)")
    b.add_argument("--baseline", default=DEFAULT_BASELINE, help="entry (or method) of P(improvement); '' = none")
    b.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (0 = no confidence intervals)")
    b.add_argument("--confidence", type=float, default=0.95)
    b.add_argument("--seed", type=int, default=0, help="seed of every bootstrap")
    b.add_argument("--delta", type=float, default=0.1, help="BandPO radius of the bound figure")
    b.add_argument("--no-embed-figures", action="store_true", help="do not embed the PNGs in the HTML page")
    p = sub.add_parser("publish", help="copy a profile's leaderboard and figures to the top-level results/")
    p.add_argument("--src", required=True, help="the profile's report folder, e.g. results/embedded")
    p.add_argument("--dest", default="results")
    p.add_argument("--config-json", default=None, help="the resolved run config (JSON) to record in provenance.json")
    f = sub.add_parser("bounds", help="only the bound figure")
    f.add_argument("--out", required=True, help="PNG path")
    f.add_argument("--delta", type=float, default=0.1)
    f.add_argument("--cap", type=float, default=None, help="cap of r_hi (default: none)")
    args = ap.parse_args(argv)
    try:
        if args.command == "build":
            if not 0 < args.confidence < 1:
                ap.error("--confidence must be in (0, 1)")
            written = build_report(
                args.results,
                args.out,
                args.baseline or None,
                args.resamples,
                args.confidence,
                args.seed,
                args.delta,
                not args.no_embed_figures,
            )
            print(json.dumps({k: str(v) for k, v in written.items()}, indent=1))
        elif args.command == "publish":
            config = json.loads(args.config_json) if args.config_json else None
            for path in publish(args.src, args.dest, config):
                print(path)
        else:
            plot_bounds(args.out, delta=args.delta, cap=args.cap)
            print(args.out)
    except (FileNotFoundError, ValueError) as e:
        print(f"python -m bandpo.report: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
