"""The verdict rule of a comparison with the control, and seeds until it is decided (issue #55; docs/statistics.md,
"The verdict rule and seeds until decided").

**The question.** Is the treatment better than the control by at least the margin δ? On the paired differences
d_i = treatment - control (same base model and seed; scores are fractions, so δ = 0.02 is 2 points of mean@8), the
rule tests H0: Δ <= 0 against H1: Δ >= δ and answers with one of two words:

* ``better`` (`BETTER`): H0 rejected at one-sided level ``alpha``: the treatment is better than the control;
* ``not better by the margin`` (`NOT_BETTER`): H1 rejected at level ``beta``: the treatment is not better by δ.

Between 0 and δ both words are true, and the rule may say either; outside it only one is, and the probability of
saying it grows with the pairs. Sign, size and equivalence are estimates (the mean paired difference with its 95%
t interval, `bandpo.analysis.stats.t_interval`), never verdicts. A comparison not decided within its pairs reads
``undecided`` (`UNDECIDED`, with the n it would need).

**Seeds until decided** (`SequentialDesign`, `decide`): a look every ``k`` pairs up to ``n_max``; at look j the
paired t statistic T = mean sqrt(n) / sd of the first n_j pairs is compared with two boundaries: ``better`` if
T >= e_j, ``not better`` if T <= f_j, else the next k pairs. The futility stops are binding in use (a look that
crosses f_j ends the comparison), and at the last look f_K = e_K, so a verdict always comes by ``n_max``. The
boundaries come from Lan-DeMets spending of ``alpha`` (under Δ = 0) and ``beta`` (under Δ = δ at the planning
SD): z boundaries by the recursion on the Brownian motion of the score (numerical integration, `z_boundaries`),
the efficacy ones computed non-binding (as if there were no futility stops: the t procedure's looks are less
correlated than the z statistics', which a binding computation turns into a type I error above alpha), then each
moved to the t scale by matching its tail probability at the look's degrees of freedom (efficacy under Δ = 0:
central t; futility under Δ = δ: noncentral t at the planning SD). ``n_max`` is the smallest multiple of ``k`` at
which the two boundaries of the last look meet (`plan_design`): power 1 - beta at Δ = δ when the true SD is at most
the planning SD. `operating_characteristics` checks the realised error rates and the expected pairs by simulating
the t procedure itself.

**Stability** (`stability`): the probability that an independent rerun of the whole procedure gives the same verdict,
P(better)^2 + P(not better)^2, simulated from an observed mean and SD (normal differences; `bootstrap_stability`
resamples the observed differences instead). A comparison at a fixed n (a secondary) uses `fixed_n_decision`, the
single-look case of the same rule with the observed SD in place of the planning SD.

``python -m bandpo.analysis.sequential plan`` prints a design's table; ``plan --from-publications`` the block of
docs/statistics.md, from the per-seed scores of the three publications in git history. Pure numpy and scipy.
"""

from __future__ import annotations

import argparse
import functools
import io
import math
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import chi2, nct, norm
from scipy.stats import t as student_t

from bandpo.analysis.stats import SCORE_DIFF_RANGE, t_interval

BETTER, NOT_BETTER, UNDECIDED = "better", "not better by the margin", "undecided"
VERDICTS = (BETTER, NOT_BETTER)
SPENDING_FAMILIES = ("obf", "pocock", "hsd")  # Lan-DeMets O'Brien-Fleming and Pocock types, Hwang-Shih-DeCani
SD_CONFIDENCE = 0.90  # the planning SD: this one-sided upper confidence bound of the pooled SD
POINTS = 100.0  # scores are fractions; tables print points

# The design this benchmark uses for every primary (docs/statistics.md): one-sided 5% at Δ = 0, power 0.9 at
# Δ = δ; O'Brien-Fleming-type spending of alpha (nothing to spare early: an early "better" needs a large effect),
# Hwang-Shih-DeCani(-2) spending of beta (an early "not better" once the differences sit well below δ)
ALPHA, BETA = 0.05, 0.10
SPENDING, FUTILITY_SPENDING = "obf", "hsd:-2"

_GRID_STEP = 0.1  # grid spacing of the recursion, in SDs of one look's increment of the score
_GRID_MAX = 2001
_TAIL = 10.0  # the recursion's grid spans the mean +- this many SDs


# ------------------------------------------------------------------------------------------------------------
# Spending functions
# ------------------------------------------------------------------------------------------------------------
def parse_spending(spec: str) -> tuple[str, float]:
    """``"obf"``, ``"pocock"`` or ``"hsd:GAMMA"`` -> (family, gamma); ValueError for anything else."""
    family, _, param = str(spec).partition(":")
    if family not in SPENDING_FAMILIES:
        raise ValueError(f"unknown spending {spec!r}: one of 'obf', 'pocock', 'hsd:GAMMA'")
    if family == "hsd":
        try:
            gamma = float(param)
        except ValueError:
            raise ValueError(f"spending {spec!r}: 'hsd:GAMMA' needs a number, e.g. 'hsd:-2'") from None
        if not math.isfinite(gamma):
            raise ValueError(f"spending {spec!r}: gamma must be finite")
        return family, gamma
    if param:
        raise ValueError(f"spending {spec!r}: {family!r} takes no parameter")
    return family, math.nan


