"""A group-sequential design of one comparison (`SequentialDesign`): a look every k paired differences up to n_max,
with an efficacy and a futility boundary on the paired t statistic at each look (`boundaries`).

The boundaries come from Lan-DeMets spending of ``alpha`` (under Δ = 0) and ``beta`` (under Δ = δ at the planning
SD, `spent`): z boundaries by the recursion on the Brownian motion of the score (numerical integration,
`z_boundaries`), the efficacy ones computed non-binding (as if there were no futility stops: the t procedure's looks
are less correlated than the z statistics', which a binding computation turns into a type I error above alpha),
then each moved to the t scale by matching its tail probability at the look's degrees of freedom (efficacy under
Δ = 0: central t; futility under Δ = δ: noncentral t at the planning SD). ``n_max`` is the smallest multiple of
``k`` at which the two boundaries of the last look meet (`plan_design`): power 1 - beta at Δ = δ when the true SD is
at most the planning SD. The verdict rule that uses them: `bandpo.stats.rule`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.stats import nct, norm
from scipy.stats import t as student_t

SPENDING_FAMILIES = ("obf", "pocock", "hsd")  # Lan-DeMets O'Brien-Fleming and Pocock types, Hwang-Shih-DeCani

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
