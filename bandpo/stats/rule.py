"""The verdict rule of a comparison with the control (docs/statistics.md, "The verdict rule and seeds until decided").

**The question.** Is the treatment better than the control by at least the margin δ? On the paired differences
d_i = treatment - control (same base model and seed; scores are fractions, so δ = 0.02 is 2 points of mean@8), the
rule tests H0: Δ <= 0 against H1: Δ >= δ and answers with one of two words:

* ``better`` (`BETTER`): H0 rejected at one-sided level ``alpha``: the treatment is better than the control;
* ``not better by the margin`` (`NOT_BETTER`): H1 rejected at level ``beta``: the treatment is not better by δ.

Between 0 and δ both words are true, and the rule may say either; outside it only one is, and the probability of
saying it grows with the pairs. Sign, size and equivalence are estimates (the mean paired difference with its 95%
t interval, `t_interval`), never verdicts. A comparison not decided within its pairs reads ``undecided``
(`UNDECIDED`, with the n it would need).

**Seeds until decided** (`decide`, on a `bandpo.stats.design.SequentialDesign`): at look j the paired t statistic
T = mean sqrt(n) / sd of the first n_j pairs is compared with the look's two boundaries: ``better`` if T >= e_j,
``not better`` if T <= f_j, else the next k pairs. The futility stops are binding in use (a look that crosses f_j
ends the comparison), and at the last look f_K = e_K, so a verdict always comes by ``n_max``. A comparison at a
fixed n (a secondary) uses `fixed_n_decision`, the single-look case of the same rule with the observed SD in place
of the planning SD. Pure numpy and scipy: every stage that decides (the run plan's check of a design, the DAG's
looks, the report, ``rank``, the recipe check of speed-ups) uses this one module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import t as student_t

from bandpo.stats.design import ALPHA, BETA, SequentialDesign, boundaries
from bandpo.stats.power import pairs_needed

BETTER, NOT_BETTER, UNDECIDED = "better", "not better by the margin", "undecided"
VERDICTS = (BETTER, NOT_BETTER)
POINTS = 100.0  # scores are fractions; tables print points
SCORE_RANGE, SCORE_DIFF_RANGE = (0.0, 1.0), (-1.0, 1.0)  # scores are fractions: where their t intervals are cut

ESTIMATE_ONLY = "estimate only"

WORDS = {
    BETTER: "better: the one-sided paired t test of no gain (Δ ≤ 0) rejects at 5%. It shows a gain above 0; it does "
    "not show a gain of the margin δ (at many pairs it is a plain test of Δ > 0).",
    NOT_BETTER: "not better by δ: the one-sided test of a gain of at least δ (Δ ≥ δ) rejects at 10%. It rules out a "
    "gain of δ or more; it shows neither that the entry is worse (read the interval's upper end) nor that the two "
    "are equivalent (read both ends against ±δ).",
    UNDECIDED: "undecided: neither test rejects at these pairs; no claim either way (the pairs a verdict would need "
    "stand beside it).",
    ESTIMATE_ONLY: "estimate only / exploratory: no verdict was planned (the budget cannot hold the pairs a verdict "
    "needs); the estimate and the pairs a verdict would need.",
    "identical": "identical to the baseline: every paired difference is exactly 0 (the entry ran as the baseline on "
    "every seed), which is no evidence either way; no verdict.",
}
"""What each verdict word shows, in the words every page, doc and ``rank`` prints."""


def t_interval(
    values: Sequence[float] | np.ndarray, confidence: float = 0.95, bounds: tuple[float, float] = (-math.inf, math.inf)
) -> tuple[float, float]:
    """Student-t interval of the mean of ``values`` (seeds): mean +- t_{(1+confidence)/2, n-1} * sd / sqrt(n), sd
    with ddof 1, cut to ``bounds`` (the range the mean can take: [0, 1] for a score, [-1, 1] for a difference of
    scores). Exact for normal scores and honest at 3-5 seeds, where a percentile bootstrap is too narrow. NaN
    for fewer than 2 finite values."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return float("nan"), float("nan")
    half = float(student_t.ppf((1 + confidence) / 2, x.size - 1) * np.std(x, ddof=1) / math.sqrt(x.size))
    m = float(x.mean())
    return max(m - half, bounds[0]), min(m + half, bounds[1])


def clean_differences(diffs: Sequence[float] | np.ndarray, name: str = "diffs") -> np.ndarray:
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1:
        raise ValueError(f"{name}: a 1-d sequence of paired differences in seed order")
    bad = np.flatnonzero(~np.isfinite(d))
    if bad.size:
        raise ValueError(f"{name}: pair(s) {bad.tolist()} are not finite (NaN or inf): a missing run is not a pair")
    return d


def t_statistic(mean: float | np.ndarray, sd: float | np.ndarray, n: int | np.ndarray) -> np.ndarray:
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
    d = clean_differences(diffs)
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
        t = float(t_statistic(mean, sd, lk.n))
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


