"""Statistics of the report (rliable-style, Agarwal et al. 2021, computed with scipy; all resampling seeded).

Pure functions of frames and arrays: nothing here reads or writes files.

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
  `seeds_needed`. The SD behind both is itself an estimate from the few seeds run.
* training columns: `bandpo.analysis.training`.
"""

from __future__ import annotations

import functools
import json
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.stats import bootstrap, nct, trim_mean
from scipy.stats import t as student_t

from bandpo.plan.sweep import BASE_ENTRY
from bandpo.verdict import rule as verdict_rule
from bandpo.verdict.design import ALPHA as RULE_ALPHA
from bandpo.verdict.design import BETA as RULE_BETA
from bandpo.verdict.rule import SCORE_DIFF_RANGE, SCORE_RANGE, t_interval

DEFAULT_BASELINE = "grpo"
HEADLINE = ("mean", "pass", "maj", "best_bootstrap")  # metric families of the leaderboard, at k = n samples
ALL_TASKS = "all"
FINAL_FRACTION = 0.1  # "final" training statistics: mean over the last 10% of a run's steps
MDE_TARGET = 0.02  # a 2-point difference (scores are fractions): what the seed count should resolve
# Scores closer than this are a tie in P(improvement): two runs with the same score (a fraction of problems) can
# differ in its last float bits when their sums ran in another order; rounding to the tables' 6 digits would
# otherwise turn a win into a tie
TIE_TOLERANCE = 1e-9
POWER, ALPHA = 0.8, 0.05  # of the minimum detectable difference: 80% power, two-sided level 0.05
MAX_SEEDS = 10_000  # seeds_needed gives up beyond this


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
    return trim_mean(np.concatenate(strata, axis=axis), 0.25, axis=axis)


