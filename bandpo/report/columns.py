"""The columns of the leaderboard tables, described once for the Markdown page and the HTML page: a column is a
key, a header, the cell text of a row and a numeric sort value (`Column`); and the tables themselves, one per
(experiment, subset, model size) (`sections`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from bandpo.analysis.leaderboard import headline_label
from bandpo.analysis.stats import DEFAULT_BASELINE, HEADLINE
from bandpo.report.text import as_float, fmt, fmt_ci, fmt_seconds

T_INTERVAL = "t_"  # the tables show Student-t intervals over seeds; leaderboard.csv has the bootstrap ones too


@dataclass(frozen=True)
class Column:
    """A column of the Markdown / HTML tables: sort key, header, cell text of a row, numeric sort value (None:
    sorted as text)."""

    key: str
    head: str
    text: Callable[[Mapping[str, Any]], str]
    sort: Callable[[Mapping[str, Any]], float] | None = None


def ci_column(key: str, head: str, scale: float = 100.0, digits: int = 1, interval: str = "") -> Column:
    """``value [ci_low, ci_high]`` of the columns key, key_{interval}ci_low, key_{interval}ci_high (``interval``
    "t_": the Student-t interval, "": the column's only one)."""
    return Column(
        key,
        head,
        lambda r: fmt_ci(
            r.get(key), r.get(f"{key}_{interval}ci_low"), r.get(f"{key}_{interval}ci_high"), scale, digits
        ),  # fmt: skip
        lambda r: as_float(r.get(key)),
    )


def baseline_of(table: pd.DataFrame) -> str:
    return next((b for b in table.get("baseline", []) if isinstance(b, str) and b), DEFAULT_BASELINE)


def identity_columns(table: pd.DataFrame) -> list[Column]:
    cols = [
        Column("entry", "entry", lambda r: str(r["entry"])),
        Column("method", "method", lambda r: str(r.get("method") or "")),
        Column("params", "params", lambda r: str(r.get("params") or "")),
    ]
    if "n_seeds" in table:
        cols.append(
            Column("n_seeds", "seeds", lambda r: fmt(r.get("n_seeds"), 1.0, 0), lambda r: as_float(r["n_seeds"]))
        )
    return cols


def display_columns(table: pd.DataFrame) -> list[Column]:
    """The columns of the leaderboard tables (Markdown and HTML)."""
    cols = identity_columns(table)
    baseline = baseline_of(table)
    for family in HEADLINE:
        label = headline_label(table, family)
        if not label:
            continue
        cols.append(ci_column(label, label.replace("_bootstrap", " (bootstrap)") + " %", interval=T_INTERVAL))
        if family == "mean":
            # the paired comparison with the baseline (that of the other metrics, and rliable's IQM ``mean@k_iqm``,
            # are in leaderboard.csv)
            cols.append(
                Column(f"{label}_diff", f"{label} Δ %", lambda r, c=label: diff_text(r, c),
                       lambda r, c=label: as_float(r.get(f"{c}_diff")))
            )  # fmt: skip
            cols.append(
                Column(f"{label}_diff_poi", f"{label} P(>{baseline})", lambda r, c=label: poi_text(r, c),
                        lambda r, c=label: as_float(r.get(f"{c}_diff_poi")))
            )  # fmt: skip
            if f"{label}_verdict_holm" in table:  # `bandpo.analysis.experiments.family_verdicts`
                cols.append(Column(f"{label}_verdict_holm", "verdict",
                                   lambda r, c=label: verdict_text(r, c)))  # fmt: skip
    if "entropy_final" in table:
        cols.append(ci_column("entropy_final", "entropy (final)", 1.0, 3))
    if "clipfrac" in table:
        cols.append(Column("clipfrac", "clipped %", lambda r: fmt(r.get("clipfrac"), 100.0, 2),
                            lambda r: as_float(r.get("clipfrac"))))  # fmt: skip
    for key, head in (("train_seconds_mean", "train time / run"),):  # the total over seeds: leaderboard.csv
        if key in table:
            cols.append(Column(key, head, lambda r, k=key: fmt_seconds(r.get(k)), lambda r, k=key: as_float(r.get(k))))
    return cols


def task_columns(table: pd.DataFrame) -> list[Column]:
    cols = identity_columns(table)
    for c in table.columns:
        if " " in c and not c.endswith(("_ci_low", "_ci_high")):
            cols.append(ci_column(c, f"{c} %"))
    return cols


def poi_text(r: Mapping[str, Any], label: str) -> str:
    """P(improvement) on the paired differences, with its interval."""
    if r.get("entry") == r.get("baseline"):
        return "(baseline)"
    key = f"{label}_diff_poi"
    return fmt_ci(r.get(key), r.get(f"{key}_ci_low"), r.get(f"{key}_ci_high"), 1.0, 2)


def diff_text(r: Mapping[str, Any], label: str) -> str:
    """The mean paired difference from the baseline in points, signed, with its interval."""
    if r.get("entry") == r.get("baseline"):
        return "(baseline)"
    key = f"{label}_diff"
    text = fmt_ci(r.get(key), r.get(f"{key}_{T_INTERVAL}ci_low"), r.get(f"{key}_{T_INTERVAL}ci_high"))
    return text if text == "—" or text.startswith("-") else "+" + text


def verdict_text(r: Mapping[str, Any], label: str) -> str:
    """The verdict cell: the words of a secondary's Holm-adjusted verdict ("better", "not better by 2 points",
    "undecided"), the primary's own (marked) on its row; the word itself where a table has no words column."""
    words = r.get(f"{label}_label")
    if not isinstance(words, str) or not words:
        words = r.get(f"{label}_verdict_holm")
    if not isinstance(words, str) or not words:
        return ""
    return f"{words} (primary)" if r.get(f"{label}_role") == "primary" else words


def max_seeds(table: pd.DataFrame) -> int:
    return int(table["n_seeds"].max()) if "n_seeds" in table and len(table) else 0


def by_model(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return [] if table.empty else list(table.groupby("model", sort=False))


def section_heading(experiment: str, subset: str, model: str) -> str:
    """A table's heading: the model size for the main experiment, else ``experiment: model`` (and the subset)."""
    if experiment in ("", "main") and not subset:
        return model
    return f"{experiment}: {model}" + (f", subset {subset}" if subset else "")


def sections(table: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(heading, model, rows) of each table: one per (experiment, subset, model) in the table's order (a table
    without experiment columns: one per model)."""
    if table.empty:
        return []
    if "experiment" not in table:
        return [(str(m), str(m), g) for m, g in by_model(table)]
    keys = table[["experiment", "subset"]].astype(object).fillna("").astype(str)
    out = []
    for (xp, subset), g in table.groupby([keys["experiment"], keys["subset"]], sort=False):
        out += [(section_heading(xp, subset, str(m)), str(m), gm) for m, gm in by_model(g)]
    return out


def page_title(table: pd.DataFrame, title: str | None) -> str:
    profile = next((p for p in table.get("profile", []) if isinstance(p, str) and p), "")
    return title or f"BandPO-Bench leaderboard: {profile or 'results'}"