def fixed_n_decision(
    diffs: Sequence[float] | np.ndarray, margin: float, alpha: float = ALPHA, beta: float = BETA
) -> FixedResult:
    """The verdict of a comparison at a fixed number of pairs (a secondary), the single-look case of the rule:

    * ``better`` if T = mean sqrt(n) / sd >= t_{1-alpha, n-1} (H0: Δ <= 0 rejected at one-sided ``alpha``);
    * else ``not better by the margin`` if T_margin = (mean - margin) sqrt(n) / sd <= -t_{1-beta, n-1} (H1:
      Δ >= margin rejected at ``beta``: the one-sided 1 - beta upper confidence bound lies below the margin);
    * else ``undecided`` at n, with the pairs a single look needs at the observed SD
      (`bandpo.stats.power.pairs_needed`).

    When n reaches that number the gap is empty and the rule is a design's last look (T >= e: better, else not
    better); below it the gap is what a sequential design closes by adding pairs. ValueError for non-finite
    differences or fewer than 2 pairs."""
    d = clean_differences(diffs)
    if d.size < 2:
        raise ValueError(f"diffs: {d.size} pair(s); a t test needs at least 2")
    if not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin: a finite positive number (got {margin!r})")
    n = int(d.size)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    t = float(t_statistic(mean, sd, n))
    t_margin = float(t_statistic(mean - margin, sd, n))
    if t >= student_t.isf(alpha, n - 1):
        verdict = BETTER
    elif t_margin <= -student_t.isf(beta, n - 1):
        verdict = NOT_BETTER
    else:
        verdict = UNDECIDED
    lo, hi = t_interval(d, 0.95, SCORE_DIFF_RANGE)
    need = pairs_needed(sd, margin, alpha, beta) if verdict == UNDECIDED else math.nan
    need = int(need) if math.isfinite(need) else None
    return FixedResult(verdict, n, mean, lo, hi, sd, t, t_margin, need, margin)


# ------------------------------------------------------------------------------------------------------------
# The verdict rule's two one-sided tests from a comparison's summary (leaderboard.csv holds mean, SD and count)
# ------------------------------------------------------------------------------------------------------------
def one_sided_tests(mean: float, sd: float, n: int, margin: float) -> dict[str, float]:
    """The two one-sided paired t tests of the verdict rule (`fixed_n_decision`) from the
    differences' mean, SD (ddof 1) and count, with T = mean sqrt(n) / sd and T_margin = (mean - margin) sqrt(n) /
    sd on n - 1 degrees of freedom:

    * ``p_better``: the p-value of H0: Δ <= 0 against Δ > 0, P(T_{n-1} >= T) ("better" when <= alpha);
    * ``p_not_better``: the p-value of H1: Δ >= margin against Δ < margin, P(T_{n-1} <= T_margin) ("not better
      by the margin" when <= beta).

    Also ``t`` and ``t_margin``. NaN p-values for fewer than 2 pairs, a missing SD or no positive margin (then
    ``p_not_better`` alone is NaN); an SD of 0 gives p-values 0 or 1 (`t_statistic`)."""
    nan = float("nan")
    out = {"p_better": nan, "p_not_better": nan, "t": nan, "t_margin": nan}
    n = int(n) if n == n else 0
    if n < 2 or not (math.isfinite(mean) and math.isfinite(sd)):
        return out
    t = float(t_statistic(mean, sd, n))
    out["t"], out["p_better"] = t, float(student_t.sf(t, n - 1))
    if math.isfinite(margin) and margin > 0:
        tm = float(t_statistic(mean - margin, sd, n))
        out["t_margin"], out["p_not_better"] = tm, float(student_t.cdf(tm, n - 1))
    return out


def rule_verdict(p_better: float, p_not_better: float, alpha: float = ALPHA, beta: float = BETA) -> str:
    """The verdict rule's word from its two p-values (raw: `fixed_n_decision`; Holm-adjusted: a family's):
    `BETTER` when ``p_better`` <= alpha, else `NOT_BETTER` when ``p_not_better`` <= beta, else `UNDECIDED`
    (also without a test)."""
    if p_better == p_better and p_better <= alpha:
        return BETTER
    if p_not_better == p_not_better and p_not_better <= beta:
        return NOT_BETTER
    return UNDECIDED


# ------------------------------------------------------------------------------------------------------------
# Four verdicts (retired for comparisons with the control, issue #55): kept for the descriptive rule of the
# random-reward control, each run's final entropy against its own step-1 entropy (no control, no question of
# "better"): rises, falls, unchanged within a margin fixed before the runs, or unresolved
# ------------------------------------------------------------------------------------------------------------
EQUIVALENCE_CONFIDENCE = 0.90  # two one-sided tests at 5% each <=> the 90% interval inside [-margin, +margin]
EQUIVALENT, UNRESOLVED = "equivalent", "unresolved"
EQUIVALENCE_ALPHA = 0.05  # the level of both the difference and the equivalence test


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
    difference: float, p_value: float, p_equivalence: float, above: str, below: str, alpha: float = EQUIVALENCE_ALPHA
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
