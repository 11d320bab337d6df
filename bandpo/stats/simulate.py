"""How the verdict rule behaves, by simulating the t procedure itself: its realised error rates and expected pairs
(`operating_characteristics`) and the stability of a verdict (`stability`): the probability that an independent
rerun of the whole procedure gives the same verdict, P(better)^2 + P(not better)^2, simulated from an observed mean
and SD (normal differences; `bootstrap_stability` resamples the observed differences instead). Deterministic for a
seed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from bandpo.stats.design import ALPHA, BETA, SequentialDesign, boundaries
from bandpo.stats.rule import BETTER, NOT_BETTER, UNDECIDED, clean_differences, t_statistic

_CHUNK = 40_000


def _rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _run(design: SequentialDesign, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The procedure on each row of ``d`` (reps x n_max differences): (better?, pairs at the stop)."""
    looks = boundaries(design)
    ns = np.array([lk.n for lk in looks])
    e = np.array([lk.efficacy_t for lk in looks])
    f = np.array([lk.futility_t for lk in looks])
    s1 = np.cumsum(d, axis=1)[:, ns - 1]
    s2 = np.cumsum(d * d, axis=1)[:, ns - 1]
    mean = s1 / ns
    var = np.maximum(s2 - ns * mean * mean, 0.0) / (ns - 1)
    t = t_statistic(mean, np.sqrt(var), ns)
    up = t >= e
    stop = up | (t <= f)
    stop[:, -1] = True
    first = np.argmax(stop, axis=1)
    rows = np.arange(d.shape[0])
    return up[rows, first], ns[first]


@dataclass(frozen=True)
class Characteristics:
    """Simulated operating characteristics at one (Δ, SD): P(better), P(not better) (they sum to 1), the expected
    pairs at the stop and the chance of stopping at each look, from ``reps`` runs."""

    delta: float
    sd: float
    p_better: float
    p_not_better: float
    expected_n: float
    p_stop: tuple[float, ...]
    reps: int


def _simulate(design, draw, reps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    better, n = [], []
    done = 0
    while done < reps:
        m = min(_CHUNK, reps - done)
        b, s = _run(design, draw(rng, m))
        better.append(b)
        n.append(s)
        done += m
    return np.concatenate(better), np.concatenate(n)


def operating_characteristics(
    design: SequentialDesign, delta: float, sd: float, reps: int = 100_000, rng: np.random.Generator | int = 0
) -> Characteristics:
    """P(better), P(not better) and the expected pairs of the exact t procedure when the paired differences are
    normal with mean ``delta`` and SD ``sd``, from ``reps`` simulated runs (deterministic for an int ``rng``)."""
    if not (math.isfinite(delta) and math.isfinite(sd) and sd > 0 and reps > 0):
        raise ValueError("delta finite, sd > 0, reps > 0")
    better, n = _simulate(design, lambda g, m: delta + sd * g.standard_normal((m, design.n_max)), reps, _rng(rng))
    p = float(better.mean())
    stops = tuple(float(np.mean(n == k)) for k in design.ns)
    return Characteristics(delta, sd, p, 1.0 - p, float(n.mean()), stops, reps)


@dataclass(frozen=True)
class Stability:
    """P(an independent rerun of the whole procedure gives the same verdict) = P(better)^2 + P(not better)^2 at
    the truth simulated (the observed mean and SD, or the observed differences resampled), with P(better), the
    expected pairs, and ``predictive``: the same averaged over the uncertainty of the observed mean and SD
    (NaN unless the pairs they came from are given)."""

    stability: float
    p_better: float
    expected_n: float
    predictive: float = math.nan
    reps: int = 0

    @property
    def p_not_better(self) -> float:
        return 1.0 - self.p_better


def agreement(p: float, reps: int) -> float:
    """P(two independent runs agree) from a simulated P(better) over ``reps`` runs: unbiased for p^2 + (1-p)^2."""
    if reps < 2:
        return p * p + (1 - p) * (1 - p)
    return 1.0 - 2.0 * p * (1.0 - p) * reps / (reps - 1)


def stability(
    design: SequentialDesign,
    mean: float,
    sd: float,
    n_observed: int | None = None,
    reps: int = 100_000,
    rng: np.random.Generator | int = 0,
) -> Stability:
    """The stability of ``design``'s verdict when the paired differences are normal with the observed ``mean`` and
    ``sd`` (plug-in). With ``n_observed`` (the pairs the mean and SD came from) also the predictive stability:
    per simulated rerun pair, a true SD drawn from sd^2 (n - 1) / chi2_{n-1} and a true mean from N(mean,
    SD^2 / n) (the posterior under the reference prior), then two independent runs of the procedure."""
    gen = _rng(rng)
    oc = operating_characteristics(design, mean, sd, reps, gen)
    pred = math.nan
    if n_observed is not None:
        if n_observed < 2:
            raise ValueError("n_observed: at least 2 pairs")
        sig = sd * np.sqrt((n_observed - 1) / gen.chisquare(n_observed - 1, reps))
        mu = mean + sig / math.sqrt(n_observed) * gen.standard_normal(reps)
        runs = []
        for _ in range(2):
            z = gen.standard_normal((reps, design.n_max))
            runs.append(_run(design, mu[:, None] + sig[:, None] * z)[0])
        pred = float(np.mean(runs[0] == runs[1]))
    return Stability(agreement(oc.p_better, reps), oc.p_better, oc.expected_n, pred, reps)


def bootstrap_stability(
    design: SequentialDesign,
    diffs: Sequence[float] | np.ndarray,
    reps: int = 100_000,
    rng: np.random.Generator | int = 0,
) -> Stability:
    """`stability` with the observed differences as the truth: each simulated run draws its n_max pairs with
    replacement from ``diffs`` (the nonparametric check of the normal one)."""
    d = clean_differences(diffs)
    if d.size < 2:
        raise ValueError("diffs: at least 2 pairs")
    better, n = _simulate(design, lambda g, m: d[g.integers(0, d.size, (m, design.n_max))], reps, _rng(rng))
    p = float(better.mean())
    return Stability(agreement(p, reps), p, float(n.mean()), math.nan, reps)


def fixed_n_stability(
    mean: float,
    sd: float,
    n: int,
    margin: float,
    alpha: float = ALPHA,
    beta: float = BETA,
    reps: int = 100_000,
    rng: np.random.Generator | int = 0,
) -> tuple[float, dict[str, float]]:
    """The stability of `fixed_n_decision` at n pairs (three words: better, not better, undecided) for normal
    differences with ``mean`` and ``sd``: (sum of the words' squared probabilities, the probabilities)."""  # fmt: skip
    gen = _rng(rng)
    d = mean + sd * gen.standard_normal((reps, n))
    m, s = d.mean(axis=1), d.std(axis=1, ddof=1)
    t, tm = t_statistic(m, s, n), t_statistic(m - margin, s, n)
    b = t >= student_t.isf(alpha, n - 1)
    nb = ~b & (tm <= -student_t.isf(beta, n - 1))
    p = {BETTER: float(b.mean()), NOT_BETTER: float(nb.mean())}
    p[UNDECIDED] = 1.0 - p[BETTER] - p[NOT_BETTER]
    return float(sum(v * v for v in p.values())), p
