"""The leaderboard's experiments: one section per (experiment, subset), and each experiment's primary comparison.

An experiment (``experiments:`` of the workflow config; ``main`` is the sweep itself) is read from the files: the
``experiment`` of every evaluation summary and run folder (`bandpo.analysis.load`). Its scores are reported on their
own (statistics, baseline, P(improvement) within the experiment), once per ``subset`` when its tasks score parts of
the data (the probe's ``probe`` and ``rest``), so a row of the leaderboard is (experiment, subset, model, entry).

The primary comparison of an experiment (its config's ``primary``: ``compare: [treatment, control]``, the task and
score family) is paired, as the design is: seed s of both entries trains from base model s with seed s, so the
unit is the per-seed difference treatment - control; its mean with the 95% paired t interval decides
(`primary_results`). A descriptive experiment whose ``primary`` reads ``score: entropy`` (the random-reward
control) has no treatment and control: each run's final token entropy is paired with its own entropy at step 1
(the base model's: the rollout policy of step 1), the same way (`entropy_shift_results`).

Both also give, as a secondary and descriptive column, the bootstrap rule: the difference of the seed means with a
95% percentile-bootstrap interval that resamples each side's seeds independently (``bootstrap_ci_low``,
``bootstrap_ci_high``, ``bootstrap_verdict``). It ignores the pairing and is too narrow at 3-5 seeds; it stays beside
the paired rule because the runs decided by it are read with it (docs/statistics.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from bandpo.analysis.leaderboard import entry_graders, entry_labels, headline_label, leaderboard
from bandpo.analysis.stats import (
    SCORE_DIFF_RANGE,
    bootstrap_ci,
    four_verdict,
    holm,
    mean_of_means,
    minimum_detectable_difference,
    paired_tests,
    score_stats,
    seeded_rng,
    summary_tests,
    t_interval,
)
from bandpo.analysis.training import run_stats
from bandpo.plan.sweep import BASE_ENTRY, MAIN

SECTION_KEYS = ["experiment", "subset"]
PRIMARY_COLUMNS = ["experiment", "model", "task", "metric", "role", "treatment", "control", "n_treatment",
                   "n_control", "n_pairs", "treatment_mean", "control_mean", "difference", "ci_low", "ci_high",
                   "ci90_low", "ci90_high", "p_value", "p_equivalence", "margin", "mde", "verdict",
                   "bootstrap_ci_low", "bootstrap_ci_high", "bootstrap_verdict"]  # fmt: skip
POINTS = 0.01  # a margin in points of a score (scores are fractions)
NO_INTERVAL = "no interval (fewer than 2 pairs)"


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


def _diff_of_means(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def _verdict(lo: float, hi: float, above: str, below: str, neither: str, missing: str = NO_INTERVAL) -> str:
    """The bootstrap rule's verdict from an interval: ``above`` if it lies above 0, ``below``
    if below, else ``neither``; ``missing`` without an interval."""
    if np.isnan(lo) or np.isnan(hi):
        return missing
    return above if lo > 0 else (below if hi < 0 else neither)


def margin_of(primary: Mapping[str, Any], model: str, key: str = "margin", scale: float = POINTS) -> float:
    """An experiment's equivalence margin for one model, fixed in its config's ``primary`` before the runs:
    ``margin`` in points of the metric (a number, or {model: number}; returned as a fraction, ``scale``),
    ``entropy_margin`` in nats (``scale`` 1). NaN when none is declared (then no comparison can be equivalent)."""
    value = (primary or {}).get(key)
    if isinstance(value, Mapping):
        value = value.get(model)
    return float(value) * scale if value is not None else float("nan")


def paired_rule(
    treatment: pd.Series,
    control: pd.Series,
    confidence: float = 0.95,
    bounds: tuple[float, float] = SCORE_DIFF_RANGE,
    margin: float = float("nan"),
) -> dict[str, Any]:
    """The paired rule on per-seed values (indexed by seed; seed s of both sides trained from the same base model
    with seed s): the differences treatment_s - control_s over the seeds both have, their mean and its 95% paired
    t interval (`t_interval`, cut to ``bounds``), the tests of `paired_tests` (p_value: difference from 0;
    p_equivalence: inside [-margin, +margin], with the 90% interval ci90_low / ci90_high), and mde: the minimum
    detectable difference of the paired t test at 80% power (`minimum_detectable_difference`, exact noncentral t),
    with the SD of these differences standing in for the true one. Returns n_pairs, treatment_mean and
    control_mean (over the paired seeds, so that difference = treatment_mean - control_mean), difference, ci_low,
    ci_high, ci90_low, ci90_high, p_value, p_equivalence, margin, mde."""
    seeds = sorted(set(treatment.index) & set(control.index))
    x = treatment.loc[seeds].to_numpy(np.float64)
    y = control.loc[seeds].to_numpy(np.float64)
    d = x - y
    lo, hi = t_interval(d, confidence, bounds)
    nan = float("nan")
    return {
        "n_pairs": len(seeds),
        "treatment_mean": float(x.mean()) if seeds else nan,
        "control_mean": float(y.mean()) if seeds else nan,
        "difference": float(d.mean()) if seeds else nan,
        "ci_low": lo,
        "ci_high": hi,
        **paired_tests(d, margin),
        "margin": margin,
        "mde": minimum_detectable_difference(float(np.std(d, ddof=1)), len(seeds)) if len(seeds) >= 2 else nan,
    }


def _decide(rule: Mapping[str, Any], above: str, below: str) -> str:
    """`four_verdict` of a `paired_rule` result; `NO_INTERVAL` with fewer than 2 pairs."""
    if rule["n_pairs"] < 2:
        return NO_INTERVAL
    return four_verdict(rule["difference"], rule["p_value"], rule["p_equivalence"], above, below)


def _role(primary: Mapping[str, Any]) -> str:
    """``primary`` (decided at 5% on its own), or ``demoted`` (reported as a secondary: the config's ``demoted``
    gives the reason)."""
    return "demoted" if primary.get("demoted") else "primary"


def primary_results(
    scores: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Each experiment's primary comparison, per model: ``specs`` maps an experiment to its config (``primary``:
    ``compare: [treatment, control]``, ``task`` (default: every task of the experiment, averaged per seed),
    ``score`` (a metric family, default ``mean``: mean@k at the largest k)). The rule is paired (`paired_rule`):
    the mean over seeds of treatment_s - control_s with its 95% paired t interval, and one of four verdicts
    (`four_verdict`, at 5%): ``equivalent`` if the 90% paired t interval lies inside the config's ``margin``
    (`margin_of`; two one-sided tests), else ``treatment better`` (95% interval above 0), ``control better``
    (below 0), else ``unresolved``. ``role`` says whether the comparison decides (``primary``) or was demoted to a
    secondary (the config's ``demoted``: its reason). Seeds only one side has are left out (n_treatment,
    n_control and n_pairs show them). Descriptive, beside it: the difference of the two
    sides' seed means with a percentile-bootstrap interval resampling each side's seeds on their own
    (``bootstrap_*``, the bootstrap rule)."""
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
            rule = paired_rule(arms[0], arms[1], confidence, margin=margin_of(primary, model))
            better = (f"{compare[0]} better", f"{compare[1]} better", "unresolved")
            verdict = _decide(rule, *better[:2])
            values = [a.to_numpy(np.float64) for a in arms]
            rng = seeded_rng(seed, "primary", xp, model)
            b_lo, b_hi = bootstrap_ci(values, _diff_of_means, n_resamples, rng, confidence)
            b_verdict = _verdict(b_lo, b_hi, *better, missing="no interval")
            k = g["k"].max()
            metric = f"{family}@{int(k)}" if k == k else family
            rows.append({"experiment": xp, "model": model, "task": primary.get("task") or ",".join(tasks),
                         "metric": metric, "role": _role(primary), "treatment": compare[0], "control": compare[1],
                         "n_treatment": len(values[0]), "n_control": len(values[1]), **rule, "verdict": verdict,
                         "bootstrap_ci_low": b_lo, "bootstrap_ci_high": b_hi,
                         "bootstrap_verdict": b_verdict})  # fmt: skip
    return pd.DataFrame(rows, columns=PRIMARY_COLUMNS)


