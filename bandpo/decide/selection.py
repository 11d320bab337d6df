"""An experiment's selection rule (config ``select``): the setting it picks from its axis's scores, which the DAG
writes for that experiment's training jobs to read (``python -m bandpo.decide select``; the trainer's
``--set-file``), and the table the rule read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bandpo.analysis.axis import axis_cells, final_scores, with_reuse
from bandpo.analysis.load import load_eval_scores
from bandpo.core.files import atomic_write_text, write_csv
from bandpo.stats.rule import t_interval
from bandpo.study import BASE_ENTRY, select_min_gain

# The selection rules (config `select.rule`), each with the sentence the page prints under the selection's table.
# `largest-learning-compared` reads only the cells that run both compared arms: at a cell where every bound rule trains
# the same run (the on-policy null, D = 1) nothing can separate them. Both stay, so that a published selection is
# made again with the rule it used (their history: docs/experiments.md, "separation").
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
    the table lists those cells only (`SELECT_RULES`). ``min_gain`` (points of mean@k, default 0): a
    cell qualifies only if the interval lies above it, a margin so that the choice does not flip between reruns
    whose gain at a borderline cell straddles 0."""
    sel = experiments[experiment]["select"]
    min_gain = select_min_gain(sel)  # a fraction of the score
    axis = axes[sel["axis"]]
    if sel["rule"] not in SELECT_RULES:
        raise ValueError(f"unknown selection rule {sel['rule']!r} (known: {', '.join(SELECT_RULES)})")
    final = final_scores(with_reuse(scores, experiments), (axis.get("primary") or {}).get("task"))
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


def select(
    results_dir: str | os.PathLike,
    experiment: str,
    experiments: Mapping[str, Mapping],
    axes: Mapping[str, Mapping],
    out: str | os.PathLike,
) -> list[Path]:
    """Apply an experiment's ``select`` rule to the scores under ``results_dir`` (`select_setting`): ``out`` gets the
    chosen ``{key: value}`` (bandpo.train.loop --set-file), ``out`` with .csv the table the rule read.
    ValueError when the experiment has no rule or no score of the rule's entry exists."""
    if experiment not in experiments or not (experiments[experiment] or {}).get("select"):
        raise ValueError(f"experiment {experiment!r} has no select rule")
    setting, table = select_setting(load_eval_scores(results_dir), experiments, axes, experiment)
    if table.empty:
        raise ValueError(f"no scores of {experiments[experiment]['select']['entry']!r} in the cells of the axis under "
                         f"{results_dir}/eval")  # fmt: skip
    out = Path(out)
    csv_path = out.with_suffix(".csv")
    write_csv(table, csv_path)
    atomic_write_text(out, json.dumps(setting, sort_keys=True) + "\n")
    return [out, csv_path]
