"""Design axes: one trainer setting varied over experiments, and the rules fixed for it before any run.

An axis (config ``axes:``) names a trainer field (``key``, e.g. ``updates_per_step``: the off-policy degree D) and
its cells: experiments that each set that field to one value. This module reads an axis from the same frames as
the rest of the report:

- `with_reuse`: a cell whose settings equal main's reuses main's runs (``reuse``, filled in by `bandpo.plan.sweep`);
  the report copies main's rows into that cell, so every cell has all its runs;
- `run_outcomes`: per run, the outcomes the rules read (entropy as the mean of the per-step rollout entropy -- the
  area under its curve per step -- and final; clip fractions in the lowest old-probability bucket by direction;
  stopped fractions by advantage sign; approx KL; reward) plus the final score of the axis's task;
- `axis_results`: the pre-registered rules of the off-policy design (config ``axes.<id>.primary.rules``):
  (a) engagement -- the control's upper clip fraction in the lowest bucket rises with the axis value;
  (b) mechanism -- the paired entropy difference (arm - control, same base model and seed) rises with it and is
      resolved at the largest value;
  (c) accuracy -- the paired score difference (arm - control) at each value;
  every slope is the mean of per-seed least-squares slopes (each seed's runs share their base model, so the
  slope is paired within a seed) with a Student-t interval over seeds.

The selection rule an experiment applies to an axis (``select``), whose setting the trainer reads back, is a
decision of the DAG: `bandpo.decide.selection`; the page's sections of an axis: `bandpo.report.axis`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from bandpo.analysis.training import RUN_METRICS, final_window, run_value
from bandpo.stats.power import minimum_detectable_difference
from bandpo.stats.rule import t_interval
from bandpo.study import MAIN, slot_seeds

# per-run outcomes: the run statistics (`bandpo.analysis.training.RUN_METRICS`) that are means over the run's steps,
# each of one per-step metric of its own (no fallback, which is chosen for a whole table)
STEP_MEANS = {m.name: m.source for m in RUN_METRICS.values() if m.aggregate == "mean" and m.fallback is None}


# the update statistics among them (logged per update, so a run's all-updates value differs from its off-policy one):
# steps.csv keeps these as all/<key> for the axes' runs (bandpo.analysis.steps), so axis_runs.csv recomputes from it
UPDATE_MEANS = [c for c in STEP_MEANS.values() if c not in ("entropy", "reward_mean")]


OUTCOME_COLUMNS = ["experiment", "axis", "value", "model", "entry", "seed", *STEP_MEANS, "entropy_final", "score"]


RESULT_COLUMNS = ["axis", "rule", "model", "arm", "control", "value", "n", "estimate", "ci_low", "ci_high", "mde",
                  "holds", "note"]  # fmt: skip


def with_reuse(frame: pd.DataFrame, experiments: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """``frame`` plus, for every experiment whose ``reuse`` names entries, main's rows of those entries (its models
    and seeds) as rows of that experiment. Frames without ``experiment`` / ``entry`` come back unchanged."""
    if frame.empty or not {"experiment", "entry", "model", "seed"} <= set(frame.columns):
        return frame
    main = frame[frame["experiment"].fillna(MAIN) == MAIN]
    extra = []
    for xp, spec in experiments.items():
        reuse = list((spec or {}).get("reuse") or [])
        if xp == MAIN or not reuse:
            continue
        rows = main[main["entry"].isin(reuse)]
        if spec.get("models"):
            rows = rows[rows["model"].isin(spec["models"])]
        if spec.get("seeds"):  # each entry's own seeds in this experiment (the primary pair may have more)
            seeds = {e: {int(s) for s in slot_seeds({"experiments": experiments}, xp, e)} for e in reuse}
            rows = rows[[int(s) in seeds[e] for e, s in zip(rows["entry"], rows["seed"], strict=True)]]
        if not rows.empty:
            extra.append(rows.assign(experiment=xp))
    return pd.concat([frame, *extra], ignore_index=True) if extra else frame


def axis_cells(axis: Mapping[str, Any], experiments: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, float]]:
    """(cell, value) of an axis, in the config's (increasing) order, for the cells present in ``experiments``."""
    return [
        (c, float(experiments[c]["train"][axis["key"]])) for c in axis["cells"] if c in experiments
    ]  # fmt: skip


