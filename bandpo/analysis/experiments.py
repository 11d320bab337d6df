"""The leaderboard's experiments: one section per (experiment, subset), and each experiment's comparisons with the
control under the verdict rule (docs/statistics.md, "The verdict rule and seeds until decided"; `bandpo.stats`).

An experiment (``experiments:`` of the workflow config; ``main`` is the sweep itself) is read from the files: the
``experiment`` of every evaluation summary and run folder (`bandpo.analysis.load`). Its scores are reported on their
own (statistics, baseline, P(improvement) within the experiment), once per ``subset`` when its tasks score parts of
the data (the probe's ``probe`` and ``rest``), so a row of the leaderboard is (experiment, subset, model, entry).

Every comparison with the control asks one question: is the treatment better than the control by at least the
margin δ? Its unit is the per-seed difference treatment - control (same base model and seed), and its answer one of
two words, ``better`` or ``not better by the margin``, or ``undecided`` while its pairs do not decide; the mean
difference with its 95% paired t interval is an estimate beside the word, never a verdict. How each is decided:

* a primary with ``sequential`` (a group-sequential design fixed before the runs): `bandpo.stats.rule.decide` on
  the paired differences in the order of the primary's seeds, stopping at the first look that crosses a boundary,
  with the stability of that verdict (`bandpo.stats.simulate.stability`, `primary_results`);
* a primary with ``exploratory``: no verdict; the estimate with its interval and the pairs a single look would
  need at the observed SD (`bandpo.stats.power.pairs_needed`), and the reason;
* any other primary: the single look of the rule at the pairs available (`bandpo.stats.rule.fixed_n_decision`),
  tested alone;
* every secondary (each other trained entry against the control, each headline metric, each model and subset; a
  demoted primary; the entropy comparisons of ``primary.entropy_compare``): the single look, with Holm's
  adjustment of each one-sided test's p-values within the experiment's family (`bandpo.analysis.family`).

The margins are the run plan's (`bandpo.study.report_experiments`: ``margins`` {model: fraction of the score},
``entropy_margins`` {model: nats}, ``designs`` {model: the design's fields}); nothing here converts the config's
points. A descriptive experiment whose ``primary`` reads ``score: entropy`` (the random-reward control) compares no
treatment with a control: each run's final token entropy is paired with its own entropy at step 1 (the base
model's), and its descriptive verdict says whether entropy moved (`entropy_shift_results`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from bandpo.analysis.leaderboard import entry_graders, entry_labels, leaderboard
from bandpo.analysis.scores import score_stats
from bandpo.analysis.training import RUN_METRICS, run_stats, with_run_metrics
from bandpo.stats.design import SequentialDesign
from bandpo.stats.power import pairs_needed
from bandpo.stats.resample import seeded_rng
from bandpo.stats.rule import (
    BETTER,
    NOT_BETTER,
    SCORE_DIFF_RANGE,
    UNDECIDED,
    decide,
    fixed_n_decision,
    four_verdict,
    one_sided_tests,
    paired_tests,
    t_interval,
)
from bandpo.stats.simulate import fixed_n_stability, stability
from bandpo.study import MAIN, PlannedExperiment

SECTION_KEYS = ["experiment", "subset"]
PRIMARY_COLUMNS = ["experiment", "model", "task", "metric", "role", "rule", "treatment", "control", "n_treatment",
                   "n_control", "n_pairs", "n", "treatment_mean", "control_mean", "difference", "ci_low", "ci_high",
                   "sd", "margin", "verdict", "label", "look", "looks", "t", "efficacy_t", "futility_t", "t_margin",
                   "p_better", "p_not_better", "p_better_holm", "p_not_better_holm", "n_needed", "stability",
                   "stability_se", "rerun_better", "rerun_not_better", "rerun_undecided", "note"]  # fmt: skip
EXPLORATORY = "exploratory"  # the verdict cell of an exploratory primary: no verdict
NO_INTERVAL = "no interval (fewer than 2 pairs)"
# the rule column of primary.csv: how the row's verdict was reached
SEQUENTIAL, SINGLE_LOOK, SINGLE_LOOK_HOLM, DESCRIPTIVE = "sequential", "single look", "single look, Holm", "descriptive"
STABILITY_REPS = 100_000  # simulated runs of a verdict's stability (its Monte-Carlo SE: column stability_se)
SCORE_UNIT, ENTROPY_UNIT = "points", "nats"


def experiment_order(*frames: pd.DataFrame) -> list[str]:
    """Experiments present in the frames: main first, then by name."""
    names = set()
    for f in frames:
        if "experiment" in f and not f.empty:
            names |= set(f["experiment"].fillna(MAIN).astype(str))
    return sorted(names, key=lambda x: (x != MAIN, x))


def of_experiment(frame: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """The rows of one experiment (a frame without the column: all its rows are main's)."""
    if frame.empty or "experiment" not in frame:
        return frame.iloc[0:0] if experiment != MAIN else frame
    return frame[frame["experiment"].fillna(MAIN) == experiment]


def build_sections(
    scores: pd.DataFrame,
    metrics: pd.DataFrame,
    summaries: pd.DataFrame,
    baseline: str | None,
    n_resamples: int,
    confidence: float,
    seed: int,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(leaderboard, stats, per-run stats) over every experiment, each computed within its (experiment, subset)
    and led by the columns ``experiment`` and ``subset`` ("" when the tasks score the whole data)."""
    boards, stats_all, runs_all = [], [], []
    for xp in experiment_order(scores, metrics, summaries):
        xs, xm, xsum = of_experiment(scores, xp), of_experiment(metrics, xp), of_experiment(summaries, xp)
        per_run, per_entry = run_stats(xm, xsum, confidence)
        subsets = sorted(set(xs["subset"].astype(object).fillna(""))) if "subset" in xs and not xs.empty else [""]
        for subset in subsets:
            ss = xs[xs["subset"].astype(object).fillna("") == subset] if "subset" in xs else xs
            st = score_stats(ss, baseline, n_resamples, confidence, seed)
            board = leaderboard(st, per_entry, per_run, entry_labels(xsum), entry_graders(ss))
            for frame in (board, st):
                if not frame.empty:
                    frame.insert(0, "subset", subset)
                    frame.insert(0, "experiment", xp)
            boards.append(board)
            stats_all.append(st)
        if not per_run.empty:
            per_run.insert(0, "experiment", xp)
        runs_all.append(per_run)
    return _concat(boards), _concat(stats_all), _concat(runs_all)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()


# ----------------------------------------------------------------------------------------------------------------
# Margins, labels, the rows' common parts
# ----------------------------------------------------------------------------------------------------------------
def score_margin(specs: Mapping[str, Mapping[str, Any]], experiment: str, model: str) -> float:
    """The margin of an experiment's comparisons of scores on a model (a fraction): its ``margins`` from the run
    plan (`bandpo.study.PlannedExperiment`), main's for an experiment the specs do not describe, else NaN."""
    spec = specs.get(experiment)
    if spec is None:
        spec = specs.get(MAIN)
    return PlannedExperiment.from_json(experiment, spec or {}).margin("margins", model)


def run_margin(specs: Mapping[str, Mapping[str, Any]], experiment: str, model: str, key: str) -> float:
    """The margin of an experiment's comparisons of a training statistic on a model (the run plan's ``key``:
    ``entropy_margins`` in nats, ``clip_margins`` a fraction of the rare tokens), else NaN."""
    return PlannedExperiment.from_json(experiment, specs.get(experiment) or {}).margin(key, model)


def _amount(margin: float, unit: str) -> str:
    scaled = margin * 100.0 if unit == SCORE_UNIT else margin  # scores are fractions, printed in points
    return f"{round(scaled, 6):g} {unit}"


def verdict_label(
    verdict: str, margin: float, unit: str = SCORE_UNIT, n_needed: float = float("nan"), word: str | None = None
) -> str:
    """The words a page prints for a verdict: "better", "not better by 2 points" ("higher" / "not higher by
    0.02 nats" for entropy; ``word`` names the claim of a training statistic: "lower" / "not lower by 0.5 points"),
    "undecided (a single look decides from n = 14)"; an exploratory primary's "exploratory: no verdict"; any other
    text (a descriptive verdict) as it is."""
    word = word or ("higher" if unit == ENTROPY_UNIT else BETTER)
    if verdict == BETTER:
        return word
    if verdict == NOT_BETTER:
        return f"not {word} by {_amount(margin, unit)}"
    if verdict == UNDECIDED:
        return UNDECIDED + (f" (a single look decides from n = {int(n_needed)})" if math.isfinite(n_needed) else "")
    if verdict == EXPLORATORY:
        return "exploratory: no verdict" + (f" (a single look decides from n = {int(n_needed)})"
                                            if math.isfinite(n_needed) else "")  # fmt: skip
    return verdict


def _seed_order(treatment: pd.Series, control: pd.Series, order: Sequence[int] | None) -> list:
    """The seeds both sides have, in the order given (a sequential primary's ``primary.seeds``: the design's
    order), then the rest ascending."""
    both = set(treatment.index) & set(control.index)
    first = [s for s in (order or ()) if s in both]
    return first + sorted(both - set(first))


def _estimate(x: np.ndarray, y: np.ndarray, bounds: tuple[float, float]) -> dict[str, Any]:
    """The estimate over the pairs (x_i, y_i): means of each side, the mean difference with its 95% paired t interval
    (cut to ``bounds``) and the differences' SD."""
    d = x - y
    nan = float("nan")
    lo, hi = t_interval(d, 0.95, bounds)
    return {"treatment_mean": float(x.mean()) if d.size else nan, "control_mean": float(y.mean()) if d.size else nan,
            "difference": float(d.mean()) if d.size else nan, "ci_low": lo, "ci_high": hi,
            "sd": float(d.std(ddof=1)) if d.size >= 2 else nan}  # fmt: skip


def _row(**values: Any) -> dict[str, Any]:
    """A primary.csv row: `PRIMARY_COLUMNS`, NaN / "" where not given."""
    text = {"experiment", "model", "task", "metric", "role", "rule", "treatment", "control", "verdict", "label", "note"}
    return {c: values.get(c, "" if c in text else float("nan")) for c in PRIMARY_COLUMNS}


def _mc_se_two(p: float, reps: int) -> float:
    """Monte-Carlo SE of a two-word stability 1 - 2 p (1 - p) from a simulated P(better) over ``reps`` runs."""
    return 2.0 * abs(1.0 - 2.0 * p) * math.sqrt(max(p * (1.0 - p), 0.0) / reps)


def _mc_se_words(p: Sequence[float], reps: int) -> float:
    """Monte-Carlo SE of a stability sum_i p_i^2 (multinomial, delta method)."""
    p = np.asarray(p, dtype=np.float64)
    return float(2.0 * math.sqrt(max(float(np.sum(p**3) - np.sum(p**2) ** 2), 0.0) / reps))


# ----------------------------------------------------------------------------------------------------------------
# The primaries
# ----------------------------------------------------------------------------------------------------------------
def _role(primary: Mapping[str, Any]) -> str:
    """``primary`` (decided on its own), or ``demoted`` (reported as a secondary, in the family: the config's
    ``demoted`` gives the reason)."""
    return "demoted" if primary.get("demoted") else "primary"


def _sequential_row(design: SequentialDesign, x: np.ndarray, y: np.ndarray, seed: int, key: tuple) -> dict[str, Any]:
    """The verdict of a sequential primary: `decide` on the differences in the design's seed order (pairs beyond
    n_max are not the design's and are left out; fewer than k pairs: undecided, no look yet), the estimate over the
    pairs it rests on and the stability of its verdict at their mean and SD."""
    n_avail = int(x.size)
    if n_avail < design.k:
        est = _estimate(x, y, SCORE_DIFF_RANGE)
        return {"rule": SEQUENTIAL, "n": n_avail, **est, "verdict": UNDECIDED, "looks": design.looks,
                "label": f"undecided: {n_avail} pair(s), fewer than the first look's {design.k}",
                "note": f"the first look needs {design.k} pairs"}  # fmt: skip
    use = min(n_avail, design.n_max)
    res = decide(design, (x - y)[:use])
    est = _estimate(x[: res.n], y[: res.n], SCORE_DIFF_RANGE)
    out = {"rule": SEQUENTIAL, "n": res.n, **est, "verdict": res.verdict, "look": res.look, "looks": design.looks,
           "t": res.t, "efficacy_t": res.efficacy_t, "futility_t": res.futility_t}  # fmt: skip
    where = f"look {res.look} of {design.looks}, {res.n} pairs"
    out["label"] = (f"{verdict_label(res.verdict, design.margin)} ({where})" if res.verdict != UNDECIDED
                    else f"undecided at look {res.look} of {design.looks} ({res.n} pairs; next look at n = "
                         f"{res.next_n})")  # fmt: skip
    if n_avail > design.n_max:
        out["note"] = f"{n_avail - design.n_max} pair(s) beyond the design's n_max = {design.n_max} left out"
    if res.verdict != UNDECIDED and res.sd == res.sd:
        st = stability(design, res.estimate, max(res.sd, 1e-12), reps=STABILITY_REPS,
                       rng=seeded_rng(seed, "stability", *key))  # fmt: skip
        out["stability"], out["stability_se"] = st.stability, _mc_se_two(st.p_better, st.reps)
        out.update(rerun_better=st.p_better, rerun_not_better=st.p_not_better, rerun_undecided=0.0)
    return out


def _exploratory_row(x: np.ndarray, y: np.ndarray, margin: float, reason: str) -> dict[str, Any]:
    """An exploratory primary: no verdict; the estimate, the pairs a single look would need at its SD, the reason."""
    est = _estimate(x, y, SCORE_DIFF_RANGE)
    need = pairs_needed(est["sd"], margin)
    return {"rule": EXPLORATORY, "n": int(x.size), **est, "verdict": EXPLORATORY, "n_needed": need,
            "label": verdict_label(EXPLORATORY, margin, n_needed=need), "note": str(reason)}  # fmt: skip


def _single_look_row(x: np.ndarray, y: np.ndarray, margin: float, unit: str, seed: int, key: tuple,
                     bounds: tuple[float, float] = SCORE_DIFF_RANGE, alone: bool = True,
                     word: str | None = None, lower: bool = False) -> dict[str, Any]:  # fmt: skip
    """The single look of the rule (`fixed_n_decision`) at the pairs given, with both one-sided p-values; tested
    ``alone`` (a primary: its stability too) or as a member of a family (the Holm columns are filled later). The
    estimate is x - y; with ``lower`` the claim is a lower x, so the rule reads y - x (its words: ``word``)."""
    est = _estimate(x, y, bounds)
    n = int(x.size)
    out = {"rule": SINGLE_LOOK if alone else SINGLE_LOOK_HOLM, "n": n, **est}
    if n < 2:
        return {**out, "verdict": NO_INTERVAL, "label": NO_INTERVAL}
    if not (math.isfinite(margin) and margin > 0):
        tests = one_sided_tests(-est["difference"] if lower else est["difference"], est["sd"], n, margin)
        return {**out, **tests, "verdict": "", "label": "no margin declared", "note": "no margin declared"}
    res = fixed_n_decision(y - x if lower else x - y, margin)
    tests = one_sided_tests(res.estimate, res.sd, n, margin)
    need = pairs_needed(res.sd, margin)
    out.update({"verdict": res.verdict, "t": res.t, "t_margin": res.t_margin, "p_better": tests["p_better"],
                "p_not_better": tests["p_not_better"], "n_needed": need,
                "label": verdict_label(res.verdict, margin, unit, need, word)})  # fmt: skip
    if alone and res.sd == res.sd:
        stab, words = fixed_n_stability(res.estimate, res.sd, n, margin, reps=STABILITY_REPS,
                                        rng=seeded_rng(seed, "stability", *key))  # fmt: skip
        out["stability"], out["stability_se"] = stab, _mc_se_words(list(words.values()), STABILITY_REPS)
        out.update(rerun_better=words[BETTER], rerun_not_better=words[NOT_BETTER], rerun_undecided=words[UNDECIDED])
    return out


def primary_results(
    scores: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    seed: int = 0,
) -> pd.DataFrame:
    """Each experiment's primary comparison of scores, per model (`PRIMARY_COLUMNS`). ``specs``: the run plan's
    experiments (`bandpo.study.report_experiments`): ``primary`` (``compare: [treatment, control]``, ``task``
    (default: every task of the experiment, averaged per seed), ``score`` (the metric family, default ``mean``:
    mean@k at the largest k), ``sequential`` / ``exploratory`` / ``demoted``, ``seeds``), ``margins`` and
    ``designs`` (fractions of the score). Per model, over the seeds both entries have (n_treatment, n_control and
    n_pairs show the rest):

    * ``sequential`` (rule ``sequential``): `decide` with the design on the differences in the order of
      ``primary.seeds``: the verdict, the look and pairs ``n`` it rests on, its t statistic and boundaries, and
      ``stability``: the probability that an independent rerun of the design gives the same verdict, simulated at
      the observed mean and SD of those n pairs (`bandpo.stats.simulate.stability`, `STABILITY_REPS` runs
      seeded by ``seed`` and the row; ``stability_se`` its Monte-Carlo SE), and ``rerun_better``,
      ``rerun_not_better``, ``rerun_undecided``: the probability of each verdict word in that rerun;
    * ``exploratory``: verdict ``exploratory`` (none), the estimate, ``n_needed`` (`pairs_needed` at the observed
      SD) and the reason (``note``);
    * else (rule ``single look``): `fixed_n_decision` at the pairs, with p_better (H0: Δ <= 0) and p_not_better
      (H1: Δ >= margin), n_needed, and the stability of the single look and its rerun's words
      (`fixed_n_stability`); a ``demoted``
      primary is a member of its experiment's family, whose Holm verdict
      `bandpo.analysis.family.family_verdicts` writes into the row.

    The estimate (treatment_mean, control_mean, difference with its 95% paired t interval, sd) is over the ``n``
    pairs the verdict rests on (the rule's 95% t interval). ``seed`` seeds the stability simulations."""
    rows = []
    for xp, spec in specs.items():
        primary = (spec or {}).get("primary") or {}
        compare = primary.get("compare")
        if not compare or primary.get("score") == ENTROPY:
            continue
        xs = of_experiment(scores, xp)
        family = primary.get("score", "mean")
        xs = xs[xs["metric"] == family] if not xs.empty else xs
        if primary.get("task"):
            xs = xs[xs["task"] == primary["task"]]
        if xs.empty:
            continue
        xs = xs[xs["k"] == xs.groupby("task")["k"].transform("max")]
        for model, g in xs.groupby("model", sort=True):
            tasks = sorted(g["task"].unique())
            # a seed's score: its mean over the tasks, for the seeds that have every one of them
            wide = g.pivot_table(index=["entry", "seed"], columns="task", values="value", aggfunc="mean")
            per_seed = wide.reindex(columns=tasks).dropna().mean(axis=1)
            arms = [per_seed.xs(e, level="entry") if e in per_seed.index.get_level_values("entry")
                    else pd.Series(dtype=float) for e in compare]  # fmt: skip
            if any(a.empty for a in arms):
                continue
            seeds = _seed_order(arms[0], arms[1], primary.get("seeds"))
            x, y = (a.loc[seeds].to_numpy(np.float64) for a in arms)
            margin = score_margin(specs, xp, model)
            design = PlannedExperiment.from_json(xp, spec or {}).design(model)
            key = (xp, model)
            if primary.get("exploratory"):
                rule = _exploratory_row(x, y, margin, primary["exploratory"])
            elif design is not None and not primary.get("demoted"):
                rule = _sequential_row(design, x, y, seed, key)
            else:
                rule = _single_look_row(x, y, margin, SCORE_UNIT, seed, key, alone=not primary.get("demoted"))
            if primary.get("demoted"):
                rule["note"] = str(primary["demoted"])
            k = g["k"].max()
            metric = f"{family}@{int(k)}" if k == k else family
            rows.append(_row(experiment=xp, model=model, task=primary.get("task") or ",".join(tasks), metric=metric,
                             role=_role(primary), treatment=compare[0], control=compare[1],
                             n_treatment=len(arms[0]), n_control=len(arms[1]), n_pairs=len(seeds), margin=margin,
                             **rule))  # fmt: skip
    return pd.DataFrame(rows, columns=PRIMARY_COLUMNS)


ENTROPY = "entropy"  # primary ``score`` of a descriptive experiment read from training, not from lm-eval


@dataclass(frozen=True)
class RunStatistic:
    """A training statistic of each run (`bandpo.analysis.training.RUN_METRICS` declares what it is) that an
    experiment compares with its control as a secondary, paired by seed: the entries named by the primary's
    ``entries`` key, at the run plan's margins ``margins``; the claim is the statistic's better direction
    (`RunMetric.direction`): a ``higher`` or ``lower`` value than the control's (`lower`: the rule reads control -
    entry)."""

    metric: str
    entries: str
    margins: str

    @property
    def word(self) -> str:
        """The claim's word: the statistic's better direction."""
        return RUN_METRICS[self.metric].direction

    @property
    def lower(self) -> bool:
        return self.word == "lower"

    @property
    def unit(self) -> str:
        """The page's unit: nats as they are, a fraction in points."""
        return ENTROPY_UNIT if RUN_METRICS[self.metric].unit == ENTROPY_UNIT else SCORE_UNIT


RUN_STATISTICS = {s.metric: s for s in (
    RunStatistic("entropy_final", "entropy_compare", "entropy_margins"),
    RunStatistic("entropy_auc", "entropy_compare", "entropy_margins"),
    RunStatistic("clip_upper_low", "clip_compare", "clip_margins"),
    RunStatistic("clip_lower_low", "clip_compare", "clip_margins"),
)}  # fmt: skip
"""The training statistics an experiment may compare with its control (``primary.entropy_compare`` and
``primary.clip_compare``): one declaration each, read by the rows (`run_pair_results`), the family and the page."""


def run_pair_results(
    per_run: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    confidence: float = 0.95,
    seed: int = 0,
    metrics: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The secondaries of an experiment that compare training statistics of its runs (`RUN_STATISTICS`): for each
    statistic whose ``entries`` key its ``primary`` names (``entropy_compare: [entry, ...]``: final entropy and
    entropy AUC; ``clip_compare``: the rare tokens' clip fractions at each bound), per model and entry, the paired
    difference from the primary's control (same base model and seed, entry - control) and the single look of the
    rule at the run plan's margin (is the entry's value higher, or for a ``lower`` statistic lower, than the
    control's by at least the margin?): p_better, p_not_better and the unadjusted verdict; members of the
    experiment's family, whose Holm verdict `bandpo.analysis.family.family_verdicts` writes into them. Rows have
    `PRIMARY_COLUMNS`, role ``secondary``. A statistic runs.csv does not hold (the clip fractions) is computed from
    the runs' per-step ``metrics`` (`with_run_metrics`)."""
    del confidence
    compared = [s.metric for s in RUN_STATISTICS.values()
                if any(((spec or {}).get("primary") or {}).get(s.entries) for spec in specs.values())]  # fmt: skip
    if metrics is not None:
        per_run = with_run_metrics(per_run, metrics, compared)
    rows = []
    for xp, spec in specs.items():
        primary = (spec or {}).get("primary") or {}
        compare = primary.get("compare") or []
        xr = of_experiment(per_run, xp)
        if len(compare) < 2 or xr.empty:
            continue
        control = compare[1]
        for stat in RUN_STATISTICS.values():
            arms = primary.get(stat.entries) or []
            if not arms or stat.metric not in xr:
                continue
            for model, gm in xr.dropna(subset=[stat.metric]).groupby("model", sort=True):
                ctrl = gm[gm["entry"] == control].set_index("seed")[stat.metric]
                margin = run_margin(specs, xp, model, stat.margins)
                for arm in arms:
                    runs = gm[gm["entry"] == arm].set_index("seed")[stat.metric]
                    if runs.empty or ctrl.empty:
                        continue
                    seeds = _seed_order(runs, ctrl, None)
                    x, y = runs.loc[seeds].to_numpy(np.float64), ctrl.loc[seeds].to_numpy(np.float64)
                    rule = _single_look_row(x, y, margin, stat.unit, seed, (xp, model, stat.metric, arm),
                                            (-np.inf, np.inf), alone=False, word=stat.word,
                                            lower=stat.lower)  # fmt: skip
                    rows.append(_row(experiment=xp, model=model, metric=stat.metric, role="secondary",
                                     treatment=arm, control=control, n_treatment=len(runs), n_control=len(ctrl),
                                     n_pairs=len(seeds), margin=margin, **rule))  # fmt: skip
    return pd.DataFrame(rows, columns=PRIMARY_COLUMNS)


def entropy_shift_results(
    per_run: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    n_resamples: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """The descriptive rule of an experiment whose ``primary`` has ``score: entropy`` (no control: not a comparison
    under the verdict rule), read from the per-run statistics (`build_sections`' third frame, ``runs.csv``), paired
    within each run: per (model, entry), each seed's final token entropy (``entropy_final``: mean over the last 10%
    of its steps) minus its own entropy at step 1 (``entropy_first``: the base model's, since the rollout policy of
    step 1 is the base model), the mean of these differences with its 95% paired t interval and one of four
    descriptive verdicts (`four_verdict`, rule ``descriptive``): ``equivalent`` (unchanged: the 90% interval inside
    the run plan's ``entropy_margins``), ``entropy rises`` / ``entropy falls`` (95% interval above / below 0), else
    ``unresolved``. Rows have `PRIMARY_COLUMNS`: treatment = the entry, control = ``step 1``, treatment_mean /
    control_mean = mean final / step-1 entropy of its runs, difference and interval in nats."""
    del n_resamples, confidence, seed
    rows = []
    for xp, spec in specs.items():
        primary = (spec or {}).get("primary") or {}
        if primary.get("score") != ENTROPY:
            continue
        xr = of_experiment(per_run, xp)
        if xr.empty or "entropy_first" not in xr:
            continue
        xr = xr.dropna(subset=["entropy_first", "entropy_final"])
        for model, gm in xr.groupby("model", sort=True):
            margin = run_margin(specs, xp, model, "entropy_margins")
            for entry, ge in gm.groupby("entry", sort=True):
                runs = ge.set_index("seed").sort_index()
                x, y = runs["entropy_final"].to_numpy(np.float64), runs["entropy_first"].to_numpy(np.float64)
                est = _estimate(x, y, (-np.inf, np.inf))
                tests = paired_tests(x - y, margin)
                verdict = (four_verdict(est["difference"], tests["p_value"], tests["p_equivalence"], "entropy rises",
                                        "entropy falls") if len(runs) >= 2 else NO_INTERVAL)  # fmt: skip
                rows.append(_row(experiment=xp, model=model, metric="entropy_final", role=_role(primary),
                                 rule=DESCRIPTIVE, treatment=entry, control="step 1", n_treatment=len(runs),
                                 n_control=len(runs), n_pairs=len(runs), n=len(runs), margin=margin, **est,
                                 verdict=verdict, label=verdict))  # fmt: skip
    return pd.DataFrame(rows, columns=PRIMARY_COLUMNS)


def collapse_factors(per_run: pd.DataFrame, specs: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Per run of an experiment whose ``primary`` sets ``collapse_factor`` (the horizon experiment): how far its
    entropy fell, step-1 entropy / final entropy (``factor``), and whether it fell at least that many-fold
    (``collapsed``). Columns: experiment, model, entry, seed, steps, entropy_first, entropy_final, factor,
    threshold, collapsed."""
    columns = ["experiment", "model", "entry", "seed", "steps", "entropy_first", "entropy_final", "factor",
               "threshold", "collapsed"]  # fmt: skip
    rows = []
    for xp, spec in specs.items():
        threshold = ((spec or {}).get("primary") or {}).get("collapse_factor")
        xr = of_experiment(per_run, xp)
        if not threshold or xr.empty:
            continue
        for r in xr.sort_values(["model", "entry", "seed"]).itertuples():
            factor = r.entropy_first / r.entropy_final if r.entropy_final > 0 else float("inf")
            rows.append([xp, r.model, r.entry, int(r.seed), int(r.steps), r.entropy_first, r.entropy_final, factor,
                         float(threshold), bool(factor >= float(threshold))])  # fmt: skip
    return pd.DataFrame(rows, columns=columns)
