"""The families of tests of each experiment: every comparison with the control on its page except its primary (the
secondaries: each trained entry against the baseline per headline metric, model and subset; a demoted primary; the
entropy comparisons of ``primary.entropy_compare``), each under the single look of the verdict rule with Holm's
adjustment of its two one-sided tests' p-values within its family (docs/statistics.md, "The verdict rule and seeds
until decided"). One family per experiment (``all``), or two where the experiment declares
``secondaries.verdicts: <metric>``: that metric's comparisons (``verdicts``: the entries' verdicts, an undecided one
reading "estimate only", as the budget holds no further look) and every other one (``estimates``). The primaries
themselves and the per-comparison rows are `bandpo.analysis.experiments`'."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from bandpo.analysis.experiments import (
    DESCRIPTIVE,
    ENTROPY,
    PRIMARY_COLUMNS,
    RUN_STATISTICS,
    SCORE_UNIT,
    SINGLE_LOOK_HOLM,
    score_margin,
    verdict_label,
)
from bandpo.analysis.leaderboard import headline_label, identical_to_baseline
from bandpo.stats.design import ALPHA, BETA
from bandpo.stats.power import pairs_needed
from bandpo.stats.rule import (
    BETTER,
    ESTIMATE_ONLY,
    NOT_BETTER,
    UNDECIDED,
    holm,
    one_sided_tests,
    rule_verdict,
)
from bandpo.study import BASE_ENTRY, MAIN

FAMILY_FAMILIES = ("mean", "pass", "maj", "best_bootstrap")  # the leaderboard's headline metrics
FAMILY_COLUMNS = ["experiment", "family", "n_tests", "n_excluding_0", "expected_by_chance", "better", "not_better",
                  "undecided"]  # fmt: skip
# the family columns of leaderboard.csv, per headline metric label L: L_<column>
CELL_COLUMNS = {"p_better": np.nan, "p_not_better": np.nan, "p_better_holm": np.nan, "p_not_better_holm": np.nan,
                "margin": np.nan, "verdict": "", "verdict_holm": "", "label": "", "n_needed": np.nan,
                "role": ""}  # fmt: skip
ALL, VERDICTS, ESTIMATES = "all", "verdicts", "estimates"  # the families of an experiment (`family_of`)


def family_of(spec: Mapping[str, Any], metric: str) -> str:
    """The family a secondary of an experiment belongs to: ``all`` without ``secondaries.verdicts``, else
    ``verdicts`` for a comparison in that headline metric family (``mean``, ...) and ``estimates`` for every other
    one (the other metrics; ``entropy`` for the entropy comparisons)."""
    declared = ((spec or {}).get("secondaries") or {}).get("verdicts")
    if not declared:
        return ALL
    return VERDICTS if metric == declared else ESTIMATES


def _task_subset(primary: Mapping[str, Any], task_subsets: Mapping[str, str]) -> str:
    return task_subsets.get(primary["task"], "") if primary.get("task") else ""


def _is_primary_cell(
    spec: Mapping[str, Any], r: Mapping[str, Any], family: str, task_subsets: Mapping[str, str]
) -> bool:
    """Whether a leaderboard row's metric family is its experiment's primary comparison (decided on its own, not a
    member of the family): the compared treatment against the control, the primary's score family, the row of the
    primary task's subset (``task_subsets``: task -> subset, "" for a task scoring the whole data), and the primary
    not demoted."""
    primary = (spec or {}).get("primary") or {}
    compare = primary.get("compare") or []
    if primary.get("demoted") or primary.get("score") == ENTROPY or len(compare) < 2:
        return False
    if r["entry"] != compare[0] or r.get("baseline") != compare[1] or family != primary.get("score", "mean"):
        return False
    subset = r.get("subset") if isinstance(r.get("subset"), str) else ""
    return _task_subset(primary, task_subsets) == subset


def _demoted_cell(spec: Mapping[str, Any], r: Mapping[str, Any], family: str, task_subsets: Mapping[str, str]) -> bool:
    """Whether a leaderboard row's metric family is its experiment's demoted primary (a member of the family, whose
    verdict primary.csv's row repeats)."""
    primary = (spec or {}).get("primary") or {}
    return bool(primary.get("demoted")) and _is_primary_cell({"primary": {**primary, "demoted": None}}, r, family,
                                                              task_subsets)  # fmt: skip


def family_verdicts(
    table: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    task_subsets: Mapping[str, str] | None = None,
    primary: pd.DataFrame | None = None,
    alpha: float = ALPHA,
    beta: float = BETA,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Each experiment's secondaries as one family of tests under the single look of the verdict rule, with Holm's
    adjustment (`holm`) of each of its two one-sided tests within the family.

    The family of an experiment holds every comparison with the control on its page except its primary:

    * per leaderboard row (every trained entry other than the baseline, every model and subset; not the base rows,
      which compare the untrained model) and headline metric L of `FAMILY_FAMILIES`: the paired comparison with the
      baseline from the row's ``L_diff``, ``L_diff_sd`` and ``L_n_pairs`` (`one_sided_tests`) at the experiment's
      margin (`score_margin`, a fraction of the score for every metric); a demoted primary is one of them;
    * the training-statistic secondaries of ``primary`` (primary.csv's rows of role ``secondary``:
      `run_pair_results`: entropy at the experiment's entropy margin in nats, the rare tokens' clip fractions at its
      clip margin).

    Two p-values per member (`one_sided_tests`): p_better, of H0: Δ <= 0 (P(T_{n-1} >= T), T = mean sqrt(n) / sd),
    and p_not_better, of H1: Δ >= δ (P(T_{n-1} <= T_margin), T_margin = (mean - δ) sqrt(n) / sd). Holm's step-down
    adjusts the family's p_better values among themselves (family-wise error alpha for "better") and its
    p_not_better values among themselves (family-wise error beta for "not better by the margin"); the adjusted
    verdict (`rule_verdict`) is ``better`` if the adjusted p_better <= alpha, else ``not better by the margin`` if
    the adjusted p_not_better <= beta, else ``undecided``, with ``n_needed``: the pairs at which a single look at the
    family's strictest levels (alpha / m, beta / m for m members) decides for sure at the row's SD.

    The primary cell (`_is_primary_cell`) is not a member: its verdict is the primary's own (primary.csv:
    sequential, exploratory or a single look alone), repeated on its row. Per L the table gains L_p_better,
    L_p_not_better (raw), L_p_better_holm, L_p_not_better_holm, L_margin, L_verdict (raw: `fixed_n_decision`'s),
    L_verdict_holm (adjusted; the primary's on its cell), L_label (its words, `verdict_label`; the primary's label on
    its cell), L_n_needed and L_role (``primary``, ``secondary`` or empty
    for rows without a test); primary.csv's member rows gain p_better_holm, p_not_better_holm and the adjusted
    verdict, label and n_needed. Returns (table, primary, family): the family table has one row per experiment
    (`FAMILY_COLUMNS`): its members, how many of their 95% intervals exclude 0, how many would by chance were every
    difference 0 (5% of them), and the adjusted verdicts' counts."""
    primary = primary.copy() if primary is not None else pd.DataFrame(columns=PRIMARY_COLUMNS)
    if table.empty:
        return table, primary, pd.DataFrame(columns=FAMILY_COLUMNS)
    table = table.copy()
    task_subsets = task_subsets or {}
    labels = {f: headline_label(table, f) for f in FAMILY_FAMILIES}
    labels = {f: lab for f, lab in labels.items() if lab and f"{lab}_diff_sd" in table}
    for lab in labels.values():
        for c, default in CELL_COLUMNS.items():
            table[f"{lab}_{c}"] = default
    members = _cell_members(table, primary, specs, task_subsets, labels, alpha, beta)
    for j, r in primary.iterrows():
        if r["role"] == "secondary" and r["rule"] == SINGLE_LOOK_HOLM and r["p_better"] == r["p_better"]:
            xp = str(r["experiment"])
            members.setdefault((xp, family_of(specs.get(xp) or {}, "entropy")), []).append(
                ("run", j, "", float(r["margin"]))
            )
    rows = [_adjust_family(table, primary, xp, fam, group, alpha, beta) for (xp, fam), group in members.items()]
    _demoted_rows(table, primary, specs, task_subsets, labels.get("mean"))
    return table, primary, pd.DataFrame(rows, columns=FAMILY_COLUMNS)


def _cell_members(
    table: pd.DataFrame,
    primary: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    task_subsets: Mapping[str, str],
    labels: Mapping[str, str],
    alpha: float,
    beta: float,
) -> dict[str, list[tuple[str, Any, str, float]]]:
    """The leaderboard cells of each experiment's family, as experiment -> members ("cell", row index, label,
    margin), with each member's raw single look written into its cell and the primary's own verdict into the primary
    cell (in place: `family_verdicts`' copy of the table)."""
    members: dict[tuple[str, str], list[tuple[str, Any, str, float]]] = {}
    for i, r in table.iterrows():
        xp = str(r.get("experiment") or MAIN)
        if r["entry"] in (BASE_ENTRY, r.get("baseline")) or not r.get("baseline"):
            continue
        for family, lab in labels.items():
            if identical_to_baseline(r, lab):
                continue  # the baseline's runs again on every seed: no evidence, no member (the pages say so)
            margin = score_margin(specs, xp, r["model"])
            tests = one_sided_tests(r[f"{lab}_diff"], r[f"{lab}_diff_sd"], r[f"{lab}_n_pairs"], margin)
            if tests["p_better"] != tests["p_better"]:
                continue
            spec = specs.get(xp) or {}
            if _is_primary_cell(spec, r, family, task_subsets):
                own = _primary_row(primary, xp, r["model"])
                table.loc[i, [f"{lab}_{c}" for c in ("p_better", "p_not_better", "margin", "verdict",
                                                     "verdict_holm", "label", "n_needed", "role")]] = [
                    own.get("p_better", np.nan), own.get("p_not_better", np.nan), margin, own.get("verdict", ""),
                    own.get("verdict", ""), own.get("label", ""), own.get("n_needed", np.nan),
                    "primary"]  # fmt: skip
                continue
            raw = rule_verdict(tests["p_better"], tests["p_not_better"], alpha, beta)
            table.loc[i, [f"{lab}_{c}" for c in ("p_better", "p_not_better", "margin", "verdict", "role")]] = [
                tests["p_better"], tests["p_not_better"], margin, raw, "secondary"]  # fmt: skip
            members.setdefault((xp, family_of(spec, family)), []).append(("cell", i, lab, margin))
    return members


def _adjust_family(
    table: pd.DataFrame,
    primary: pd.DataFrame,
    xp: str,
    fam: str,
    group: list[tuple[str, Any, str, float]],
    alpha: float,
    beta: float,
) -> dict[str, Any]:
    """One family of an experiment under Holm's step-down (each one-sided test's m p-values adjusted among
    themselves): each member's adjusted verdict and ``n_needed`` at the family's strictest levels (alpha / m,
    beta / m) written into its cell or primary.csv row (in place), the words of an undecided member of a
    ``verdicts`` family "estimate only"; returns the family's row of `FAMILY_COLUMNS`."""
    m = len(group)
    p_b = np.array([_member(table, primary, g, "p_better") for g in group], dtype=np.float64)
    p_nb = np.array([_member(table, primary, g, "p_not_better") for g in group], dtype=np.float64)
    verdicts, excluding = [], 0
    for g, hb, hnb in zip(group, holm(p_b), holm(p_nb), strict=True):
        kind, idx, lab, margin = g
        v = rule_verdict(hb, hnb, alpha, beta)
        verdicts.append(v)
        sd, lo, hi = (_member(table, primary, g, c) for c in ("sd", "ci_low", "ci_high"))
        excluding += int(lo > 0 or hi < 0)
        need = pairs_needed(sd, margin, alpha / m, beta / m)
        if kind == "cell":
            words = ESTIMATE_ONLY if (fam == VERDICTS and v == UNDECIDED) else verdict_label(v, margin)
            table.loc[idx, [f"{lab}_p_better_holm", f"{lab}_p_not_better_holm", f"{lab}_verdict_holm",
                            f"{lab}_label", f"{lab}_n_needed"]] = [hb, hnb, v, words, need]  # fmt: skip
        else:
            stat = RUN_STATISTICS[str(primary.loc[idx, "metric"])]
            primary.loc[idx, ["p_better_holm", "p_not_better_holm", "verdict", "n_needed", "label"]] = [
                hb, hnb, v, need, verdict_label(v, margin, stat.unit, need, stat.word)]  # fmt: skip
    return {"experiment": xp, "family": fam, "n_tests": m, "n_excluding_0": excluding, "expected_by_chance": 0.05 * m,
            "better": verdicts.count(BETTER), "not_better": verdicts.count(NOT_BETTER),
            "undecided": verdicts.count(UNDECIDED)}  # fmt: skip


def _primary_row(primary: pd.DataFrame, experiment: str, model: str) -> Mapping[str, Any]:
    """primary.csv's score row of an experiment's primary on a model ({} without one)."""
    if primary.empty:
        return {}
    sel = primary[(primary["experiment"] == experiment) & (primary["model"] == model)
                  & (primary["role"] == "primary") & (primary["rule"] != DESCRIPTIVE)]  # fmt: skip
    return sel.iloc[0].to_dict() if len(sel) else {}


def _member(table: pd.DataFrame, primary: pd.DataFrame, member: tuple, column: str) -> float:
    """A family member's value: its p-values, SD and 95% interval, from its leaderboard cell or primary.csv row."""
    kind, idx, lab, _margin = member
    if kind == "run":
        return float(primary.loc[idx, column])
    name = {"p_better": f"{lab}_p_better", "p_not_better": f"{lab}_p_not_better", "sd": f"{lab}_diff_sd",
            "ci_low": f"{lab}_diff_t_ci_low", "ci_high": f"{lab}_diff_t_ci_high"}[column]  # fmt: skip
    return float(table.loc[idx, name]) if name in table else float("nan")


def _demoted_rows(
    table: pd.DataFrame,
    primary: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    task_subsets: Mapping[str, str],
    label: str | None,
) -> None:
    """A demoted primary's row of primary.csv takes the family's verdict of its leaderboard cell (in place)."""
    if primary.empty or not label:
        return
    for j, r in primary[primary["role"] == "demoted"].iterrows():
        spec = specs.get(r["experiment"]) or {}
        cells = [i for i, row in table.iterrows()
                 if str(row.get("experiment") or MAIN) == r["experiment"] and row["model"] == r["model"]
                 and _demoted_cell(spec, row, "mean", task_subsets)]  # fmt: skip
        if len(cells) != 1:
            continue
        c = table.loc[cells[0]]
        v, need = c[f"{label}_verdict_holm"], c[f"{label}_n_needed"]
        primary.loc[j, ["rule", "p_better_holm", "p_not_better_holm", "verdict", "n_needed", "label"]] = [
            SINGLE_LOOK_HOLM, c[f"{label}_p_better_holm"], c[f"{label}_p_not_better_holm"], v, need,
            verdict_label(v, r["margin"], SCORE_UNIT, need)]  # fmt: skip