def _poi_pairs(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mean over all pairs of 1[x > y] + 1/2 1[x = y], over the last axis of each (batch dims broadcast); x = y
    within `TIE_TOLERANCE`."""
    return _improvement(x[..., :, None] - y[..., None, :], axis=(-2, -1))


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


def paired_t_power(diff: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """Exact power of the two-sided paired t-test at level ``alpha`` from ``n`` pairs whose differences are normal
    with mean ``diff`` and standard deviation ``sd``: P(|T| > t_{1-alpha/2, n-1}) for T noncentral t with n - 1
    degrees of freedom and noncentrality diff * sqrt(n) / sd (`scipy.stats.nct`). NaN for n < 2 or an unknown or
    zero SD."""
    if n < 2 or not (math.isfinite(sd) and sd > 0 and math.isfinite(diff)):
        return float("nan")
    return _power_at(diff * math.sqrt(n) / sd, n - 1, alpha)


def _power_at(nc: float, df: int, alpha: float) -> float:
    crit = student_t.ppf(1 - alpha / 2, df)
    # both tails as upper tails: nct.cdf(-crit, df, nc) returns NaN for some large nc, nct.sf(crit, df, -nc) does not
    return float(nct.sf(crit, df, nc) + nct.sf(crit, df, -nc))


@functools.lru_cache(maxsize=4096)
def _noncentrality_for_power(n: int, alpha: float, power: float) -> float:
    """The noncentrality at which the two-sided paired t-test from ``n`` pairs has power ``power`` (the power
    rises with it from ``alpha`` at 0): bracketed from the t-quantile approximation, solved by Brent's method."""
    df = n - 1
    hi = max(1.0, float(student_t.ppf(1 - alpha / 2, df) + student_t.ppf(power, df)))
    while _power_at(hi, df, alpha) < power:  # the approximation falls short of the power: widen the bracket
        hi *= 2
    return float(brentq(lambda nc: _power_at(nc, df, alpha) - power, 0.0, hi, xtol=1e-12, rtol=1e-14, maxiter=200))


def minimum_detectable_difference(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true mean difference a two-sided paired t-test at level ``alpha`` detects with probability
    ``power`` from ``n`` pairs whose differences have standard deviation ``sd``: the exact solution d of
    `paired_t_power` (d, sd, n) = power, i.e. nc * sd / sqrt(n) where nc is the noncentrality of the noncentral t
    with n - 1 degrees of freedom that reaches the power. (The usual approximation (t_{1-alpha/2, n-1} +
    t_{power, n-1}) * sd / sqrt(n) is too small at few seeds: 5.36 against 5.65 SDs / sqrt(3) at 3 seeds, i.e.
    77% power, not 80%.) 0 for an SD of 0; NaN for n < 2 or an unknown SD."""
    if n < 2 or not math.isfinite(sd) or sd < 0 or not 0 < alpha < power < 1:
        return float("nan")
    if sd == 0:
        return 0.0
    return _noncentrality_for_power(int(n), float(alpha), float(power)) * sd / math.sqrt(n)


def seeds_needed(sd: float, target: float = MDE_TARGET, alpha: float = ALPHA, power: float = POWER) -> float:
    """The fewest seeds (pairs) whose exact `minimum_detectable_difference` at this SD is at most ``target``: 2 when
    the SD is 0, NaN when it is unknown, inf beyond `MAX_SEEDS`. The SD is itself an estimate (from the few seeds
    run), so the answer is as uncertain as that estimate."""
    if not math.isfinite(sd) or target <= 0:
        return float("nan")
    if sd == 0:
        return 2.0
    lo, hi = 2, MAX_SEEDS  # the MDE falls with n: bisect for the first n that reaches the target
    if minimum_detectable_difference(sd, hi, alpha, power) > target:
        return float("inf")
    while lo < hi:
        mid = (lo + hi) // 2
        if minimum_detectable_difference(sd, mid, alpha, power) <= target:
            hi = mid
        else:
            lo = mid + 1
    return float(lo)


# ------------------------------------------------------------------------------------------------------------
# The verdict rule's two one-sided tests from a comparison's summary (leaderboard.csv holds mean, SD and count)
# ------------------------------------------------------------------------------------------------------------
def one_sided_tests(mean: float, sd: float, n: int, margin: float) -> dict[str, float]:
    """The two one-sided paired t tests of the verdict rule (`bandpo.verdict.rule.fixed_n_decision`) from the
    differences' mean, SD (ddof 1) and count, with T = mean sqrt(n) / sd and T_margin = (mean - margin) sqrt(n) /
    sd on n - 1 degrees of freedom:

    * ``p_better``: the p-value of H0: Δ <= 0 against Δ > 0, P(T_{n-1} >= T) ("better" when <= alpha);
    * ``p_not_better``: the p-value of H1: Δ >= margin against Δ < margin, P(T_{n-1} <= T_margin) ("not better
      by the margin" when <= beta).

    Also ``t`` and ``t_margin``. NaN p-values for fewer than 2 pairs, a missing SD or no positive margin (then
    ``p_not_better`` alone is NaN); an SD of 0 gives p-values 0 or 1 (`bandpo.verdict.rule.t_statistic`)."""
    nan = float("nan")
    out = {"p_better": nan, "p_not_better": nan, "t": nan, "t_margin": nan}
    n = int(n) if n == n else 0
    if n < 2 or not (math.isfinite(mean) and math.isfinite(sd)):
        return out
    t = float(verdict_rule.t_statistic(mean, sd, n))
    out["t"], out["p_better"] = t, float(student_t.sf(t, n - 1))
    if math.isfinite(margin) and margin > 0:
        tm = float(verdict_rule.t_statistic(mean - margin, sd, n))
        out["t_margin"], out["p_not_better"] = tm, float(student_t.cdf(tm, n - 1))
    return out


def rule_verdict(p_better: float, p_not_better: float, alpha: float = RULE_ALPHA, beta: float = RULE_BETA) -> str:
    """The verdict rule's word from its two p-values (raw: `fixed_n_decision`; Holm-adjusted: a family's):
    `BETTER` when ``p_better`` <= alpha, else `NOT_BETTER` when ``p_not_better`` <= beta, else `UNDECIDED`
    (also without a test)."""
    if p_better == p_better and p_better <= alpha:
        return verdict_rule.BETTER
    if p_not_better == p_not_better and p_not_better <= beta:
        return verdict_rule.NOT_BETTER
    return verdict_rule.UNDECIDED


# ------------------------------------------------------------------------------------------------------------
# Four verdicts (retired for comparisons with the control, issue #55): kept for the descriptive rule of the
# random-reward control, each run's final entropy against its own step-1 entropy (no control, no question of
# "better"): rises, falls, unchanged within a margin fixed before the runs, or unresolved
# ------------------------------------------------------------------------------------------------------------
EQUIVALENCE_CONFIDENCE = 0.90  # two one-sided tests at 5% each <=> the 90% interval inside [-margin, +margin]
EQUIVALENT, UNRESOLVED = "equivalent", "unresolved"


def paired_tests(d: Sequence[float] | np.ndarray, margin: float = math.nan) -> dict[str, float]:
    """The two tests of a paired design on the per-seed differences ``d`` (treatment - control), n = pairs:

    * difference: the two-sided one-sample t-test of mean(d) = 0, p_value = 2 P(T_{n-1} > |mean| sqrt(n) / sd);
    * equivalence within ``margin`` (TOST, Schuirmann 1987): the two one-sided t-tests of mean(d) <= -margin and
      mean(d) >= +margin, p_equivalence = the larger of their p-values; p_equivalence < 0.05 exactly when the
      90% t interval (ci90_low, ci90_high) lies inside [-margin, +margin]. NaN without a margin.

    NaN p-values for fewer than 2 pairs; an SD of 0 gives p 0 or 1 (the differences are all equal)."""
    x = np.asarray(d, dtype=np.float64)
    x = x[np.isfinite(x)]
    sd = float(np.std(x, ddof=1)) if x.size >= 2 else math.nan
    lo, hi = t_interval(x, EQUIVALENCE_CONFIDENCE)
    mean = float(x.mean()) if x.size else math.nan
    return {**summary_tests(mean, sd, x.size, margin), "ci90_low": lo, "ci90_high": hi}


def summary_tests(mean: float, sd: float, n: int, margin: float = math.nan) -> dict[str, float]:
    """`paired_tests`' p-values from the differences' mean, SD (ddof 1) and count alone (as leaderboard.csv holds
    them): p_value (difference from 0, two-sided) and p_equivalence (TOST within ``margin``; NaN without one)."""
    nan = float("nan")
    out = {"p_value": nan, "p_equivalence": nan}
    n = int(n) if n == n else 0
    if n < 2 or not (math.isfinite(mean) and math.isfinite(sd)):
        return out
    has_margin = math.isfinite(margin) and margin > 0
    se = sd / math.sqrt(n)
    if se == 0:
        out["p_value"] = 0.0 if mean != 0 else 1.0
        out["p_equivalence"] = (0.0 if abs(mean) < margin else 1.0) if has_margin else nan
        return out
    out["p_value"] = float(2 * student_t.sf(abs(mean) / se, n - 1))
    if has_margin:
        p_low = float(student_t.sf((mean + margin) / se, n - 1))  # H0: mean <= -margin
        p_high = float(student_t.cdf((mean - margin) / se, n - 1))  # H0: mean >= +margin
        out["p_equivalence"] = max(p_low, p_high)
    return out


def four_verdict(
    difference: float, p_value: float, p_equivalence: float, above: str, below: str, alpha: float = ALPHA
) -> str:
    """One of four verdicts from a comparison's tests (`paired_tests`, p-values raw or Holm-adjusted):
    ``equivalent`` when the equivalence test rejects (the difference, whatever its sign, is inside the margin: a
    resolved difference smaller than the margin is one nobody would act on, so it reads as equivalent), else
    ``above`` / ``below`` when the difference test rejects (by the sign of the difference), else ``unresolved``
    (also without any test: fewer than 2 pairs)."""
    if p_equivalence == p_equivalence and p_equivalence < alpha:
        return EQUIVALENT
    if p_value == p_value and p_value < alpha:
        return above if difference > 0 else below
    return UNRESOLVED


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment (Holm 1979) of a family of p-values (NaN stays NaN and is not counted): sorted
    ascending, p_(i) x (m - i + 1), made non-decreasing, capped at 1; controls the family-wise error rate at the
    level the adjusted p-values are compared with, under any dependence."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if ok.size == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    m = order.size
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out[order] = adjusted
    return out


def _improvement(d: np.ndarray, axis: int | tuple[int, ...] = -1) -> np.ndarray:
    """Share of positive differences, ties (within `TIE_TOLERANCE`) counting one half."""
    return (d > TIE_TOLERANCE).mean(axis=axis) + 0.5 * (np.abs(d) <= TIE_TOLERANCE).mean(axis=axis)


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
    n_pairs), seeds_for_target (`seeds_needed` for `MDE_TARGET`), unpaired (text, "" when every seed is paired)."""
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
    poi_lo, poi_hi = bootstrap_ci([d], _improvement, n_resamples, rng, confidence) if n else (float("nan"),) * 2
    t_lo, t_hi = t_interval(d, confidence, SCORE_DIFF_RANGE)
    return {
        "n_pairs": n,
        "diff": float(d.mean()) if n else float("nan"),
        "diff_ci_low": lo,
        "diff_ci_high": hi,
        "diff_t_ci_low": t_lo,
        "diff_t_ci_high": t_hi,
        "diff_sd": sd,
        "diff_poi": float(_improvement(d)) if n else float("nan"),
        "diff_poi_ci_low": poi_lo,
        "diff_poi_ci_high": poi_hi,
        "mde": minimum_detectable_difference(sd, n),
        "seeds_for_target": seeds_needed(sd),
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
    (`seeds_needed`). Columns: [experiment, subset,] model, label, n_comparisons, n_seeds, seed_counts, sd, mde,
    mde_min, mde_max, target, seeds_for_target."""
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
                "seeds_for_target": seeds_needed(sd),
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
