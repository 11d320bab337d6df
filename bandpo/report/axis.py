"""The page's sections of each design axis (`bandpo.report.board.Panel`): its rules as the config fixed them, with
the verdicts; the per-value table of the paired differences; and each selection the axis made."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from bandpo.analysis.axis import axis_verdicts
from bandpo.decide.selection import SELECT_RULES
from bandpo.report.board import Panel
from bandpo.report.text import fmt, rounded


def _ci(est: float, lo: float, hi: float, scale: float = 1.0, digits: int = 3) -> str:
    """Signed, with its interval, rounded as every page and doc rounds (`bandpo.report.text.rounded`)."""
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
) -> list[Panel]:
    """The page's sections of each axis (`bandpo.report.board.Panel`): its rules as fixed in the config with the
    verdicts, the per-value table of the paired differences, and each selection the axis made (``select_rules``:
    the selecting experiment's ``select`` (its `SELECT_RULES` name and ``min_gain``) or the rule's name alone,
    ``largest-learning`` where not given)."""
    select_rules = select_rules or {}
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
