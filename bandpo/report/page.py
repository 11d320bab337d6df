"""The leaderboard as one self-contained HTML page, rendered with Jinja2 from the package's files::

    templates/leaderboard.html.j2   the page (autoescaped: every text from the data is escaped)
    static/leaderboard.css          inlined into <style>
    static/leaderboard.js           inlined into <script>: sortable columns, the experiment / model-size filters

Figures are embedded as data URIs. The page's Content-Security-Policy allows no network access and only its own
inline script (by hash), so even an unescaped string could not run code.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from bandpo.plan.sweep import BASE_ENTRY
from bandpo.report.atlas import HEAD as ATLAS_HEAD
from bandpo.report.atlas import NOTE as ATLAS_NOTE
from bandpo.report.atlas import atlas_cells, atlas_pairs
from bandpo.report.tables import (
    Column,
    Panel,
    baseline_of,
    by_model,
    display_columns,
    grader_note,
    max_seeds,
    page_title,
    power_lines,
    power_note,
    reading_notes,
    sections,
    task_columns,
    unpaired_lines,
)

PARAMS_SEPARATOR = ", "  # the only place a params cell may break: between two "key=value" parts


@cache
def _environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("bandpo.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def _static(name: str) -> str:
    return resources.files("bandpo.report").joinpath("static", name).read_text(encoding="utf-8")


def _experiment_column(board: pd.DataFrame) -> str:
    """The column the experiment filter reads: ``experiment`` when the leaderboard has one, else ``profile``."""
    return "experiment" if "experiment" in board else "profile"


def _cell(col: Column, r: Mapping[str, Any]) -> dict[str, Any]:
    """A table cell for the template: its text in parts (a params label split at ", "; a number and its "[lo, hi]"
    interval), its numeric sort value (None for text columns, "" for NaN) and its title."""
    text = col.text(r)
    cell: dict[str, Any] = {"key": col.key, "numeric": col.sort is not None, "title": None}
    if col.sort is None:
        cell["parts"] = (text.split(PARAMS_SEPARATOR) if text else []) if col.key == "params" else [text]
        if col.key == "params":
            cell["title"] = str(r.get("params_json") or "")
        cell["value"] = None
        return cell
    v = col.sort(r)
    cell["value"] = "" if math.isnan(v) else repr(float(v))
    value, sep, interval = text.partition(" [")
    cell["parts"] = [value, "[" + interval] if sep else [text]
    return cell


def _table(
    rows: pd.DataFrame, cols: Sequence[Column], model: str, kind: str, exp_col: str, heading: str | None = None
) -> dict[str, Any]:
    body = []
    for _, r in rows.iterrows():
        klass = "base" if r["entry"] == BASE_ENTRY else ("baseline" if r["entry"] == r.get("baseline") else "")
        body.append(
            {
                "klass": klass,
                "entry": str(r["entry"]),
                "experiment": str(r.get(exp_col) or ""),
                "cells": [_cell(c, r) for c in cols],
            }
        )
    heads = [{"key": c.key, "head": c.head, "numeric": c.sort is not None} for c in cols]
    return {"model": model, "heading": heading or model, "kind": kind, "heads": heads, "rows": body}


def _atlas(atlas: pd.DataFrame | None) -> dict[str, Any] | None:
    """The atlas section for the template: its note, the pairs' legend, the header and the rows' cells."""
    if atlas is None or atlas.empty:
        return None
    return {"note": ATLAS_NOTE, "pairs": atlas_pairs(atlas), "head": ATLAS_HEAD, "rows": atlas_cells(atlas)}


def leaderboard_html(
    board: pd.DataFrame,
    figures: Mapping[str, str | os.PathLike] | None = None,
    captions: Mapping[str, str] | None = None,
    title: str | None = None,
    per_task: pd.DataFrame | None = None,
    notes: Sequence[tuple[str, str]] = (),
    power: pd.DataFrame | None = None,
    panels: Sequence[Panel] = (),
    atlas: pd.DataFrame | None = None,
    base_per_seed: bool | None = None,
) -> str:
    """A standalone HTML page of the leaderboard: one sortable table per (experiment, subset, model size) (and per
    task when there are several), filters by experiment and model size, the experiments' ``notes`` (experiment,
    text), notes on how to read the numbers and on power (``power``: `bandpo.report.stats.power_table`), and
    ``figures`` (name -> PNG file) embedded as data URIs with their ``captions``, ``panels`` (`Panel`: heading,
    sentences, a table of text) after the tables, and the equivalence atlas (``atlas``: atlas.csv,
    `bandpo.report.atlas`) when given."""
    script = _static("leaderboard.js")
    script_hash = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = (
        f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'; "
        "base-uri 'none'; form-action 'none'"
    )
    exp_col = _experiment_column(board)
    cols = display_columns(board)
    tables = [_table(g, cols, m, "leaderboard", exp_col, heading) for heading, m, g in sections(board)]
    task_tables = []
    if per_task is not None and not per_task.empty:
        tcols = task_columns(per_task)
        task_tables = [_table(g, tcols, str(m), "per-task", exp_col) for m, g in by_model(per_task)]
    figs = [
        {
            "name": name,
            "caption": (captions or {}).get(name, name),
            "src": "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii"),
        }
        for name, path in (figures or {}).items()
    ]
    baseline = baseline_of(board)
    reading = reading_notes(board, base_per_seed)
    if power is not None and not power.empty:
        reading += [power_note(board), *power_lines(power)]
    reading += unpaired_lines(board)
    reading += [grader_note(board)] if grader_note(board) else []
    return (
        _environment()
        .get_template("leaderboard.html.j2")
        .render(
            title=page_title(board, title),
            csp=csp,
            css=_static("leaderboard.css"),
            script=script,
            n_entries=board["entry"].nunique() if not board.empty else 0,
            models=list(dict.fromkeys(board["model"].astype(str))) if not board.empty else [],
            experiments=sorted({str(x) for x in board[exp_col].dropna() if str(x)}) if exp_col in board else [],
            max_seeds=max_seeds(board),
            baseline=baseline,
            tables=tables,
            task_tables=task_tables,
            experiment_notes=[{"name": xp, "text": text} for xp, text in notes],
            notes=reading,
            atlas=_atlas(atlas),
            figures=figs,
            panels=[
                {
                    "heading": pn.heading,
                    "lines": list(pn.lines),
                    "heads": [str(c) for c in pn.table.columns] if pn.table is not None else [],
                    "rows": [[str(v) for v in r] for r in pn.table.itertuples(index=False)]
                    if pn.table is not None
                    else [],
                }
                for pn in panels
            ],  # fmt: skip
        )
    )