def spent(spec: str, level: float, t: float | np.ndarray) -> np.ndarray:
    """The error probability spent by information fraction ``t`` (0 at 0, ``level`` at 1) of a total ``level``:

    * ``obf``: Lan-DeMets O'Brien-Fleming type, 2 - 2 Phi(z_{1-level/2} / sqrt(t)) (gsDesign's sfLDOF);
    * ``pocock``: Lan-DeMets Pocock type, level ln(1 + (e - 1) t) (sfLDPocock);
    * ``hsd:gamma``: Hwang-Shih-DeCani, level (1 - exp(-gamma t)) / (1 - exp(-gamma)), level t for gamma 0
      (sfHSD; gamma -4 is close to O'Brien-Fleming, 1 to Pocock)."""
    family, gamma = parse_spending(spec)
    t = np.clip(np.asarray(t, dtype=np.float64), 0.0, 1.0)
    if family == "obf":
        with np.errstate(divide="ignore"):
            out = 2.0 * norm.sf(norm.isf(level / 2.0) / np.sqrt(t))
    elif family == "pocock":
        out = level * np.log1p((math.e - 1.0) * t)
    elif gamma == 0:
        out = level * t
    else:
        out = level * -np.expm1(-gamma * t) / -np.expm1(-gamma)
    return np.where(t >= 1.0, level, out)


# ------------------------------------------------------------------------------------------------------------
# Boundaries on the z scale: the recursion on the score's Brownian motion
# ------------------------------------------------------------------------------------------------------------
class _Paths:
    """The sub-density of the B-value B(t) = Z(t) sqrt(t) (Brownian motion with drift ``theta`` per unit of
    information fraction) over the paths that have not stopped, on a grid with Simpson weights: ``mass`` holds
    weight x density at each node (Armitage, McPherson and Rowe 1969; Jennison and Turnbull 2000, ch. 19)."""

    def __init__(self, theta: float):
        self.theta = theta
        self.t = 0.0
        self.x = np.zeros(1)
        self.mass = np.ones(1)  # all paths start at B(0) = 0

    def _step(self, t: float) -> tuple[float, float]:
        dt = t - self.t
        if dt <= 0:
            raise ValueError("information fractions must increase")
        return self.theta * dt, math.sqrt(dt)

    def p_up(self, t: float, z: float) -> float:
        """P(not stopped before t, Z(t) >= z)."""
        if z == math.inf:
            return 0.0
        mu, s = self._step(t)
        return float(np.dot(self.mass, norm.sf((z * math.sqrt(t) - self.x - mu) / s)))

    def p_down(self, t: float, z: float) -> float:
        """P(not stopped before t, Z(t) <= z)."""
        if z == -math.inf:
            return 0.0
        mu, s = self._step(t)
        return float(np.dot(self.mass, norm.cdf((z * math.sqrt(t) - self.x - mu) / s)))

    def advance(self, t: float, low: float, high: float) -> None:
        """Move to fraction ``t`` keeping the paths with ``low`` < Z(t) < ``high``."""
        mu, s = self._step(t)
        lo = max(low * math.sqrt(t), float(self.x.min()) + mu - _TAIL * s)
        hi = min(high * math.sqrt(t), float(self.x.max()) + mu + _TAIL * s)
        if hi <= lo:
            self.x, self.mass, self.t = np.zeros(1), np.zeros(1), t
            return
        m = int(min(_GRID_MAX, max(101, math.ceil((hi - lo) / (_GRID_STEP * s)))))
        m += 1 - m % 2  # odd, for Simpson's rule
        y = np.linspace(lo, hi, m)
        w = np.ones(m)
        w[1:-1:2], w[2:-1:2] = 4.0, 2.0
        w *= (hi - lo) / (m - 1) / 3.0
        density = norm.pdf((y[:, None] - self.x[None, :] - mu) / s) @ self.mass / s
        self.x, self.mass, self.t = y, w * density, t


class BoundariesCross(ValueError):
    """The futility boundary of an interim look reached its efficacy boundary: every path stops there, and the
    design has more looks than it can use."""

    def __init__(self, look: int):
        super().__init__(f"the boundaries cross at look {look}")
        self.look = look


def _solve(f, target: float, look: int) -> float:
    """The root of the monotone ``f`` (crossing probability as a function of a z boundary) equal to ``target``;
    `BoundariesCross` when the paths still running cannot spend it (the boundaries crossed at an earlier look)."""
    from scipy.optimize import brentq

    if (f(-40.0) - target) * (f(40.0) - target) > 0:
        raise BoundariesCross(look)
    return float(brentq(lambda z: f(z) - target, -40.0, 40.0, xtol=1e-12, rtol=1e-12, maxiter=500))


@dataclass(frozen=True)
class ZBoundaries:
    """z boundaries of a design on the information fractions ``fractions``: ``efficacy[j]`` (stop with H0 rejected
    when Z_j >= it; inf: no stop) and ``futility[j]`` (stop with H1 rejected when Z_j <= it; -inf: none);
    ``futility_spent`` the boundary beta-spending gives at the last look before it is set to the efficacy one
    (the two meet when it is at most the efficacy boundary), ``alpha_spent``/``beta_spent`` the cumulative
    spending."""

    fractions: tuple[float, ...]
    efficacy: tuple[float, ...]
    futility: tuple[float, ...]
    futility_spent: float
    alpha_spent: tuple[float, ...]
    beta_spent: tuple[float, ...]


