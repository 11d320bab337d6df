"""Doc blocks of the design axes (axis.csv, axis_runs.csv): each axis's verdict and rules, the paired accuracy
differences per axis value, and the selection a rule made from it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bandpo.analysis.axis import axis_verdicts
from bandpo.decide.selection import select_setting
from bandpo.report.board import Board
from docs.blocks.cells import ci, md_table, num, row_series

# The separation run's selection rule (config/config.yaml), applied to a published axis that no experiment of its own
# config selects from (config/offpolicy.yaml): the regime the separation run trained at
SEPARATION_RULE = {"axis": "offpolicy", "rule": "largest-learning-compared", "entry": "grpo", "fallback": 4,
                   "min_gain": 2.0}  # fmt: skip


def selection(board: Board) -> tuple[str, dict, pd.DataFrame]:
    """(experiment, setting, table) of the published config's one select rule, made again from scores.csv
    (`bandpo.decide.selection.select_setting`); for a published axis without a selecting experiment (its own
    config, config/offpolicy.yaml), what `SEPARATION_RULE` picks from it."""
    xps = dict(board.experiments)
    names = [x for x, v in xps.items() if v.get("select")]
    if not names:
        names = ["separation"]
        xps["separation"] = {"select": SEPARATION_RULE, "primary": {"compare": ["bandpo_kl", "grpo"]}}
    (name,) = names
    setting, table = select_setting(board.scores, xps, board.axes, name)
    return name, setting, table


def _holds(v) -> bool | None:
    """axis.csv's ``holds`` as read back (True / False / empty for a statistic without a verdict)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    return {"true": True, "false": False}.get(str(v).strip().lower())


def _axis(board: Board) -> pd.DataFrame:
    a = board.axis.copy()
    a["holds"] = a["holds"].map(_holds).astype(object)
    return a


def axis_verdict(board: Board) -> str:
    """The verdict sentence of each design axis and model, as the config's ``verdicts`` rule fixes it."""
    return "; ".join(axis_verdicts(_axis(board))) + "."


def _yes(v) -> str:
    return {True: "yes", False: "no"}.get(_holds(v), "")


def axis_rules(board: Board) -> str:
    """Rules (a) and (b) of each axis: the per-seed slope over the axis value (mean, 95% t interval over seeds) and
    the statistic at the largest value; clip fractions in percent, entropy differences in nats."""
    a = _axis(board)
    rows = []
    for (axis_id, model), g in a.groupby(["axis", "model"], sort=True):
        top = g["value"].max()
        label = f"{axis_id}, {model}"
        for r in row_series(g[g["rule"] == "a engagement"]):
            at = g[(g["rule"] == "clip upper low") & (g["arm"] == r["arm"]) & (g["value"] == top)]
            at_top = ci(*at[["estimate", "ci_low", "ci_high"]].iloc[0], 2) + "%" if len(at) else ""
            rows.append([label, "(a) engagement: upper clip fraction, old p < 0.2", r["arm"], int(r["n"]),
                         ci(r["estimate"], r["ci_low"], r["ci_high"], 3, 100.0, sign=True) + " pp",
                         at_top, _yes(r["holds"])])  # fmt: skip
        for r in row_series(g[g["rule"] == "b mechanism"]):
            at = g[(g["rule"] == "entropy auc diff") & (g["arm"] == r["arm"]) & (g["value"] == top)]
            at_top = ci(*at[["estimate", "ci_low", "ci_high"]].iloc[0], 3, 1.0, sign=True) if len(at) else ""
            rows.append([label, f"(b) mechanism: entropy, {r['arm']} − {r['control']}", r["arm"], int(r["n"]),
                         ci(r["estimate"], r["ci_low"], r["ci_high"], 4, 1.0, sign=True), at_top,
                         _yes(r["holds"])])  # fmt: skip
    top_label = "largest D" if a.empty else f"at D = {a['value'].max():g}"
    head = ["axis", "rule", "arm", "seeds", "slope per unit D [95% t]", f"{top_label} [95% t]", "holds"]
    return md_table(head, rows, right=3)