def final_scores(scores: pd.DataFrame, task: str | None) -> pd.DataFrame:
    """(experiment, model, entry, seed) -> final mean@k at the task's largest k (tasks averaged when none given)."""
    if scores.empty:
        return pd.DataFrame(columns=["experiment", "model", "entry", "seed", "score"])
    s = scores[scores["metric"] == "mean"]
    if task:
        s = s[s["task"] == task]
    s = s[s["k"] == s.groupby("task")["k"].transform("max")]
    out = s.groupby(["experiment", "model", "entry", "seed"], as_index=False)["value"].mean()
    return out.rename(columns={"value": "score"}).assign(seed=lambda d: d["seed"].astype(int))


def run_outcomes(
    metrics: pd.DataFrame,
    scores: pd.DataFrame,
    axes: Mapping[str, Mapping[str, Any]],
    experiments: Mapping[str, Mapping[str, Any]],
) -> pd.DataFrame:
    """One row per run of an axis cell (`OUTCOME_COLUMNS`): the per-step means of `STEP_MEANS`, entropy_final (mean
    over the last 10% of steps) and ``score`` (final mean@k of the axis's primary task; NaN before scoring)."""
    rows = []
    for axis_id, axis in axes.items():
        task = (axis.get("primary") or {}).get("task")
        final = final_scores(scores, task).set_index(["experiment", "model", "entry", "seed"])["score"]
        for cell, value in axis_cells(axis, experiments):
            m = metrics[metrics["experiment"].fillna(MAIN) == cell] if not metrics.empty else metrics
            for (model, entry, seed), g in m.groupby(["model", "entry", "seed"], sort=True) if not m.empty else []:
                row = {"experiment": cell, "axis": axis_id, "value": value, "model": model, "entry": entry,
                       "seed": int(seed)}  # fmt: skip
                for name in STEP_MEANS:
                    row[name] = run_value(g, RUN_METRICS[name])
                row["entropy_final"] = final_window(g, "entropy")
                row["score"] = float(final.get((cell, model, entry, int(seed)), np.nan))
                rows.append(row)
    return pd.DataFrame(rows, columns=OUTCOME_COLUMNS)


def _slopes(frame: pd.DataFrame, y: str) -> np.ndarray:
    """Per seed, the least-squares slope of ``y`` over ``value`` (seeds with fewer than two values left out)."""
    out = []
    for _seed, g in frame.dropna(subset=[y]).groupby("seed", sort=True):
        if g["value"].nunique() >= 2:
            out.append(float(np.polyfit(g["value"].to_numpy(float), g[y].to_numpy(float), 1)[0]))
    return np.asarray(out, dtype=np.float64)


def _paired(outcomes: pd.DataFrame, arm: str, control: str, y: str) -> pd.DataFrame:
    """Per (model, value, seed): ``y`` of the arm minus ``y`` of the control (same base model and seed)."""
    keys = ["axis", "model", "value", "seed"]
    a = outcomes[outcomes["entry"] == arm].set_index(keys)[y]
    c = outcomes[outcomes["entry"] == control].set_index(keys)[y]
    d = (a - c).dropna()
    return d.rename("diff").reset_index()


def _row(axis_id, rule, model, arm, control, value, values, note="", holds=None, mde=True) -> dict[str, Any]:
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    lo, hi = t_interval(x)
    sd = float(np.std(x, ddof=1)) if x.size >= 2 else np.nan
    return {"axis": axis_id, "rule": rule, "model": model, "arm": arm, "control": control, "value": value,
            "n": int(x.size), "estimate": float(x.mean()) if x.size else np.nan, "ci_low": lo, "ci_high": hi,
            "mde": minimum_detectable_difference(sd, int(x.size)) if mde and x.size >= 2 else np.nan,
            "holds": holds, "note": note}  # fmt: skip