def z_boundaries(
    fractions: Sequence[float],
    alpha: float,
    spending: str = SPENDING,
    beta: float | None = None,
    futility_spending: str = FUTILITY_SPENDING,
    drift: float = math.nan,
    binding: bool = False,
) -> ZBoundaries:
    """Lan-DeMets boundaries on the z scale at the increasing information ``fractions`` (last 1): efficacy by
    spending ``alpha`` under Δ = 0; with ``beta``, futility by spending ``beta`` under the drift ``drift`` (the
    expected Z at full information under H1), and the last look's futility boundary set to its efficacy one
    (`BoundariesCross` when the two cross at an earlier look).
    ``binding``: the efficacy boundaries count the futility stops (they spend the alpha those stops free); else
    (non-binding) they are those of efficacy alone, and the futility stops only lower the type I error. The
    futility boundaries always count the efficacy stops. Without ``beta``: efficacy only (futility -inf)."""
    fr = np.asarray(fractions, dtype=np.float64)
    if fr.ndim != 1 or fr.size == 0 or np.any(np.diff(fr) <= 0) or fr[0] <= 0 or abs(fr[-1] - 1.0) > 1e-12:
        raise ValueError("fractions: increasing, in (0, 1], the last 1")
    with_futility = beta is not None
    if with_futility and not math.isfinite(drift):
        raise ValueError("drift: needed with beta")
    a_spend = spent(spending, alpha, fr)
    b_spend = spent(futility_spending, beta, fr) if with_futility else np.zeros_like(fr)
    h0, h1 = _Paths(0.0), _Paths(drift if with_futility else 0.0)
    eff, fut = [], []
    last_futility = -math.inf
    for j, t in enumerate(fr):
        d_alpha = a_spend[j] - (a_spend[j - 1] if j else 0.0)
        b = math.inf if d_alpha <= 1e-15 else _solve(lambda z, t=t: h0.p_up(t, z), d_alpha, j + 1)
        a = -math.inf
        if with_futility:
            d_beta = b_spend[j] - (b_spend[j - 1] if j else 0.0)
            a = -math.inf if d_beta <= 1e-15 else _solve(lambda z, t=t: h1.p_down(t, z), d_beta, j + 1)
            if a >= b and j < len(fr) - 1:
                raise BoundariesCross(j + 1)
        if j == len(fr) - 1:
            last_futility = a
            a = b if with_futility else a
        eff.append(b)
        fut.append(a)
        if j < len(fr) - 1:
            h0.advance(t, a if binding else -math.inf, b)
            h1.advance(t, a, b)
    return ZBoundaries(
        tuple(fr.tolist()), tuple(eff), tuple(fut), last_futility, tuple(a_spend.tolist()), tuple(b_spend.tolist())
    )