ENTROPY = "entropy"  # primary ``score`` of a descriptive experiment read from training, not from lm-eval


ENTROPY_METRICS = {"entropy_final": "final token entropy (mean over the last 10% of steps)",
                   "entropy_auc": "entropy area under the curve (mean of the per-step entropy)"}  # fmt: skip


def entropy_pair_results(
    per_run: pd.DataFrame, specs: Mapping[str, Mapping[str, Any]], confidence: float = 0.95
) -> pd.DataFrame:
    """The entropy rows of an experiment whose ``primary`` names ``entropy_compare: [entry, ...]``: per model, entry
    and entropy statistic of the runs (`ENTROPY_METRICS`: ``entropy_final`` and ``entropy_auc``), the paired
    difference from the primary's control (same base model and seed), with its 95% paired t interval, MDE and
    tests (`paired_rule`), in nats, and one of four verdicts against the config's ``entropy_margin``:
    ``higher entropy`` / ``lower entropy`` / ``equivalent`` / ``unresolved``. Rows have `PRIMARY_COLUMNS`, role
    ``secondary``."""
    rows = []
    for xp, spec in specs.items():
        primary = (spec or {}).get("primary") or {}
        arms, compare = primary.get("entropy_compare") or [], primary.get("compare") or []
        xr = of_experiment(per_run, xp)
        if not arms or len(compare) < 2 or xr.empty:
            continue
        control = compare[1]
        for metric in [m for m in ENTROPY_METRICS if m in xr]:
            for model, gm in xr.dropna(subset=[metric]).groupby("model", sort=True):
                ctrl = gm[gm["entry"] == control].set_index("seed")[metric]
                margin = margin_of(primary, model, "entropy_margin", 1.0)
                for arm in arms:
                    runs = gm[gm["entry"] == arm].set_index("seed")[metric]
                    if runs.empty or ctrl.empty:
                        continue
                    rule = paired_rule(runs, ctrl, confidence, (-np.inf, np.inf), margin)
                    verdict = _decide(rule, "higher entropy", "lower entropy")
                    rows.append({"experiment": xp, "model": model, "task": "", "metric": metric,
                                 "role": "secondary", "treatment": arm, "control": control,
                                 "n_treatment": len(runs), "n_control": len(ctrl), **rule, "verdict": verdict,
                                 "bootstrap_ci_low": np.nan, "bootstrap_ci_high": np.nan,
                                 "bootstrap_verdict": ""})  # fmt: skip
    return pd.DataFrame(rows, columns=PRIMARY_COLUMNS)


