"""The score tables of the report: stats.csv's rows, the paired comparisons with the baseline, the power table
and a rerun's agreement. Pure functions of frames; the statistics they apply are `bandpo.stats` (resampling,
power and sample size, the tests): nothing here reads or writes files.

For a (model, entry) and a metric, the unit is one seed's score on one task. Over tasks (``task == "all"``):

* **mean**: mean over tasks of the mean over seeds; 95% CI by the percentile bootstrap, stratified by task (the
  seeds are resampled within each task: `scipy.stats.bootstrap` with one sample per task: ``ci_low``/``ci_high``,
  rliable's interval) and the Student-t interval of the per-seed means over tasks (``t_ci_low``/``t_ci_high``:
  mean +- t_{0.975, n-1} sd / sqrt(n), `t_interval`). The leaderboard shows the t interval: with 3-5 seeds the
  percentile bootstrap has only a handful of distinct resamples and covers far less than 95% (it treats the
  sample SD as the true one and ignores the t quantile), so it misses reruns on another machine.
* **IQM**: interquartile mean of all (seed, task) scores, ``scipy.stats.trim_mean(x, 0.25)``; same bootstrap.
  With fewer than 4 scores nothing is trimmed and the IQM equals the mean.
* **P(improvement) over the baseline** (``grpo`` by default): per task, the mean over all pairs (seed of the entry,
  seed of the baseline) of 1[x > y] + 1/2 1[x = y] (equal within `TIE_TOLERANCE`), averaged over tasks; CI by
  resampling both sets of seeds independently within each task.
* **paired comparison with the baseline** (the published comparison): seed s of every entry trains from base model s
  (``base_per_seed``), so entry and baseline runs of one seed share their base model and seed. Per seed the paired
  difference d_s = x_s - y_s (over tasks: of each seed's mean over tasks); ``diff`` is their mean with a 95%
  percentile-bootstrap CI over the pairs (seeded) and the paired t interval (``diff_t_ci_low``/``diff_t_ci_high``,
  the one the leaderboard shows), ``diff_poi`` = mean of 1[d_s > 0] + 1/2 1[d_s = 0] (the
  probability of improvement on the paired differences) with the same bootstrap, ``diff_sd`` their SD. Seeds that
  only one side has are left out and named in ``unpaired``. The base row's difference is the base model against
  the baseline trained from it.
* **power**: ``mde`` = the minimum detectable difference of a two-sided paired t-test at level 0.05 with 80%
  power, for the seeds used: exact, from the noncentral t (`minimum_detectable_difference`, `paired_t_power`);
  ``seeds_for_target`` the fewest seeds whose MDE at this SD is at most ``MDE_TARGET`` (2 points),
  `bandpo.stats.power.pairs_needed` with ``two_sided=True``. The SD behind both is itself an estimate from the
  few seeds run.
* training columns: `bandpo.analysis.training`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from bandpo.stats.power import ALPHA, POWER, minimum_detectable_difference, pairs_needed
from bandpo.stats.resample import (
    bootstrap_ci,
    improvement_share,
    iqm,
    mean_of_means,
    probability_of_improvement,
    seeded_rng,
)
from bandpo.stats.rule import SCORE_DIFF_RANGE, SCORE_RANGE, t_interval
from bandpo.study import BASE_ENTRY

DEFAULT_BASELINE = "grpo"
HEADLINE = ("mean", "pass", "maj", "best_bootstrap")  # metric families of the leaderboard, at k = n samples
ALL_TASKS = "all"
FINAL_FRACTION = 0.1  # "final" training statistics: mean over the last 10% of a run's steps
MDE_TARGET = 0.02  # a 2-point difference (scores are fractions): what the seed count should resolve


def metric_label(family: str, k: Any) -> str:
    """lm-eval's metric name from (family, k): ("pass", 8) -> "pass@8", ("best_bootstrap", 8) -> "best@8_bootstrap"."""
    k_str = "n" if k is None or (isinstance(k, float) and math.isnan(k)) else str(int(k))
    head, _, tail = family.partition("_")
    return f"{head}@{k_str}" + (f"_{tail}" if tail else "")


