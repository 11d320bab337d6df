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
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from bandpo.report.atlas import HEAD as ATLAS_HEAD
from bandpo.report.atlas import NOTE as ATLAS_NOTE
from bandpo.report.atlas import atlas_cells, atlas_pairs
from bandpo.report.board import Board, Panel
from bandpo.report.columns import (
    Column,
    baseline_of,
    by_model,
    display_columns,
    max_seeds,
    page_title,
    sections,
    task_columns,
    with_seeds,
)
from bandpo.report.figures import FOREST
from bandpo.report.notes import grader_note, power_lines, power_note, reading_notes, unpaired_lines
from bandpo.report.verdicts import section_html, tier_rows
from bandpo.study import BASE_ENTRY

PARAMS_SEPARATOR = ", "  # the only place a params cell may break: between two "key=value" parts


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("bandpo.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


def _static(name: str) -> str:
    return resources.files("bandpo.report").joinpath("static", name).read_text(encoding="utf-8")


def _experiment_column(table: pd.DataFrame) -> str:
    """The column the experiment filter reads: ``experiment`` when the leaderboard has one, else ``profile``."""
    return "experiment" if "experiment" in table else "profile"


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


def leaderboard_html(board: Board, embed_figures: bool = True) -> str:
    """A standalone HTML page of the board: one sortable table per (experiment, subset, model size) (and per task
    when there are several), filters by experiment and model size, the experiments' notes, notes on how to read
    the numbers and on power, the board's figures embedded as data URIs with their captions (``embed_figures``),
    its panels after the tables, and the equivalence atlas when it has one."""
    script = _static("leaderboard.js")
    script_hash = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = (
        f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'; "
        "base-uri 'none'; form-action 'none'"
    )
    table = with_seeds(board.leaderboard, board.scores)
    exp_col = _experiment_column(table)
    figures = _figures(board) if embed_figures else []
    return (
        _environment()
        .get_template("leaderboard.html.j2")
        .render(
            title=page_title(table, board.title),
            csp=csp,
            css=_static("leaderboard.css"),
            script=script,
            n_entries=table["entry"].nunique() if not table.empty else 0,
            models=list(dict.fromkeys(table["model"].astype(str))) if not table.empty else [],
            experiments=sorted({str(x) for x in table[exp_col].dropna() if str(x)}) if exp_col in table else [],
            max_seeds=max_seeds(table),
            baseline=baseline_of(table),
            tables=_tables(table, exp_col),
            task_tables=_task_tables(board.per_task, exp_col),
            experiment_notes=[{"name": xp, "text": text} for xp, text in board.notes],
            notes=_reading(board),
            atlas=_atlas(board.atlas),
            answer=section_html(tier_rows(board.primary)),
            forest=next((f for f in figures if f["name"] == FOREST), None),
            figures=[f for f in figures if f["name"] != FOREST],
            panels=[_panel(pn) for pn in board.panels],
        )
    )


def _tables(table: pd.DataFrame, exp_col: str) -> list[dict[str, Any]]:
    """The leaderboard's tables, one per (experiment, subset, model size)."""
    cols = display_columns(table)
    return [_table(g, cols, m, "leaderboard", exp_col, heading) for heading, m, g in sections(table)]


def _task_tables(per_task: pd.DataFrame | None, exp_col: str) -> list[dict[str, Any]]:
    """The per-task tables, one per model size; none with a single task."""
    if per_task is None or per_task.empty:
        return []
    tcols = task_columns(per_task)
    return [_table(g, tcols, str(m), "per-task", exp_col) for m, g in by_model(per_task)]


def _figures(board: Board) -> list[dict[str, str]]:
    """Each figure of the board with its caption and its PNG as a data URI."""
    return [
        {
            "name": name,
            "caption": board.captions.get(name, name),
            "src": "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii"),
        }
        for name, path in board.figures.items()
    ]


def _reading(board: Board) -> list[str]:
    """The paragraphs on how to read the numbers, on power and on unpaired seeds, and the grader's sentence."""
    table = board.leaderboard
    reading = reading_notes(table, board.base_per_seed)
    if board.power is not None and not board.power.empty:
        reading += [power_note(table), *power_lines(board.power)]
    reading += unpaired_lines(table)
    reading += [grader_note(table)] if grader_note(table) else []
    return reading


def _panel(panel: Panel) -> dict[str, Any]:
    """A panel for the template: its heading, sentences, and its table's header and rows as text."""
    return {
        "heading": panel.heading,
        "lines": list(panel.lines),
        "heads": [str(c) for c in panel.table.columns] if panel.table is not None else [],
        "rows": [[str(v) for v in r] for r in panel.table.itertuples(index=False)] if panel.table is not None else [],
    }
