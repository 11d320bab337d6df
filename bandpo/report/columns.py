"""The columns of the leaderboard tables, described once for the Markdown page and the HTML page: a column is a
key, a header, the cell text of a row and a numeric sort value (`Column`); and the tables themselves, one per
(experiment, subset, model size) (`sections`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from bandpo.analysis.leaderboard import headline_label, identical_to_baseline
from bandpo.analysis.scores import DEFAULT_BASELINE, HEADLINE
from bandpo.analysis.training import ENTRY_STATS, RunMetric, entry_columns
from bandpo.report.text import as_float, fmt, fmt_ci, fmt_seconds
from bandpo.stats.rule import ESTIMATE_ONLY, UNDECIDED
from bandpo.study import BASE_ENTRY

IDENTICAL = "identical to {baseline} on every seed (no evidence either way)"
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
        cols.append(Column("n_seeds", "seeds", seeds_text, lambda r: as_float(r["n_seeds"])))
    return cols


def seeds_text(r: Mapping[str, Any]) -> str:
    """The seed count, with the seeds themselves where the table has them (`with_seeds`): "5 (0-4)"."""
    n = fmt(r.get("n_seeds"), 1.0, 0)
    seeds = r.get("seeds")
    return f"{n} ({seeds})" if isinstance(seeds, str) and seeds else n


def seed_ranges(seeds: Iterable[int]) -> str:
    """Seeds as runs of consecutive numbers: [0, 1, 2, 5] -> "0-2, 5"."""
    out: list[list[int]] = []
    for s in sorted(set(int(x) for x in seeds)):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def with_seeds(table: pd.DataFrame, scores: pd.DataFrame | None) -> pd.DataFrame:
    """The table with a ``seeds`` column (`seed_ranges` of each row's scored seeds) and ``diff_common``: the row's
    paired difference from the baseline in the headline mean@k over the seeds that every trained row of its table
    has but those identical to the baseline (`identical_to_baseline`: their difference is 0 on any seeds, so the
    seeds they lack do not narrow the others'; the order of `by_paired_difference`), both read from the scores."""
    keys = [k for k in ("experiment", "subset", "model", "entry") if k in table and scores is not None and k in scores]
    if scores is None or scores.empty or "seed" not in scores or "entry" not in keys:
        return table
    norm = scores.astype({k: object for k in keys}).fillna({k: "" for k in keys})
    seeds = {tuple(str(v) for v in k): seed_ranges(g["seed"]) for k, g in norm.groupby(keys, sort=False)}
    out = table.copy()
    key_of = [tuple(str(r.get(k) if r.get(k) == r.get(k) else "") for k in keys) for r in out.to_dict("records")]
    out["seeds"] = [seeds.get(k, "") for k in key_of]
    label = headline_label(table, "mean")
    if label and "name" in norm and "baseline" in out:
        per_seed = norm[norm["name"] == label].groupby(keys + ["seed"])["value"].mean()  # tasks weighted equally
        same = [identical_to_baseline(r, label) for r in out.to_dict("records")]
        out["diff_common"] = _common_differences(out, per_seed, key_of, same)
    return out


def _common_differences(
    table: pd.DataFrame, per_seed: pd.Series, key_of: list[tuple[str, ...]], identical: list[bool]
) -> list[float]:
    """Each row's mean paired difference from its baseline over the seeds every trained row of its table shares,
    the rows ``identical`` to the baseline left out of that set."""
    by_row = {k: dict(per_seed.xs(k, level=tuple(range(len(k))))) if k in per_seed.index.droplevel(-1) else {}
              for k in key_of}  # fmt: skip
    groups: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for k, entry, same in zip(key_of, table["entry"], identical, strict=True):
        if entry != BASE_ENTRY and not same:
            groups.setdefault(k[:-1], []).append(k)
    out = []
    for k, baseline in zip(key_of, table["baseline"], strict=True):
        members = groups.get(k[:-1], [])
        common = set.intersection(*(set(by_row[m]) for m in members)) if members else set()
        base = by_row.get((*k[:-1], str(baseline)), {})
        diffs = [by_row[k][s] - base[s] for s in sorted(common) if s in by_row[k] and s in base]
        out.append(sum(diffs) / len(diffs) if diffs else float("nan"))
    return out


def by_paired_difference(rows: pd.DataFrame) -> pd.DataFrame:
    """A section's rows in reading order: the base model, the baseline, then the entries by their paired difference
    from the baseline (mean@k's) on the seeds every trained row of the table has (``diff_common``, `with_seeds`;
    else on each row's own pairs), largest first; rows without one last."""
    if rows.empty or "entry" not in rows:
        return rows
    label = headline_label(rows, "mean")
    column = "diff_common" if "diff_common" in rows else f"{label}_diff"
    diff = rows[column] if column in rows else pd.Series(float("nan"), rows.index)
    baseline = rows["baseline"] if "baseline" in rows else pd.Series("", rows.index)
    first = [0 if e == BASE_ENTRY else (1 if e == b else 2) for e, b in zip(rows["entry"], baseline, strict=True)]
    key = pd.DataFrame({"first": first, "diff": -diff.astype(float)}, index=rows.index)
    return rows.loc[key.sort_values(["first", "diff"], kind="stable", na_position="last").index]


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
            if f"{label}_verdict_holm" in table:  # `bandpo.analysis.family.family_verdicts`
                cols.append(Column(f"{label}_verdict_holm", "verdict",
                                   lambda r, c=label: verdict_text(r, c)))  # fmt: skip
    return cols + [c for m in ENTRY_STATS if m.display and (c := run_column(m, table)) is not None]


def run_column(metric: RunMetric, table: pd.DataFrame) -> Column | None:
    """The page's column of a training statistic (`bandpo.analysis.training.RUN_METRICS`, its ``display``), None
    where the table lacks it: the mean over seeds (with its interval), or a run's mean duration."""
    show = metric.display
    key = entry_columns(metric.name, metric.entry)[0]
    if key not in table:
        return None
    if show.interval:
        return ci_column(key, show.head, show.scale, show.digits)
    text = (lambda r: fmt_seconds(r.get(key))) if show.seconds else (lambda r: fmt(r.get(key), show.scale, show.digits))
    return Column(key, show.head, text, lambda r: as_float(r.get(key)))


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
    "undecided", with the pairs at which a single look would decide at the row's SD), the primary's own (marked) on
    its row; the word itself where a table has no words column; an
    entry whose paired differences are all 0 says so instead (`IDENTICAL`: no evidence, no verdict)."""
    if identical_to_baseline(r, label):
        return IDENTICAL.format(baseline=r.get("baseline"))
    words = r.get(f"{label}_label")
    if not isinstance(words, str) or not words:
        words = r.get(f"{label}_verdict_holm")
    if not isinstance(words, str) or not words:
        return ""
    need = as_float(r.get(f"{label}_n_needed"))
    if words in (UNDECIDED, ESTIMATE_ONLY) and math.isfinite(need):  # what a verdict would take, at this (rough) SD
        words += f" (a single look decides from n = {int(need)})"
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
        return [(str(m), str(m), by_paired_difference(g)) for m, g in by_model(table)]
    keys = table[["experiment", "subset"]].astype(object).fillna("").astype(str)
    out = []
    for (xp, subset), g in table.groupby([keys["experiment"], keys["subset"]], sort=False):
        out += [(section_heading(xp, subset, str(m)), str(m), by_paired_difference(gm)) for m, gm in by_model(g)]
    return out


def page_title(table: pd.DataFrame, title: str | None) -> str:
    profile = next((p for p in table.get("profile", []) if isinstance(p, str) and p), "")
    return title or f"BandPO-Bench leaderboard: {profile or 'results'}"