def _per_seed(frame: pd.DataFrame, tasks: Sequence[str]) -> pd.Series:
    """seed -> mean over ``tasks`` of the seed's values, for the seeds that have every one of them."""
    wide = frame.pivot_table(index="seed", columns="task", values="value", aggfunc="mean")
    wide = wide.reindex(columns=list(tasks)).dropna()
    return wide.mean(axis=1)


def paired_comparison(
    x: pd.DataFrame,
    y: pd.DataFrame,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    rng: np.random.Generator | int = 0,
    names: tuple[str, str] = ("entry", "baseline"),
) -> dict[str, Any]:
    """The paired comparison of scores ``x`` (one entry's) with ``y`` (the baseline's): frames of seed, task,
    value, paired by seed (seed s of both trained from base model s with seed s). A seed's score is its mean over
    the tasks of ``x``; seeds either side lacks (or lacks a task of) are left out and named in ``unpaired``.

    Returns n_pairs, diff (mean of x_s - y_s), diff_ci_low/high (percentile bootstrap over the pairs),
    diff_t_ci_low/high (the paired t interval, `t_interval` of the differences), diff_sd
    (ddof 1), diff_poi (share of d_s > 0, ties 1/2) and its CI, mde (`minimum_detectable_difference` for
    n_pairs), seeds_for_target (`pairs_needed`, two-sided, for `MDE_TARGET`), unpaired (text, "" when every seed
    is paired)."""
    tasks = sorted(set(x["task"]))
    xs, ys = _per_seed(x, tasks), _per_seed(y, tasks)
    seeds = sorted(set(xs.index) & set(ys.index))
    notes = []
    for name, own, other in ((names[0], xs, ys), (names[1], ys, xs)):
        lone = sorted(set(own.index) - set(other.index))
        if lone:
            notes.append(f"seed(s) {', '.join(map(str, lone))} only in {name}")
    lacking = sorted(set(x["seed"]) - set(xs.index)) + sorted(set(y["seed"]) - set(ys.index))
    if lacking:
        notes.append(f"seed(s) {', '.join(map(str, sorted(set(lacking))))} lack a task")
    d = (xs.loc[seeds] - ys.loc[seeds]).to_numpy(np.float64)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    n = len(d)
    sd = float(np.std(d, ddof=1)) if n >= 2 else float("nan")
    lo, hi = bootstrap_ci([d], mean_of_means, n_resamples, rng, confidence) if n else (float("nan"),) * 2
    poi_lo, poi_hi = bootstrap_ci([d], improvement_share, n_resamples, rng, confidence) if n else (float("nan"),) * 2
    t_lo, t_hi = t_interval(d, confidence, SCORE_DIFF_RANGE)
    return {
        "n_pairs": n,
        "diff": float(d.mean()) if n else float("nan"),
        "diff_ci_low": lo,
        "diff_ci_high": hi,
        "diff_t_ci_low": t_lo,
        "diff_t_ci_high": t_hi,
        "diff_sd": sd,
        "diff_poi": float(improvement_share(d)) if n else float("nan"),
        "diff_poi_ci_low": poi_lo,
        "diff_poi_ci_high": poi_hi,
        "mde": minimum_detectable_difference(sd, n),
        "seeds_for_target": pairs_needed(sd, MDE_TARGET, ALPHA, 1 - POWER, two_sided=True),
        "unpaired": "; ".join(notes),
    }


PAIRED_COLUMNS = ["n_pairs", "diff", "diff_ci_low", "diff_ci_high", "diff_t_ci_low", "diff_t_ci_high", "diff_sd",
                  "diff_poi", "diff_poi_ci_low", "diff_poi_ci_high", "mde", "seeds_for_target", "unpaired"]  # fmt: skip


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