def z_crossing(
    fractions: Sequence[float], efficacy: Sequence[float], futility: Sequence[float], drift: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per look, P(stop with Z >= efficacy) and P(stop with Z <= futility) under ``drift`` (normal theory, a known
    SD): the recursion of `z_boundaries` with the boundaries given."""
    paths = _Paths(drift)
    up, down = [], []
    for t, b, a in zip(fractions, efficacy, futility, strict=True):
        up.append(paths.p_up(t, b))
        down.append(paths.p_down(t, min(a, b)))  # the last look: below the efficacy boundary
        paths.advance(t, a, b)
    return np.array(up), np.array(down)


# ------------------------------------------------------------------------------------------------------------
# The design
# ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Look:
    """One look of a design: after ``n`` pairs, ``better`` if T >= ``efficacy_t``, ``not better`` if T <=
    ``futility_t`` (T the paired t statistic against 0); the z boundaries they come from; the error probabilities
    spent by this look."""

    n: int
    efficacy_t: float
    futility_t: float
    efficacy_z: float
    futility_z: float
    alpha_spent: float
    beta_spent: float


@dataclass(frozen=True)
class SequentialDesign:
    """A group-sequential design of one comparison, fixed before the runs: one-sided level ``alpha`` at Δ = 0, power
    1 - ``beta`` at Δ = ``margin`` when the SD of the paired differences is ``planning_sd`` (the units of the
    differences: fractions of problems), a look every ``k`` pairs up to ``n_max`` (a multiple of k at which the last
    look's two boundaries meet: `plan_design` finds the smallest), spending functions of alpha (``spending``) and
    beta (``futility_spending``): `parse_spending`. ValueError naming the field for a design that breaks any of it."""

    margin: float
    k: int
    n_max: int
    planning_sd: float
    alpha: float = ALPHA
    beta: float = BETA
    spending: str = SPENDING
    futility_spending: str = FUTILITY_SPENDING
    binding: bool = False

    def __post_init__(self):
        def fail(name: str, why: str) -> None:
            raise ValueError(f"SequentialDesign.{name}: {why} (got {getattr(self, name)!r})")

        for name in ("alpha", "beta"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v < 0.5):
                fail(name, "a probability in (0, 0.5)")
        for name in ("margin", "planning_sd"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                fail(name, "a finite positive number, in the units of the differences")
        for name in ("k", "n_max"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                fail(name, "an integer number of pairs")
        if not isinstance(self.binding, bool):
            fail("binding", "True or False")
        if self.k < 3:
            fail("k", "at least 3 pairs a look (the first look's t statistic needs 2 degrees of freedom)")
        if self.n_max < self.k or self.n_max % self.k:
            fail("n_max", f"a multiple of k = {self.k}")
        for name in ("spending", "futility_spending"):
            try:
                parse_spending(getattr(self, name))
            except ValueError as e:
                fail(name, str(e))
        check = _check(self)
        if check.overlap is not None:
            fail(
                "n_max",
                f"more pairs than the design can use at planning_sd: its boundaries already meet at look "
                f"{check.overlap} (n = {check.overlap * self.k}); plan_design gives the n_max where they meet",
            )
        if not check.meets:
            fail(
                "n_max",
                f"too few pairs for power {1 - self.beta:g} at Δ = margin with planning_sd {self.planning_sd:g}: "
                f"the last look's boundaries do not meet (normal-theory power {check.power:.3f}); plan_design "
                "gives the smallest n_max that meets",
            )

    @property
    def looks(self) -> int:
        return self.n_max // self.k

    @property
    def ns(self) -> tuple[int, ...]:
        return tuple(self.k * (j + 1) for j in range(self.looks))

    def drift(self, delta: float | None = None, sd: float | None = None) -> float:
        """Expected Z at n_max under Δ = ``delta`` (default the margin) and SD ``sd`` (default the planning SD)."""
        delta = self.margin if delta is None else delta
        sd = self.planning_sd if sd is None else sd
        return delta * math.sqrt(self.n_max) / sd


@dataclass(frozen=True)
class _Check:
    looks: tuple[Look, ...]
    meets: bool
    overlap: int | None
    power: float


def _t_efficacy(z: float, df: int) -> float:
    return math.inf if z == math.inf else float(student_t.isf(norm.sf(z), df))


def _t_futility(z: float, df: int, ncp: float) -> float:
    if z == -math.inf:
        return -math.inf
    return float(nct.ppf(norm.cdf(z - ncp), df, ncp))


@functools.lru_cache(maxsize=256)
def _check_cached(
    k: int, n_max: int, margin: float, sd: float, alpha: float, beta: float, sa: str, sb: str, binding: bool
) -> _Check:
    looks = n_max // k
    ns = [k * (j + 1) for j in range(looks)]
    fr = [n / n_max for n in ns]
    drift = margin * math.sqrt(n_max) / sd
    try:
        zb = z_boundaries(fr, alpha, sa, beta, sb, drift, binding)
    except BoundariesCross as e:
        return _Check((), True, e.look, math.nan)
    out, overlap = [], None
    for j, n in enumerate(ns):
        ncp = margin * math.sqrt(n) / sd
        e = _t_efficacy(zb.efficacy[j], n - 1)
        if j < looks - 1:
            f = _t_futility(zb.futility[j], n - 1, ncp)
            if f >= e and overlap is None:
                overlap = j + 1
        else:
            f = e
        out.append(Look(n, e, f, zb.efficacy[j], zb.futility[j], zb.alpha_spent[j], zb.beta_spent[j]))
    last = out[-1]
    meets = _t_futility(zb.futility_spent, n_max - 1, margin * math.sqrt(n_max) / sd) >= last.efficacy_t - 1e-9
    up, _ = z_crossing(fr, zb.efficacy, zb.futility, drift)
    return _Check(tuple(out), bool(meets), overlap, float(up.sum()))


def _check(design: SequentialDesign) -> _Check:
    return _check_cached(
        int(design.k), int(design.n_max), float(design.margin), float(design.planning_sd), float(design.alpha),
        float(design.beta), design.spending, design.futility_spending, design.binding,
    )  # fmt: skip


def boundaries(design: SequentialDesign) -> tuple[Look, ...]:
    """The design's looks: after n = k, 2k, ..., n_max pairs, the t boundaries (efficacy: the z boundary's upper
    tail probability matched by the central t with n - 1 degrees of freedom; futility: its lower tail probability
    under Δ = margin at the planning SD matched by the noncentral t with noncentrality margin sqrt(n) /
    planning_sd; at the last look the efficacy one, so the look always decides)."""
    return _check(design).looks


def plan_design(
    margin: float,
    k: int,
    planning_sd: float,
    alpha: float = ALPHA,
    beta: float = BETA,
    spending: str = SPENDING,
    futility_spending: str = FUTILITY_SPENDING,
    binding: bool = False,
    max_pairs: int = 10_000,
) -> SequentialDesign:
    """The design with the smallest n_max (a multiple of ``k``) whose last look's boundaries meet at
    ``planning_sd``: power 1 - beta at Δ = margin. ValueError beyond ``max_pairs``."""
    n = k
    while n <= max_pairs:
        try:
            return SequentialDesign(margin, k, n, planning_sd, alpha, beta, spending, futility_spending, binding)
        except ValueError as e:
            if "n_max" not in str(e) or "more pairs than the design can use" in str(e):
                raise
        n += k
    raise ValueError(f"plan_design: no n_max up to {max_pairs} pairs meets at planning_sd {planning_sd:g}")


# ------------------------------------------------------------------------------------------------------------
# Deciding from the pairs run so far
# ------------------------------------------------------------------------------------------------------------
def _clean(diffs: Sequence[float] | np.ndarray, name: str = "diffs") -> np.ndarray:
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1:
        raise ValueError(f"{name}: a 1-d sequence of paired differences in seed order")
    bad = np.flatnonzero(~np.isfinite(d))
    if bad.size:
        raise ValueError(f"{name}: pair(s) {bad.tolist()} are not finite (NaN or inf): a missing run is not a pair")
    return d


def _t_stat(mean: float | np.ndarray, sd: float | np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """mean sqrt(n) / sd; an SD of 0 gives +-inf by the mean's sign (0 for a mean of 0)."""
    mean, sd = np.asarray(mean, dtype=np.float64), np.asarray(sd, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean * np.sqrt(n) / sd
    return np.where(sd > 0, t, np.where(mean > 0, np.inf, np.where(mean < 0, -np.inf, 0.0)))


@dataclass(frozen=True)
class SequentialResult:
    """`decide`'s answer: ``verdict`` (`BETTER`, `NOT_BETTER`, or `UNDECIDED`: no look has decided yet, run the
    pairs up to ``next_n``), the ``look`` (1-based) and pairs ``n`` it rests on (the look at which it stopped, or
    the last look reached), the pairs available, the estimate of the mean difference with its 95% t interval and SD
    over those n pairs (not adjusted for the sequential stop: an estimate, not a verdict), the t statistic and the
    boundaries of that look, which one was ``crossed`` ("efficacy", "futility" or "")."""

    verdict: str
    look: int
    n: int
    n_available: int
    estimate: float
    ci_low: float
    ci_high: float
    sd: float
    t: float
    efficacy_t: float
    futility_t: float
    crossed: str
    next_n: int | None
    margin: float = field(repr=False, default=math.nan)

    @property
    def label(self) -> str:
        """The words the page prints: "better", "not better by 2 points" or "undecided at n = 10 (next look
        at n = 15)"."""
        if self.verdict == BETTER:
            return BETTER
        if self.verdict == NOT_BETTER:
            return f"not better by {self.margin * POINTS:g} points"
        return f"undecided at n = {self.n} (next look at n = {self.next_n})"


def decide(design: SequentialDesign, diffs: Sequence[float] | np.ndarray) -> SequentialResult:
    """The verdict of ``design`` from the paired differences available so far (treatment - control, in seed order):
    the looks at n = k, 2k, ... that the pairs reach, in order; the first whose t statistic crosses a boundary
    decides (later pairs do not change it). No look crossed yet: `UNDECIDED`, with the next look's n. ValueError
    for non-finite differences, fewer than k pairs or more than n_max."""
    d = _clean(diffs)
    if d.size < design.k:
        raise ValueError(f"diffs: {d.size} pair(s), fewer than the first look's k = {design.k}")
    if d.size > design.n_max:
        raise ValueError(f"diffs: {d.size} pairs, more than the design's n_max = {design.n_max}")
    looks = boundaries(design)
    reached = d.size // design.k
    for j in range(reached):
        lk = looks[j]
        x = d[: lk.n]
        mean, sd = float(x.mean()), float(x.std(ddof=1))
        t = float(_t_stat(mean, sd, lk.n))
        last = j == design.looks - 1
        crossed = "efficacy" if t >= lk.efficacy_t else ("futility" if (t <= lk.futility_t or last) else "")
        if crossed or j == reached - 1:
            lo, hi = t_interval(x, 0.95, SCORE_DIFF_RANGE)
            verdict = {"efficacy": BETTER, "futility": NOT_BETTER}.get(crossed, UNDECIDED)
            return SequentialResult(
                verdict, j + 1, lk.n, int(d.size), mean, lo, hi, sd, t, lk.efficacy_t, lk.futility_t, crossed,
                None if crossed else looks[j + 1].n, design.margin,
            )  # fmt: skip
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class FixedResult:
    """`fixed_n_decision`'s answer: the verdict at the n pairs given; ``n_needed`` the fewest pairs at which a
    single look decides for sure at this SD (the two tests' boundaries meet), for an undecided one."""

    verdict: str
    n: int
    estimate: float
    ci_low: float
    ci_high: float
    sd: float
    t: float
    t_margin: float
    n_needed: int | None
    margin: float = field(repr=False, default=math.nan)

    @property
    def label(self) -> str:
        if self.verdict == BETTER:
            return BETTER
        if self.verdict == NOT_BETTER:
            return f"not better by {self.margin * POINTS:g} points"
        need = f"; a single look decides from n = {self.n_needed} at this SD" if self.n_needed else ""
        return f"undecided at n = {self.n}{need}"


def single_look_n(sd: float, margin: float, alpha: float = ALPHA, beta: float = BETA, max_pairs: int = 100_000) -> int:
    """The fewest pairs n >= 2 at which t_{1-alpha, n-1} + t_{1-beta, n-1} <= margin sqrt(n) / sd: where the
    single look's two tests (H0: Δ <= 0 at alpha, H1: Δ >= margin at beta) leave no gap at this SD."""
    if not (math.isfinite(sd) and sd >= 0 and margin > 0):
        raise ValueError("sd: finite and >= 0; margin > 0")
    if sd == 0:
        return 2
    n = 2
    while n <= max_pairs:
        if student_t.isf(alpha, n - 1) + student_t.isf(beta, n - 1) <= margin * math.sqrt(n) / sd:
            return n
        n += 1
    raise ValueError(f"single_look_n: more than {max_pairs} pairs")


def fixed_n_decision(
    diffs: Sequence[float] | np.ndarray, margin: float, alpha: float = ALPHA, beta: float = BETA
) -> FixedResult:
    """The verdict of a comparison at a fixed number of pairs (a secondary), the single-look case of the rule:

    * ``better`` if T = mean sqrt(n) / sd >= t_{1-alpha, n-1} (H0: Δ <= 0 rejected at one-sided ``alpha``);
    * else ``not better by the margin`` if T_margin = (mean - margin) sqrt(n) / sd <= -t_{1-beta, n-1} (H1:
      Δ >= margin rejected at ``beta``: the one-sided 1 - beta upper confidence bound lies below the margin);
    * else ``undecided`` at n, with `single_look_n` at the observed SD.

    When n reaches `single_look_n` the gap is empty and the rule is a design's last look (T >= e: better, else not
    better); below it the gap is what a sequential design closes by adding pairs. ValueError for non-finite
    differences or fewer than 2 pairs."""
    d = _clean(diffs)
    if d.size < 2:
        raise ValueError(f"diffs: {d.size} pair(s); a t test needs at least 2")
    if not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin: a finite positive number (got {margin!r})")
    n = int(d.size)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    t = float(_t_stat(mean, sd, n))
    t_margin = float(_t_stat(mean - margin, sd, n))
    if t >= student_t.isf(alpha, n - 1):
        verdict = BETTER
    elif t_margin <= -student_t.isf(beta, n - 1):
        verdict = NOT_BETTER
    else:
        verdict = UNDECIDED
    lo, hi = t_interval(d, 0.95, SCORE_DIFF_RANGE)
    need = single_look_n(sd, margin, alpha, beta) if verdict == UNDECIDED else None
    return FixedResult(verdict, n, mean, lo, hi, sd, t, t_margin, need, margin)


# ------------------------------------------------------------------------------------------------------------
# Simulation of the t procedure
# ------------------------------------------------------------------------------------------------------------
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
    t = _t_stat(mean, np.sqrt(var), ns)
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


def _agreement(p: float, reps: int) -> float:
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
    return Stability(_agreement(oc.p_better, reps), oc.p_better, oc.expected_n, pred, reps)


def bootstrap_stability(
    design: SequentialDesign,
    diffs: Sequence[float] | np.ndarray,
    reps: int = 100_000,
    rng: np.random.Generator | int = 0,
) -> Stability:
    """`stability` with the observed differences as the truth: each simulated run draws its n_max pairs with
    replacement from ``diffs`` (the nonparametric check of the normal one)."""
    d = _clean(diffs)
    if d.size < 2:
        raise ValueError("diffs: at least 2 pairs")
    better, n = _simulate(design, lambda g, m: d[g.integers(0, d.size, (m, design.n_max))], reps, _rng(rng))
    p = float(better.mean())
    return Stability(_agreement(p, reps), p, float(n.mean()), math.nan, reps)


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
    t, tm = _t_stat(m, s, n), _t_stat(m - margin, s, n)
    b = t >= student_t.isf(alpha, n - 1)
    nb = ~b & (tm <= -student_t.isf(beta, n - 1))
    p = {BETTER: float(b.mean()), NOT_BETTER: float(nb.mean())}
    p[UNDECIDED] = 1.0 - p[BETTER] - p[NOT_BETTER]
    return float(sum(v * v for v in p.values())), p


# ------------------------------------------------------------------------------------------------------------
# The three publications: planning SDs and the plan block of docs/statistics.md
# ------------------------------------------------------------------------------------------------------------
# The publications of one design (the same base models by sha256, the same seeds; numerics changed between them by
# the two speed-ups that passed the recipe check), oldest first
PUBLICATIONS = ("4cefb3a", "580b220", "73d879f")
# primary -> (setting, experiment, model): the settings pool their primaries' SDs (main tiny-s and separation are
# the same setting, tiny-s at D = 4 and 64 steps, on other seeds)
PRIMARIES = {
    "main tiny-s": ("tiny-s, 64 steps", "main", "tiny-s"),
    "separation tiny-s": ("tiny-s, 64 steps", "separation", "tiny-s"),
    "main tiny-m": ("tiny-m, 64 steps", "main", "tiny-m"),
    "horizon tiny-s": ("tiny-s, 256 steps", "horizon", "tiny-s"),
}
POOLED = "main + separation tiny-s"  # the headline, pooled as one primary
HEADLINE_SETTING = "tiny-s, 64 steps"
BLOCK = "sequential-plan"  # the generated block of docs/statistics.md
TREATMENT, CONTROL, TASK = "bandpo_kl", "grpo", "tiny_math"
DEFAULT_K = 5
DELTA_GRID = (-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)  # points


def _git_show(repo: str | Path, commit: str, path: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), "show", f"{commit}:{path}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeError(
            f"cannot read {path} of publication {commit} with git in {repo} ({e}); the plan from the publications "
            "needs the repository's history (not a shallow clone)"
        ) from e


def publication_differences(repo: str | Path = ".", commits: Sequence[str] = PUBLICATIONS) -> pd.DataFrame:
    """The per-seed paired differences of final mean@8 on tiny_math, BandPO-KL - GRPO, of each primary in each
    publication, read from ``results/scores.csv`` at each commit with ``git show``: columns publication,
    primary, setting, seed, diff (fractions). RuntimeError when git or a commit is not there."""
    rows = []
    for c in commits:
        text = _git_show(repo, c, "results/scores.csv")
        s = pd.read_csv(io.StringIO(text))
        s = s[(s["metric"] == "mean") & (s["k"] == 8) & (s["task"] == TASK) & s["subset"].isna()]
        for primary, (setting, experiment, model) in PRIMARIES.items():
            g = s[(s["experiment"] == experiment) & (s["model"] == model)]
            wide = g.pivot_table(index="seed", columns="entry", values="value", aggfunc="mean")
            d = (wide[TREATMENT] - wide[CONTROL]).dropna()
            rows += [{"publication": c, "primary": primary, "setting": setting, "seed": int(k), "diff": float(v)}
                     for k, v in d.items()]  # fmt: skip
    return pd.DataFrame(rows, columns=["publication", "primary", "setting", "seed", "diff"])


def upper_sd(sd: float, df: int, confidence: float = SD_CONFIDENCE) -> float:
    """The one-sided ``confidence`` upper bound of an SD estimated with ``df`` degrees of freedom (chi-square)."""
    return float(sd * math.sqrt(df / chi2.ppf(1.0 - confidence, df)))


def planning_sds(diffs: pd.DataFrame) -> pd.DataFrame:
    """Per setting, from `publication_differences`: the pooled SD (root of the mean of the samples' variances,
    weighted by their degrees of freedom; each publication's primary is one sample), its degrees of freedom, its
    one-sided `SD_CONFIDENCE` upper bound (the planning SD), the largest single SD, the mean of all differences."""
    rows = []
    for setting, g in diffs.groupby("setting", sort=False):
        samples = [x["diff"].to_numpy() for _, x in g.groupby(["publication", "primary"], sort=False)]
        df = sum(len(x) - 1 for x in samples)
        pooled = math.sqrt(sum((len(x) - 1) * x.var(ddof=1) for x in samples) / df)
        rows.append({"setting": setting, "samples": len(samples), "df": df, "pooled_sd": pooled,
                     "planning_sd": upper_sd(pooled, df), "largest_sd": max(x.std(ddof=1) for x in samples),
                     "pooled_mean": float(g["diff"].mean())})  # fmt: skip
    return pd.DataFrame(rows)


def _pts(x: float, digits: int = 2) -> str:
    return f"{x * POINTS:.{digits}f}"


def _pct(x: float) -> str:
    return f"{x:.3f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def boundaries_table(design: SequentialDesign) -> list[str]:
    rows = []
    for j, lk in enumerate(boundaries(design)):
        fut = "= efficacy" if j == design.looks - 1 else (f"{lk.futility_t:.3f}" if lk.futility_t > -1e300 else "-")
        eff = f"{lk.efficacy_t:.3f}" if lk.efficacy_t < 1e300 else "-"
        rows.append([str(j + 1), str(lk.n), eff, fut, f"{lk.efficacy_z:.3f}", f"{lk.futility_z:.3f}",
                     f"{lk.alpha_spent:.4f}", f"{lk.beta_spent:.4f}"])  # fmt: skip
    header = ["look", "pairs", "better if t ≥", "not better if t ≤", "z efficacy", "z futility", "α spent", "β spent"]
    return _table(header, rows, "rrrrrrrr")


def plan_lines(design: SequentialDesign, deltas: Sequence[float], sds: Sequence[float], reps: int, seed: int) -> list:
    """A design's plan: its parameters, boundaries, and the simulated P(better), expected pairs and stability of
    the t procedure at each Δ (points) and SD (fractions)."""
    lines = [
        f"Design: one-sided α = {design.alpha:g} at Δ = 0, power {1 - design.beta:g} at Δ = δ = "
        f"{design.margin * POINTS:g} points with planning SD {_pts(design.planning_sd)} points; a look every "
        f"{design.k} pairs, at most {design.n_max} ({design.looks} looks); spending: α {design.spending}, "
        f"β {design.futility_spending}; {'binding' if design.binding else 'non-binding'} efficacy boundaries.",
        "",
        *boundaries_table(design),
        "",
    ]
    rows = []
    for sd in sds:
        for delta in deltas:
            oc = operating_characteristics(design, delta / POINTS, sd, reps, seed)
            rows.append([_pts(sd), f"{delta:+g}", _pct(oc.p_better), f"{oc.expected_n:.1f}",
                         _pct(_agreement(oc.p_better, reps))])  # fmt: skip
    header = ["SD (points)", "true Δ (points)", "P(better)", "expected pairs", "stability"]
    return lines + _table(header, rows, "rrrrr")


def publication_costs(repo: str | Path = ".", commits: Sequence[str] = PUBLICATIONS) -> pd.DataFrame:
    """Training CPU-minutes of one seed pair (BandPO-KL + GRPO, mean over the pair's seeds) of each primary in each
    publication, from ``results/runs.csv`` at each commit (``train_seconds``; scoring not counted): columns
    publication, setting, primary, cpu_min."""
    rows = []
    for c in commits:
        runs = pd.read_csv(io.StringIO(_git_show(repo, c, "results/runs.csv")))
        for primary, (setting, experiment, model) in PRIMARIES.items():
            g = runs[(runs["experiment"] == experiment) & (runs["model"] == model)]
            per_entry = g[g["entry"].isin([TREATMENT, CONTROL])].groupby("entry")["train_seconds"].mean()
            rows.append({"publication": c, "setting": setting, "primary": primary, "cpu_min": per_entry.sum() / 60})
    return pd.DataFrame(rows)


def plan_body(repo: str | Path = ".", k: int = DEFAULT_K, reps: int = 40_000, seed: int = 0) -> str:
    """The body of docs/statistics.md's block ``sequential-plan`` ("The verdict rule and seeds until decided"): the
    SDs the three publications measured, each setting's design at its planning SD with its simulated error rates,
    expected pairs and training cost, the headline's boundaries, each primary's stability at its observed mean and
    SD, the stability over the true difference, and what the pairs run so far reach at a fixed n."""
    diffs = publication_differences(repo)
    plans = planning_sds(diffs).set_index("setting")
    costs = publication_costs(repo).groupby("setting", sort=False)["cpu_min"].agg(["min", "max"])
    margin = 2.0 / POINTS
    out = []
    # 1. the SDs measured
    rows = []
    for (c, primary), g in diffs.groupby(["publication", "primary"], sort=False):
        d = g["diff"].to_numpy()
        rows.append([f"`{c}`", primary, str(d.size), _pts(d.mean()), _pts(d.std(ddof=1))])
    out += ["The paired differences (BandPO-KL − GRPO, final mean@8, points) in each publication:", ""]
    out += _table(["publication", "primary", "pairs", "mean", "SD"], rows, "llrrr") + [""]
    cols = ["pooled_mean", "pooled_sd", "largest_sd", "planning_sd"]
    rows = [[st, f"{p['samples']:.0f}", f"{p['df']:.0f}", *(_pts(p[c]) for c in cols)] for st, p in plans.iterrows()]
    out += [f"Pooled per setting (planning SD: the one-sided {SD_CONFIDENCE:.0%} upper confidence bound):", ""]
    header = ["setting", "samples", "df", "pooled mean", "pooled SD", "largest SD", "planning SD"]
    out += _table(header, rows, "lrrrrrr") + [""]
    # 2. a design per setting; its operating characteristics and cost
    designs = {st: plan_design(margin, k, p["planning_sd"]) for st, p in plans.iterrows()}
    rows = []
    for st, p in plans.iterrows():
        des = designs[st]
        oc0 = operating_characteristics(des, 0.0, des.planning_sd, reps, seed)
        ocd = operating_characteristics(des, margin, des.planning_sd, reps, seed)
        ocw = operating_characteristics(des, margin, p["largest_sd"], reps, seed)
        oco = operating_characteristics(des, p["pooled_mean"], p["pooled_sd"], reps, seed)
        lo, hi = costs.loc[st, "min"], costs.loc[st, "max"]
        rows.append([st, str(des.n_max), _pct(oc0.p_better), _pct(1 - ocd.p_better), _pct(1 - ocw.p_better),
                     f"{oc0.expected_n:.1f}", f"{ocd.expected_n:.1f}", f"{oco.expected_n:.1f}",
                     f"{lo:.1f}–{hi:.1f}", f"{des.n_max * lo:.0f}–{des.n_max * hi:.0f}"])  # fmt: skip
    header = ["setting", "n_max", "α (Δ = 0)", "β (Δ = δ)", "β at largest SD", "pairs at Δ = 0", "pairs at Δ = δ",
              "pairs at pooled mean, SD", "CPU-min a pair", "CPU-min at n_max"]  # fmt: skip
    out += [f"Each setting's design (k = {k}; n_max the smallest that meets at the planning SD), simulated "
            f"({reps} runs a cell; training CPU-minutes of one pair in the three publications):", ""]  # fmt: skip
    out += _table(header, rows, "lrrrrrrrrr") + [""]
    head = designs[HEADLINE_SETTING]
    out += [f"The headline's boundaries ({HEADLINE_SETTING}):", ""] + boundaries_table(head) + [""]
    # 3. stability at the observed mean and SD of each primary and publication, and pooled
    rows = []
    groups = [((c, pr), g) for (c, pr), g in diffs.groupby(["publication", "primary"], sort=False)]
    groups += [((c, POOLED), diffs[(diffs["publication"] == c) & (diffs["setting"] == HEADLINE_SETTING)])
               for c in PUBLICATIONS]  # fmt: skip
    for (c, primary), g in groups:
        d = g["diff"].to_numpy()
        des = designs[PRIMARIES[primary][0] if primary in PRIMARIES else HEADLINE_SETTING]
        st = stability(des, float(d.mean()), float(d.std(ddof=1)), d.size, reps, seed)
        bs = bootstrap_stability(des, d, reps, seed)
        rows.append([f"`{c}`", primary, str(d.size), _pts(d.mean()), _pts(d.std(ddof=1)), _pct(st.p_better),
                     f"{st.expected_n:.1f}", _pct(st.stability), _pct(bs.stability), _pct(st.predictive)])  # fmt: skip
    header = ["publication", "primary", "pairs", "mean", "SD", "P(better)", "expected pairs", "stability",
              "bootstrap", "predictive"]  # fmt: skip
    out += ["Stability of each primary's verdict under its setting's design, from its observed mean and SD:", ""]
    out += _table(header, rows, "llrrrrrrrr") + [""]
    # 4. the stability over the true Δ at the headline's planning SD
    rows = []
    for delta in DELTA_GRID:
        oc = operating_characteristics(head, delta / POINTS, head.planning_sd, reps, seed)
        rows.append([f"{delta:+g}", _pct(oc.p_better), f"{oc.expected_n:.1f}", _pct(_agreement(oc.p_better, reps))])
    out += [f"The headline's design over the true Δ at its planning SD ({_pts(head.planning_sd)} points):", ""]
    out += _table(["true Δ (points)", "P(better)", "expected pairs", "stability"], rows, "rrrr") + [""]
    # 5. what a fixed n reaches (the pairs each setting's primary ran in the publications)
    rows, words = [], (BETTER, NOT_BETTER, UNDECIDED)
    for st, p in plans.iterrows():
        n = int(diffs[diffs["setting"] == st].groupby(["publication", "primary"]).size().min())
        stab, probs = fixed_n_stability(p["pooled_mean"], p["pooled_sd"], n, margin, reps=reps, rng=seed)
        rows.append([st, str(n), _pts(p["pooled_mean"]), _pts(p["pooled_sd"]), *(_pct(probs[w]) for w in words),
                     _pct(stab), str(single_look_n(p["pooled_sd"], margin))])  # fmt: skip
    header = ["setting", "pairs", "pooled mean", "pooled SD", "P(better)", "P(not better)", "P(undecided)",
              "stability", "single look decides from"]  # fmt: skip
    out += ["A single look at the pairs each primary ran (`fixed_n_decision`), at the pooled mean and SD:", ""]
    out += _table(header, rows, "lrrrrrrrr")
    return "\n".join(out)


def publication_plan(repo: str | Path = ".", k: int = DEFAULT_K, reps: int = 40_000, seed: int = 0) -> str:
    """`plan_body` between the block's markers, as docs/statistics.md holds it."""
    return f"<!-- generated:{BLOCK} -->\n{plan_body(repo, k, reps, seed)}\n<!-- /generated:{BLOCK} -->"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bandpo.analysis.sequential", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="print a design's boundaries, error rates, expected pairs and stability")
    p.add_argument(
        "--from-publications",
        action="store_true",
        help="plan from the three publications' scores (git history): docs/statistics.md's block",
    )
    p.add_argument("--repo", default=".", help="the repository whose history holds the publications")
    p.add_argument("--sd", type=float, help="planning SD of the paired differences (fractions: 0.027 = 2.7 points)")
    p.add_argument("--margin", type=float, default=0.02)
    p.add_argument("--k", type=int, default=DEFAULT_K)
    p.add_argument("--n-max", type=int, help="default: the smallest that meets at --sd")
    p.add_argument("--alpha", type=float, default=ALPHA)
    p.add_argument("--beta", type=float, default=BETA)
    p.add_argument("--spending", default=SPENDING)
    p.add_argument("--futility-spending", default=FUTILITY_SPENDING)
    p.add_argument("--delta", type=float, nargs="*", default=[0.0, 2.0], help="true differences to simulate, points")
    p.add_argument("--true-sd", type=float, nargs="*", help="SDs to simulate at (fractions; default --sd)")
    p.add_argument("--reps", type=int, default=40_000)
    p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.from_publications:
            print(publication_plan(args.repo, args.k, args.reps, args.seed))
            return 0
        if args.sd is None:
            parser.error("--sd is needed without --from-publications")
        if args.n_max is None:
            design = plan_design(args.margin, args.k, args.sd, args.alpha, args.beta, args.spending,
                                 args.futility_spending)  # fmt: skip
        else:
            design = SequentialDesign(args.margin, args.k, args.n_max, args.sd, args.alpha, args.beta, args.spending,
                                      args.futility_spending)  # fmt: skip
        print("\n".join(plan_lines(design, args.delta, args.true_sd or [args.sd], args.reps, args.seed)))
        return 0
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