def axis_results(outcomes: pd.DataFrame, axes: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """The axis rules (config ``axes.<id>.primary``), one row per statistic (`RESULT_COLUMNS`); ``value`` is NaN
    for a slope. Rules: ``a engagement`` (the control's slope of clip_upper_low), ``b mechanism`` (per arm: the
    slope of the paired entropy_auc difference and that difference at the largest value), ``c accuracy`` (per arm
    and value: the paired score difference), and ``entropy`` / ``clip`` descriptive rows per arm and value (paired
    entropy_auc and entropy_final differences; clip fractions). ``holds`` is the rule's verdict where it has one."""
    rows: list[dict[str, Any]] = []
    for axis_id, axis in axes.items():
        control = (axis.get("primary") or {}).get("control")
        out = outcomes[outcomes["axis"] == axis_id]
        if out.empty or control is None:
            continue
        arms = [e for e in dict.fromkeys(out["entry"]) if e != control]
        for model, om in out.groupby("model", sort=True):
            ctrl = om[om["entry"] == control]
            slopes = _slopes(ctrl, "clip_upper_low")
            lo, _hi = t_interval(slopes)
            rows.append(_row(axis_id, "a engagement", model, control, "", np.nan, slopes, mde=False,
                             holds=bool(lo > 0) if np.isfinite(lo) else None,
                             note="slope of the upper clip fraction in the lowest bucket over the axis"))  # fmt: skip
            for value, g in ctrl.groupby("value", sort=True):
                rows.append(_row(axis_id, "clip upper low", model, control, "", value, g["clip_upper_low"], mde=False))
            top = float(om["value"].max())
            for arm in arms:
                ent = _paired(om, arm, control, "entropy_auc")
                slopes = _slopes(ent, "diff")
                lo_s, _ = t_interval(slopes)
                at_top = ent[ent["value"] == top]["diff"]
                lo_t, hi_t = t_interval(at_top)
                holds = None
                if np.isfinite(lo_s) and np.isfinite(lo_t):
                    holds = bool(lo_s > 0 and (lo_t > 0 or hi_t < 0))
                rows.append(_row(axis_id, "b mechanism", model, arm, control, np.nan, slopes, holds=holds, mde=False,
                                 note="slope of the paired entropy difference over the axis"))  # fmt: skip
                for value, g in ent.groupby("value", sort=True):
                    rows.append(_row(axis_id, "entropy auc diff", model, arm, control, value, g["diff"]))
                for value, g in _paired(om, arm, control, "entropy_final").groupby("value", sort=True):
                    rows.append(_row(axis_id, "entropy final diff", model, arm, control, value, g["diff"]))
                for value, g in _paired(om, arm, control, "score").groupby("value", sort=True):
                    rows.append(_row(axis_id, "c accuracy", model, arm, control, value, g["diff"]))
                for value, g in om[om["entry"] == arm].groupby("value", sort=True):
                    rows.append(_row(axis_id, "clip upper low", model, arm, "", value, g["clip_upper_low"], mde=False))
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def axis_verdicts(results: pd.DataFrame) -> list[str]:
    """One sentence per axis and model: what rules (a) and (b) say, as the config's ``verdicts`` rule fixes."""
    out = []
    for (axis_id, model), g in results.groupby(["axis", "model"], sort=True):
        a = g[g["rule"] == "a engagement"]
        b = g[g["rule"] == "b mechanism"]
        if a.empty or a["holds"].iloc[0] is None:
            out.append(f"{axis_id}, {model}: (a) undecided (too few seeds or cells)")
            continue
        if not a["holds"].iloc[0]:
            out.append(f"{axis_id}, {model}: (a) fails: the testbed does not engage clipping as the axis grows")
            continue
        held = [r.arm for r in b.itertuples() if r.holds]
        if held:
            out.append(f"{axis_id}, {model}: (a) holds and (b) holds for {', '.join(held)}")
        else:
            out.append(f"{axis_id}, {model}: (a) holds and (b) does not: the testbed engages clipping and still "
                       "shows no mechanism")  # fmt: skip
    return out