STATS_COLUMNS = ["profile", "model", "entry", "method", "params", "task", "metric", "k", "label", "n_seeds", "mean",
                 "ci_low", "ci_high", "t_ci_low", "t_ci_high", "iqm", "iqm_ci_low", "iqm_ci_high", "poi", "poi_ci_low",
                 "poi_ci_high", "baseline", *PAIRED_COLUMNS]  # fmt: skip


def score_stats(
    scores: pd.DataFrame,
    baseline: str | None = DEFAULT_BASELINE,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Statistics of the evaluation scores (`load_eval_scores`), one row per (model, entry, task, metric, k).

    ``task`` is each task and ``"all"``: the aggregate over tasks of every headline metric (mean@n, pass@n, maj@n,
    best@n_bootstrap, where n is the task's sample count), stratified by task. Columns (`STATS_COLUMNS`): profile,
    model, entry, method, params, task, metric, k, label, n_seeds, mean, ci_low, ci_high (percentile bootstrap),
    t_ci_low, t_ci_high (Student t over the per-seed means), iqm, iqm_ci_low, iqm_ci_high, poi, poi_ci_low,
    poi_ci_high, baseline, then the paired comparison with the baseline (`paired_comparison`: n_pairs, diff,
    diff_ci_low, diff_ci_high, diff_sd, diff_poi, diff_poi_ci_low, diff_poi_ci_high, mde, seeds_for_target,
    unpaired). ``poi`` is rliable's P(entry > baseline) over all seed pairs (unpaired); ``diff_poi`` the same on
    the paired differences. Both are NaN in the baseline's own row."""
    if scores.empty:
        return pd.DataFrame(columns=STATS_COLUMNS)
    data = _stat_groups(scores)
    ident = scores.groupby(["model", "entry"], sort=False)[["profile", "method", "params"]].first()
    rows = []
    for model, frame in data.groupby("model", sort=True):
        base_entry = _baseline_entry(frame, baseline)
        for (entry, task, metric, k_key), g in frame.groupby(["entry", "group_task", "metric", "group_k"], sort=True):
            key = (model, entry, task, metric, k_key)
            ref = None
            if base_entry is not None and entry != base_entry:
                ref = frame[(frame["entry"] == base_entry) & (frame["group_task"] == task)
                            & (frame["metric"] == metric) & (frame["group_k"] == k_key)]  # fmt: skip
            ks = g["k"].dropna().unique()
            k = float(ks[0]) if len(ks) == 1 else float("nan")
            profile, method, params = ident.loc[(model, entry)]
            rows.append({"profile": profile, "model": model, "entry": entry, "method": method, "params": params,
                         "task": task, "metric": metric, "k": k, "label": metric_label(metric, k),
                         "n_seeds": int(g["seed"].nunique()),
                         **_group_stats(g, ref, key, base_entry, n_resamples, confidence, seed)})  # fmt: skip
    return pd.DataFrame(rows, columns=STATS_COLUMNS)


def _stat_groups(scores: pd.DataFrame) -> pd.DataFrame:
    """The scores, each row once within its own task (``group_task`` = its task, ``group_k`` = its k, -1 for none)
    and each headline score once more over tasks (``group_task`` "all", ``group_k`` -2: every task contributes its
    own k = n, the samples per problem; when a summary does not say n, the largest pass@k of that run and task)."""
    n = scores["n"].astype(float)
    largest_k = (
        scores["k"]
        .where(scores["metric"] == "pass")
        .groupby([scores["model"], scores["entry"], scores["seed"], scores["task"]])
        .transform("max")
    )
    n = n.fillna(largest_k.astype(float))
    headline = scores["metric"].isin(HEADLINE) & ((scores["metric"] != "pass") | (scores["k"].astype(float) == n))
    per_task = scores.assign(group_task=scores["task"], group_k=scores["k"].astype(float).fillna(-1.0))
    overall = scores[headline].assign(group_task=ALL_TASKS, group_k=-2.0)
    return pd.concat([per_task, overall], ignore_index=True)


def _group_stats(
    g: pd.DataFrame,
    ref: pd.DataFrame | None,
    key: tuple,
    base_entry: str | None,
    n_resamples: int,
    confidence: float,
    seed: int,
) -> dict[str, Any]:
    """The statistics of one (model, entry, task, metric, k) group of `score_stats`: mean, its percentile-bootstrap
    and t intervals, IQM, and against the baseline's group ``ref`` (None or empty: none) P(improvement) and the
    paired comparison. Every resampling is seeded by ``seed`` and the group's ``key``."""
    strata = {t: gt["value"].to_numpy(np.float64) for t, gt in g.groupby("task", sort=True)}
    samples = list(strata.values())
    lo, hi = bootstrap_ci(samples, mean_of_means, n_resamples, seeded_rng(seed, "mean", *key), confidence)
    t_lo, t_hi = t_interval(_per_seed(g, sorted(strata)).to_numpy(np.float64), confidence, SCORE_RANGE)
    iqm_lo, iqm_hi = bootstrap_ci(samples, iqm, n_resamples, seeded_rng(seed, "iqm", *key), confidence)
    poi = (float("nan"),) * 3
    paired = dict.fromkeys(PAIRED_COLUMNS, float("nan")) | {"n_pairs": 0, "unpaired": ""}
    if ref is not None and not ref.empty:
        y = {t: gt["value"].to_numpy(np.float64) for t, gt in ref.groupby("task", sort=True)}
        poi = probability_of_improvement(strata, y, n_resamples, confidence, seeded_rng(seed, "poi", *key))
        paired = paired_comparison(g, ref, n_resamples, confidence, seeded_rng(seed, "paired", *key),
                                   (str(key[1]), str(base_entry)))  # fmt: skip
    return {"mean": float(mean_of_means(*samples)), "ci_low": lo, "ci_high": hi, "t_ci_low": t_lo, "t_ci_high": t_hi,
            "iqm": float(iqm(*samples)), "iqm_ci_low": iqm_lo, "iqm_ci_high": iqm_hi, "poi": poi[0],
            "poi_ci_low": poi[1], "poi_ci_high": poi[2], "baseline": base_entry, **paired}  # fmt: skip


def power_table(stats: pd.DataFrame, families: Sequence[str] = ("mean", "pass")) -> pd.DataFrame:
    """Power of the published comparisons, one row per (experiment, subset, model, metric) over tasks
    (``task == "all"``; experiment and subset only when the stats have those columns): the pooled SD of the paired
    differences of the trained entries against the baseline (root mean square of their ``diff_sd``, each from the
    same seed count; the base row is left out), the seeds used (``n_seeds``: the fewest of any comparison;
    ``seed_counts``: ((seeds, comparisons), ...) ascending, e.g. ((3, 11), (10, 1)) where the primary pair has more
    seeds than the other entries), the MDE at that SD and the fewest seeds (`minimum_detectable_difference`), the
    range of the entries' own MDEs, and the seeds the pooled SD would need for an MDE of `MDE_TARGET`
    (`pairs_needed`, two-sided). Columns: [experiment, subset,] model, label, n_comparisons, n_seeds, seed_counts,
    sd, mde, mde_min, mde_max, target, seeds_for_target."""
    groups = [k for k in ("experiment", "subset") if k in stats]  # one row per section when the stats have them
    columns = [*groups, "model", "label", "n_comparisons", "n_seeds", "seed_counts", "sd", "mde", "mde_min",
               "mde_max", "target", "seeds_for_target"]  # fmt: skip
    if stats.empty or "diff_sd" not in stats:
        return pd.DataFrame(columns=columns)
    rows = []
    sel = stats[(stats["task"] == ALL_TASKS) & stats["metric"].isin(families) & (stats["entry"] != BASE_ENTRY)]
    sel = sel[sel["diff_sd"].notna()]
    for key, g in sel.groupby([*groups, "model", "label"], sort=True, dropna=False):
        *section, model, label = key
        n = int(g["n_pairs"].min())
        sd = float(np.sqrt(np.mean(np.square(g["diff_sd"].to_numpy(np.float64)))))
        rows.append(
            {
                **dict(zip(groups, section, strict=True)),
                "model": model,
                "label": label,
                "n_comparisons": len(g),
                "n_seeds": n,
                "seed_counts": tuple((int(k), int(v)) for k, v in g["n_pairs"].value_counts().sort_index().items()),
                "sd": sd,
                "mde": minimum_detectable_difference(sd, n),
                "mde_min": float(g["mde"].min()),
                "mde_max": float(g["mde"].max()),
                "target": MDE_TARGET,
                "seeds_for_target": pairs_needed(sd, MDE_TARGET, ALPHA, 1 - POWER, two_sided=True),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def rerun_agreement(published: pd.DataFrame, rerun: pd.DataFrame, labels: Sequence[str]) -> pd.DataFrame:
    """How a rerun's leaderboard (leaderboard.csv of another machine, thread count or BLAS path) sits against the
    published one, one row per (model, entry, metric label) both have: ``inside`` = the rerun's mean lies in the
    published 95% interval (the Student-t one the tables show, the bootstrap one for a leaderboard without it);
    ``inside_bootstrap`` = the same for the percentile-bootstrap interval; ``claim`` = the sign of the published
    paired difference from the baseline when its (t) interval excludes 0 (+1 / -1, else 0: no claim),
    ``claim_holds`` = the rerun's paired difference has that sign (None where there is no claim). Rows are matched
    on (experiment, subset,) model and entry. Columns: [experiment, subset,] model, entry, label, published, ci_low,
    ci_high, rerun, inside, inside_bootstrap, published_diff, rerun_diff, claim, claim_holds."""

    def within(lo: float, value: float, hi: float) -> bool | None:
        return bool(lo <= value <= hi) if not (math.isnan(lo) or math.isnan(hi)) else None

    rows = []
    keys = [k for k in ("experiment", "subset") if k in published and k in rerun]  # one row per section
    # "" and NaN alike for a whole-task row (a column of blanks reads back as float)
    published, rerun = (
        f.assign(**{k: f[k].astype(object).fillna("").astype(str) for k in keys}) for f in (published, rerun)
    )
    both = published.merge(rerun, on=[*keys, "model", "entry"], suffixes=("", "_rerun"))
    for _, r in both.iterrows():
        for label in labels:
            if label not in published or f"{label}_rerun" not in both:
                continue
            t = "_t" if f"{label}_t_ci_low" in published else ""
            lo, hi, value = r[f"{label}{t}_ci_low"], r[f"{label}{t}_ci_high"], r[f"{label}_rerun"]
            t = "_t" if f"{label}_diff_t_ci_low" in published else ""
            d, dlo, dhi = (r.get(f"{label}_diff{x}", float("nan")) for x in ("", f"{t}_ci_low", f"{t}_ci_high"))
            claim = 1 if dlo > 0 else (-1 if dhi < 0 else 0)
            rerun_d = r.get(f"{label}_diff_rerun", float("nan"))
            rows.append(
                {
                    **{k: r[k] for k in keys},
                    "model": r["model"],
                    "entry": r["entry"],
                    "label": label,
                    "published": r[label],
                    "ci_low": lo,
                    "ci_high": hi,
                    "rerun": value,
                    "inside": within(lo, value, hi),
                    "inside_bootstrap": within(r[f"{label}_ci_low"], value, r[f"{label}_ci_high"]),
                    "published_diff": d,
                    "rerun_diff": rerun_d,
                    "claim": claim,
                    "claim_holds": bool(np.sign(rerun_d) == claim) if claim else None,
                }
            )
    return pd.DataFrame(rows)