def axis_accuracy(board: Board) -> str:
    """Rule (c): per arm and axis value, the paired mean@8 difference from the control (points, 95% paired t
    interval, and its minimum detectable difference at 80% power)."""
    a = _axis(board)
    c = a[a["rule"] == "c accuracy"]
    values = sorted(c["value"].dropna().unique())
    rows = []
    for (model, arm), g in c.groupby(["model", "arm"], sort=False):
        by = g.set_index("value")
        cells = []
        for v in values:
            if v in by.index:
                r = by.loc[v]
                cells.append(f"{ci(r['estimate'], r['ci_low'], r['ci_high'], sign=True)} (MDE {num(r['mde'])})")
            else:
                cells.append("—")
        rows.append([model, f"{arm} − {g['control'].iloc[0]}", *cells])
    return md_table(["model", "paired mean@8 difference", *[f"D = {v:g}" for v in values]], rows, right=2)


def axis_accuracy_summary(board: Board) -> str:
    """Rule (c) in one sentence: how many of the paired mean@8 differences exclude 0, and which."""
    c = _axis(board)
    c = c[c["rule"] == "c accuracy"].dropna(subset=["ci_low", "ci_high"])
    out = c[(c["ci_low"] > 0) | (c["ci_high"] < 0)]
    named = "; ".join(f"{r.arm} − {r.control} at D = {r.value:g}, {ci(r.estimate, r.ci_low, r.ci_high, sign=True)}"
                      for r in out.itertuples())  # fmt: skip
    return f"{len(out)} of {len(c)} paired mean@8 differences exclude 0" + (f" ({named})" if named else "")


def axis_table(board: Board) -> str:
    """Per axis value and arm (mean over seeds): upper and lower clip fractions among tokens of old probability
    < 0.2 and overall, mean rollout entropy (area under the curve per step), final entropy, approx KL and mean@8
    (axis_runs.csv)."""
    r = pd.read_csv(board.folder / "axis_runs.csv")
    cols = ["clip_upper_low", "clip_lower_low", "clip_upper", "clip_lower", "entropy_auc", "entropy_final",
            "approx_kl", "score"]  # fmt: skip
    g = r.groupby(["model", "value", "entry"], sort=True)
    m = g[cols].mean()
    n = g.size()
    rows = []
    for (model, value, entry), x in m.iterrows():
        rows.append([model, f"{value:g}", entry, int(n[(model, value, entry)]),
                     *(num(x[c], 2) + "%" for c in cols[:4]), num(x["entropy_auc"], 3, 1.0),
                     num(x["entropy_final"], 3, 1.0), num(x["approx_kl"], 4, 1.0), num(x["score"])])  # fmt: skip
    head = ["model", "D", "entry", "seeds", "upper clip, p < 0.2", "lower clip, p < 0.2", "upper clip", "lower clip",
            "entropy (mean)", "entropy (final)", "approx KL", "mean@8"]  # fmt: skip
    return md_table(head, rows, right=3)


def selection_table(board: Board) -> str:
    """The selection rule's table (`selection`): per D, GRPO's paired gain over the base model, whether its
    interval lies above the rule's minimum (0, or the rule's ``min_gain``) and the cell chosen."""
    name, _setting, t = selection(board)
    cfg = board.experiments.get(name) or {}
    min_gain = float((cfg.get("select") or SEPARATION_RULE).get("min_gain") or 0.0)
    rows = [[r["model"], f"{r['value']:g}", r["entry"], int(r["n"]),
             ci(r["gain"], r["ci_low"], r["ci_high"], sign=True), _yes(r["qualifies"]), "yes" if r["selected"] else ""]
            for r in row_series(t)]  # fmt: skip
    above = f"interval above {min_gain:g} points" if min_gain else "interval above 0"
    head = ["model", "D", "entry", "seeds", "gain over the base model, paired t", above, "selected"]
    return md_table(head, rows, right=3)
