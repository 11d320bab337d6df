"""Resampling statistics of the report (rliable-style, Agarwal et al. 2021, computed with scipy; every resample
seeded): the percentile bootstrap, the interquartile mean and the probability of improvement.

* `bootstrap_ci`: the percentile-bootstrap interval of a statistic over independent samples (strata), each
  resampled within itself (`scipy.stats.bootstrap`); `seeded_rng` gives each row of a table its own generator.
* `iqm`: the interquartile mean, ``scipy.stats.trim_mean(x, 0.25)`` of all the scores.
* `probability_of_improvement`: per task, the mean over all pairs (seed of x, seed of y) of 1[x > y] + 1/2 1[x = y]
  (equal within `TIE_TOLERANCE`), averaged over tasks, with a bootstrap resampling both sets of seeds;
  `improvement_share` is the same share for paired differences.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import bootstrap, trim_mean

# Scores closer than this are a tie in P(improvement): two runs with the same score (a fraction of problems) can
# differ in its last float bits when their sums ran in another order; rounding to the tables' 6 digits would
# otherwise turn a win into a tie
TIE_TOLERANCE = 1e-9


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
    return improvement_share(x[..., :, None] - y[..., None, :], axis=(-2, -1))


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


def improvement_share(d: np.ndarray, axis: int | tuple[int, ...] = -1) -> np.ndarray:
    """Share of positive differences, ties (within `TIE_TOLERANCE`) counting one half."""
    return (d > TIE_TOLERANCE).mean(axis=axis) + 0.5 * (np.abs(d) <= TIE_TOLERANCE).mean(axis=axis)