def entropy_shift_results(
    per_run: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """The rule of an experiment whose ``primary`` has ``score: entropy``, read from the per-run statistics
    (`build_sections`' third frame, ``runs.csv``), paired within each run: per (model, entry), each seed's final
    token entropy (``entropy_final``: mean over the last 10% of its steps) minus its own entropy at step 1
    (``entropy_first``: the base model's, since the rollout policy of step 1 is the base model), the mean of these
    differences with its 95% paired t interval (`paired_rule`) and one of four verdicts (`four_verdict`):
    ``equivalent`` (unchanged within the config's ``entropy_margin``), ``entropy rises`` / ``entropy falls``
    (interval above / below 0), else ``unresolved``. Rows have `PRIMARY_COLUMNS`: treatment = the entry, control =
    ``step 1``, treatment_mean / control_mean = mean final / step-1 entropy of its runs, difference and interval in
    nats. Secondary (``bootstrap_*``, the bootstrap rule): the percentile-bootstrap interval of the mean
    final entropy against the step-1 entropy averaged over every run of the experiment on that model, as a
    difference."""
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
            reference = float(gm["entropy_first"].mean())
            for entry, ge in gm.groupby("entry", sort=True):
                runs = ge.set_index("seed").sort_index()
                margin = margin_of(primary, model, "entropy_margin", 1.0)
                rule = paired_rule(runs["entropy_final"], runs["entropy_first"], confidence, (-np.inf, np.inf), margin)
                verdict = _decide(rule, "entropy rises", "entropy falls")
                final = runs["entropy_final"].to_numpy(np.float64)
                rng = seeded_rng(seed, "entropy", xp, model, entry)
                lo, hi = bootstrap_ci([final], mean_of_means, n_resamples, rng, confidence)
                b_verdict = _verdict(lo - reference, hi - reference, "entropy rises", "entropy falls", "unmoved",
                                     "no interval")  # fmt: skip
                rows.append({"experiment": xp, "model": model, "task": "", "metric": "entropy_final",
                             "role": _role(primary), "treatment": entry, "control": "step 1", "n_treatment": len(runs),
                             "n_control": len(runs), **rule, "verdict": verdict,
                             "bootstrap_ci_low": lo - reference, "bootstrap_ci_high": hi - reference,
                             "bootstrap_verdict": b_verdict})  # fmt: skip
    return pd.DataFrame(rows, columns=PRIMARY_COLUMNS)


# ----------------------------------------------------------------------------------------------------------------
# One family of tests per experiment: the secondaries, Holm-adjusted
# ----------------------------------------------------------------------------------------------------------------
FAMILY_FAMILIES = ("mean", "pass", "maj", "best_bootstrap")  # the leaderboard's headline metrics
FAMILY_COLUMNS = ["experiment", "n_tests", "n_excluding_0", "expected_by_chance", "better", "worse", "equivalent",
                  "unresolved"]  # fmt: skip


def _family_margin(
    specs: Mapping[str, Mapping[str, Any]], axes: Mapping[str, Mapping[str, Any]], experiment: str, model: str
) -> float:
    """The margin of a secondary: its experiment's (`margin_of`), else its axis's (an axis cell declares no primary;
    ``axes.<id>.primary.margin``), else main's for that model (the same question on the same scale), else NaN."""
    spec = specs.get(experiment) or {}
    for primary in (spec.get("primary"), (axes.get(spec.get("axis") or "") or {}).get("primary"),
                    (specs.get(MAIN) or {}).get("primary")):  # fmt: skip
        margin = margin_of(primary or {}, model)
        if margin == margin:
            return margin
    return float("nan")


def _is_primary_cell(
    spec: Mapping[str, Any], r: Mapping[str, Any], family: str, task_subsets: Mapping[str, str]
) -> bool:
    """Whether a leaderboard row's metric family is its experiment's primary comparison (decided on its own at 5%,
    not part of the family): the compared treatment against the control, the primary's score family, the row of
    the primary task's subset (``task_subsets``: task -> subset, "" for a task scoring the whole data), and the
    primary not demoted."""
    primary = (spec or {}).get("primary") or {}
    compare = primary.get("compare") or []
    if primary.get("demoted") or primary.get("score") == ENTROPY or len(compare) < 2:
        return False
    if r["entry"] != compare[0] or r.get("baseline") != compare[1] or family != primary.get("score", "mean"):
        return False
    subset = r.get("subset") if isinstance(r.get("subset"), str) else ""
    return not primary.get("task") or task_subsets.get(primary["task"], "") == subset


def family_verdicts(
    table: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    task_subsets: Mapping[str, str] | None = None,
    axes: Mapping[str, Mapping[str, Any]] | None = None,
    alpha: float = 0.05,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The secondaries of each experiment as one family of tests, Holm-adjusted (`holm`).

    A test is one leaderboard row's paired comparison with its baseline (``L_diff``, ``L_diff_sd``,
    ``L_n_pairs``; `summary_tests`) for each headline metric L of `FAMILY_FAMILIES`, every trained entry other
    than the baseline (the base rows, which compare the untrained model, are not), every model and subset of the
    experiment, except its primary comparison (`_is_primary_cell`: tested alone at 5%). The margin is the
    experiment's (`_family_margin`), in points of every metric. Per L the table gains L_p, L_p_equivalence (raw),
    L_p_holm, L_p_equivalence_holm (adjusted within the experiment's family, each set of p-values on its own),
    L_margin, L_verdict (raw) and L_verdict_holm (`four_verdict` on the adjusted p-values; for the primary cell
    both are the primary's unadjusted verdict) and L_role (``primary``, ``secondary`` or empty for rows without a
    test). Returns (table, family): the family table has one row per experiment (`FAMILY_COLUMNS`): the tests,
    how many 95% intervals exclude 0, how many would by chance were every difference 0 (alpha x tests), and the
    Holm verdicts' counts."""
    if table.empty:
        return table, pd.DataFrame(columns=FAMILY_COLUMNS)
    table = table.copy()
    labels = {f: headline_label(table, f) for f in FAMILY_FAMILIES}
    labels = {f: lab for f, lab in labels.items() if lab and f"{lab}_diff_sd" in table}
    cells: dict[str, list[tuple[int, str]]] = {}  # experiment -> [(row index, label)] of the family
    for lab in labels.values():
        for c, default in (("p", np.nan), ("p_equivalence", np.nan), ("p_holm", np.nan),
                           ("p_equivalence_holm", np.nan), ("margin", np.nan), ("verdict", ""),
                           ("verdict_holm", ""), ("role", "")):  # fmt: skip
            table[f"{lab}_{c}"] = default
    for i, r in table.iterrows():
        xp = str(r.get("experiment") or MAIN)
        if r["entry"] in (BASE_ENTRY, r.get("baseline")) or not r.get("baseline"):
            continue
        for family, lab in labels.items():
            margin = _family_margin(specs, axes or {}, xp, r["model"])
            tests = summary_tests(r[f"{lab}_diff"], r[f"{lab}_diff_sd"], r[f"{lab}_n_pairs"], margin)
            if tests["p_value"] != tests["p_value"]:
                continue
            verdict = four_verdict(r[f"{lab}_diff"], tests["p_value"], tests["p_equivalence"], "better", "worse",
                                   alpha)  # fmt: skip
            primary_cell = _is_primary_cell(specs.get(xp) or {}, r, family, task_subsets or {})
            table.loc[i, [f"{lab}_p", f"{lab}_p_equivalence", f"{lab}_margin", f"{lab}_verdict", f"{lab}_role"]] = [
                tests["p_value"],
                tests["p_equivalence"],
                margin,
                verdict,
                "primary" if primary_cell else "secondary",
            ]
            if primary_cell:
                table.loc[i, [f"{lab}_p_holm", f"{lab}_p_equivalence_holm", f"{lab}_verdict_holm"]] = [
                    tests["p_value"],
                    tests["p_equivalence"],
                    verdict,
                ]
            else:
                cells.setdefault(xp, []).append((i, lab))
    rows = []
    for xp, members in cells.items():
        for raw, adjusted in (("p", "p_holm"), ("p_equivalence", "p_equivalence_holm")):
            p = np.array([table.loc[i, f"{lab}_{raw}"] for i, lab in members], dtype=np.float64)
            for (i, lab), v in zip(members, holm(p), strict=True):
                table.loc[i, f"{lab}_{adjusted}"] = v
        verdicts = []
        for i, lab in members:
            v = four_verdict(table.loc[i, f"{lab}_diff"], table.loc[i, f"{lab}_p_holm"],
                             table.loc[i, f"{lab}_p_equivalence_holm"], "better", "worse", alpha)  # fmt: skip
            table.loc[i, f"{lab}_verdict_holm"] = v
            verdicts.append(v)
        excluding = sum(1 for i, lab in members if table.loc[i, f"{lab}_p"] < alpha)
        rows.append({"experiment": xp, "n_tests": len(members), "n_excluding_0": excluding,
                     "expected_by_chance": alpha * len(members),
                     **{v: verdicts.count(v) for v in ("better", "worse", "equivalent", "unresolved")}})  # fmt: skip
    return table, pd.DataFrame(rows, columns=FAMILY_COLUMNS)


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
