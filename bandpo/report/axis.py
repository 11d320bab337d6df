"""Design axes: one trainer setting varied over experiments, and the rules fixed for it before any run.

An axis (config ``axes:``) names a trainer field (``key``, e.g. ``updates_per_step``: the off-policy degree D) and
its cells: experiments that each set that field to one value. This module reads an axis from the same frames as
the rest of the report:

- `with_reuse`: a cell whose settings equal main's reuses main's runs (``reuse``, filled in by `bandpo.plan.sweep`);
the
  report copies main's rows into that cell, so every cell has all its runs;
- `run_outcomes`: per run, the outcomes the rules read (entropy as the mean of the per-step rollout entropy -- the
  area under its curve per step -- and final; clip fractions in the lowest old-probability bucket by direction;
  stopped fractions by advantage sign; approx KL; reward) plus the final score of the axis's task;
- `axis_results`: the pre-registered rules of the off-policy design (config ``axes.<id>.primary.rules``):
  (a) engagement -- the control's upper clip fraction in the lowest bucket rises with the axis value;
  (b) mechanism -- the paired entropy difference (arm - control, same base model and seed) rises with it and is
      resolved at the largest value;
  (c) accuracy -- the paired score difference (arm - control) at each value;
  every slope is the mean of per-seed least-squares slopes (each seed's runs share their base model, so the
  slope is paired within a seed) with a Student-t interval over seeds;
- `select_setting`: the selection rule of an experiment with ``select`` (``largest-learning``: the largest axis
  value at which the entry gains over the base model, paired by seed, with a 95% t interval above 0; else the
  fallback), written by the DAG's selection job and read back by the trainer (``--set-file``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from bandpo.plan.sweep import BASE_ENTRY, MAIN, slot_seeds
from bandpo.report.stats import minimum_detectable_difference, t_interval
from bandpo.report.tables import fmt, rounded
from bandpo.report.training import final_window

LOW_BUCKET = "p0.0-0.2"  # the lowest old-probability bucket (bandpo.methods.diagnostics.BUCKET_LABELS[0])
# per-run outcome <- per-step metric (mean over the run's steps; absent metrics give NaN)
STEP_MEANS = {
    "entropy_auc": "entropy",
    "reward_auc": "reward_mean",
    "clip_upper_low": f"clipfrac_upper/{LOW_BUCKET}",
    "clip_lower_low": f"clipfrac_lower/{LOW_BUCKET}",
    "clip_upper": "clipfrac_upper",
    "clip_lower": "clipfrac_lower",
    "stopped_pos_low": f"stopped_frac_pos/{LOW_BUCKET}",
    "stopped_neg_low": f"stopped_frac_neg/{LOW_BUCKET}",
    "stopped_pos": "stopped_frac_pos",
    "stopped_neg": "stopped_frac_neg",
    "approx_kl": "approx_kl",
}
# the update statistics among them (logged per update, so a run's all-updates value differs from its off-policy one):
# steps.csv keeps these as all/<key> for the axes' runs (bandpo.report.steps), so axis_runs.csv recomputes from it
UPDATE_MEANS = [c for c in STEP_MEANS.values() if c not in ("entropy", "reward_mean")]
OUTCOME_COLUMNS = ["experiment", "axis", "value", "model", "entry", "seed", *STEP_MEANS, "entropy_final", "score"]
RESULT_COLUMNS = ["axis", "rule", "model", "arm", "control", "value", "n", "estimate", "ci_low", "ci_high", "mde",
                  "holds", "note"]  # fmt: skip
# The selection rules (config `select.rule`), each with the sentence the page prints under the selection's table.
# Revision 2, `largest-learning-compared`, was declared after the publication run of 0bafd06, where revision 1 chose
# D = 1, the on-policy null at which every bound rule trains the same run, so that the separation run could not
# separate anything; revision 1 stays, unchanged, for the runs it selected.
SELECT_RULES = {
    "largest-learning": (
        "rule largest-learning, fixed before the axis ran: the largest value at which the entry's paired gain over "
        "the base model has a 95% t interval above 0"
    ),
    "largest-learning-compared": (
        "rule largest-learning-compared, fixed before the axis ran: among the cells that run both compared arms, "
        "the largest value at which the entry's paired gain over the base model has a 95% t interval above 0"
    ),
}
SELECT_COLUMNS = ["experiment", "axis", "key", "value", "entry", "model", "n", "gain", "ci_low", "ci_high",
                  "qualifies", "selected"]  # fmt: skip


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


def _final_scores(scores: pd.DataFrame, task: str | None) -> pd.DataFrame:
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
        final = _final_scores(scores, task).set_index(["experiment", "model", "entry", "seed"])["score"]
        for cell, value in axis_cells(axis, experiments):
            m = metrics[metrics["experiment"].fillna(MAIN) == cell] if not metrics.empty else metrics
            for (model, entry, seed), g in m.groupby(["model", "entry", "seed"], sort=True) if not m.empty else []:
                row = {"experiment": cell, "axis": axis_id, "value": value, "model": model, "entry": entry,
                       "seed": int(seed)}  # fmt: skip
                for name, column in STEP_MEANS.items():
                    row[name] = float(g[column].mean()) if column in g and g[column].notna().any() else np.nan
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


def select_setting(
    scores: pd.DataFrame,
    experiments: Mapping[str, Mapping[str, Any]],
    axes: Mapping[str, Mapping[str, Any]],
    experiment: str,
    confidence: float = 0.95,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """The setting an experiment's ``select`` rule picks, as ``{key: value}`` (the trainer's ``--set-file``), and
    the table it was read from (`SELECT_COLUMNS`, one row per cell and model).

    ``largest-learning``: per cell, the entry's gain over the base model (final mean@k of the axis's primary task,
    paired by seed: base model s against the entry's run from base model s) with a Student-t interval; the
    largest axis value whose interval lies above 0 on every model; ``fallback`` when none does. The base rows are
    those of the axis's cell that scores them (main's, reused, in the default config).
    ``largest-learning-compared``: the same among the cells that run both arms of the experiment's
    ``primary.compare`` (a cell that runs the control alone, such as the on-policy null D = 1, cannot be chosen);
    the table lists those cells only (`SELECT_RULES`). ``min_gain`` (revision 3, points of mean@k, default 0): a
    cell qualifies only if the interval lies above it, a margin so that the choice does not flip between reruns
    whose gain at a borderline cell straddles 0."""
    sel = experiments[experiment]["select"]
    min_gain = float(sel.get("min_gain") or 0.0) / 100  # points of mean@k -> a fraction
    axis = axes[sel["axis"]]
    if sel["rule"] not in SELECT_RULES:
        raise ValueError(f"unknown selection rule {sel['rule']!r} (known: {', '.join(SELECT_RULES)})")
    final = _final_scores(with_reuse(scores, experiments), (axis.get("primary") or {}).get("task"))
    base = final[final["entry"] == BASE_ENTRY].groupby(["model", "seed"])["score"].mean()
    cells = axis_cells(axis, experiments)
    if sel["rule"] == "largest-learning-compared":  # only cells where the compared rules can differ
        arms = set((experiments[experiment].get("primary") or {}).get("compare") or [])
        cells = [(c, v) for c, v in cells if arms <= set(experiments[c].get("methods") or [])]
    rows = []
    for cell, value in cells:
        arm = final[(final["experiment"] == cell) & (final["entry"] == sel["entry"])]
        for model, g in arm.groupby("model", sort=True):
            gains = np.array(
                [s - base.get((model, seed), np.nan) for seed, s in zip(g["seed"], g["score"], strict=True)]
            )
            gains = gains[np.isfinite(gains)]
            lo, hi = t_interval(gains, confidence)
            mean = float(gains.mean()) if gains.size else np.nan
            rows.append([experiment, sel["axis"], axis["key"], value, sel["entry"], model, gains.size, mean, lo, hi,
                         bool(lo > min_gain), False])  # fmt: skip
    table = pd.DataFrame(rows, columns=SELECT_COLUMNS)
    ok = table.groupby("value")["qualifies"].all() if not table.empty else pd.Series(dtype=bool)
    chosen = float(ok[ok].index.max()) if ok.any() else None
    value = chosen if chosen is not None else sel["fallback"]
    if chosen is not None:
        table["selected"] = table["value"] == chosen
        value = int(chosen) if float(chosen).is_integer() else chosen
    return {axis["key"]: value}, table


def _ci(est: float, lo: float, hi: float, scale: float = 1.0, digits: int = 3) -> str:
    """Signed, with its interval, rounded as every page and doc rounds (`bandpo.report.tables.rounded`)."""
    if not np.isfinite(est):
        return ""

    def signed(v: float) -> str:
        return f"{rounded(v, scale, digits):+.{digits}f}"

    return signed(est) + (f" [{signed(lo)}, {signed(hi)}]" if np.isfinite(lo) else "")


def _stat(keyed: pd.DataFrame, rule: str, model: str, arm: str, value: float) -> pd.Series | None:
    key = (rule, model, arm, value)
    return keyed.loc[key] if key in keyed.index else None


def axis_panels(
    results: pd.DataFrame,
    axes: Mapping[str, Mapping[str, Any]],
    selections: Mapping[str, pd.DataFrame] | None = None,
    select_rules: Mapping[str, str | Mapping[str, Any]] | None = None,
) -> list:
    """The page's sections of each axis (`bandpo.report.tables.Panel`): its rules as fixed in the config with the
    verdicts, the per-value table of the paired differences, and each selection the axis made (``select_rules``:
    the selecting experiment's ``select`` (its `SELECT_RULES` name and ``min_gain``) or the rule's name alone,
    ``largest-learning`` where not given)."""
    select_rules = select_rules or {}
    from bandpo.report.tables import Panel

    panels = []
    for axis_id, axis in axes.items():
        res = results[results["axis"] == axis_id] if not results.empty else results
        if res.empty:
            continue
        label = axis.get("label") or axis["key"]
        rules = (axis.get("primary") or {}).get("rules") or {}
        lines = [f"{label} = {axis['key']}; {axis.get('description', '')}".strip(), *rules.values()]
        lines += [f"Verdict: {v}" for v in axis_verdicts(res)]
        decided = res[res["rule"].isin(["a engagement", "b mechanism"])]
        table = pd.DataFrame({
            "rule": decided["rule"], "model": decided["model"], "arm": decided["arm"], "seeds": decided["n"],
            "mean per-seed slope [95% t]": [_ci(r.estimate, r.ci_low, r.ci_high, digits=4)
                                            for r in decided.itertuples()],
            "holds": ["yes" if h is True else "no" if h is False else "undecided" for h in decided["holds"]],
        })  # fmt: skip
        panels.append(Panel(f"Axis {axis_id}: rules fixed before the runs", tuple(lines), table))
        rows = []
        keyed = res.set_index(["rule", "model", "arm", "value"])
        paired = res[res["rule"] == "entropy auc diff"]  # every arm and value with paired runs
        for (model, arm, control, value), _g in paired.groupby(["model", "arm", "control", "value"], sort=True):
            acc, ent, fin = (_stat(keyed, r, model, arm, value) for r in ("c accuracy", "entropy auc diff",
                                                                           "entropy final diff"))  # fmt: skip
            clip_arm = _stat(keyed, "clip upper low", model, arm, value)
            clip_ctrl = _stat(keyed, "clip upper low", model, control, value)
            rows.append({
                label: f"{value:g}", "model": model, "arm": arm, "seeds": int(ent["n"]),
                "upper clip p<0.2, arm / control (%)": (f"{fmt(clip_arm['estimate'], 100, 2)} / "
                                                         f"{fmt(clip_ctrl['estimate'], 100, 2)}")
                if clip_arm is not None and clip_ctrl is not None else "",
                "entropy diff, mean over steps (nats)": _ci(ent["estimate"], ent["ci_low"], ent["ci_high"])
                if ent is not None else "",
                "final entropy diff (nats)": _ci(fin["estimate"], fin["ci_low"], fin["ci_high"]) if fin is not None
                else "",
                "mean@k diff (points)": _ci(acc["estimate"], acc["ci_low"], acc["ci_high"], 100.0, 1)
                if acc is not None else "not scored",
                "MDE (points)": fmt(acc["mde"], 100) if acc is not None and np.isfinite(acc["mde"]) else "",
            })  # fmt: skip
        panels.append(Panel(f"Axis {axis_id}: paired differences from the control per {label}",
                            ("arm - control, same base model and seed; 95% paired t intervals; MDE: the minimum "
                             "detectable mean@k difference at 80% power (exact noncentral t), its SD estimated "
                             "from these few seeds",), pd.DataFrame(rows)))  # fmt: skip
        for xp, sel in (selections or {}).items():
            if sel.empty or sel["axis"].iloc[0] != axis_id:
                continue
            chosen = sel[sel["selected"]]["value"]
            what = f"{label} = {chosen.iloc[0]:g}" if not chosen.empty else "none qualified: the fallback"
            spec = select_rules.get(xp, "largest-learning")
            spec = spec if isinstance(spec, Mapping) else {"rule": spec}
            min_gain = float(spec.get("min_gain") or 0.0)
            above = f"interval above {min_gain:g} points" if min_gain else "interval above 0"
            sentence = SELECT_RULES[spec["rule"]] + (
                f"; revision 3: the interval must lie above {min_gain:g} points, not merely above 0 (a margin "
                "fixed before the run, so that a borderline cell does not flip the choice between reruns)"
                if min_gain else "")  # fmt: skip
            t = pd.DataFrame({
                label: [f"{v:g}" for v in sel["value"]], "model": sel["model"], "seeds": sel["n"],
                f"gain of {sel['entry'].iloc[0]} over the base model (points)":
                    [_ci(r.gain, r.ci_low, r.ci_high, 100.0, 1) for r in sel.itertuples()],
                above: ["yes" if q else "no" for q in sel["qualifies"]],
            })  # fmt: skip
            panels.append(
                Panel(
                    f"Experiment {xp}: the regime the axis selected ({what})",
                    (sentence,),
                    t,
                )
            )
    return panels
