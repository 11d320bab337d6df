"""A rerun against the published run, and one profile's runs beside another's: ``python -m bandpo.report compare``
(`compare`: the rerun's means inside the published intervals, the paired claims kept; `compare_exact`: the same
bits) and ``python -m bandpo.report beside`` (`beside`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from bandpo.analysis.leaderboard import beside_table
from bandpo.analysis.scores import rerun_agreement
from bandpo.core.files import atomic_write_text, write_csv
from bandpo.report.markdown import beside_markdown


def compare(published: str | os.PathLike, rerun: str | os.PathLike, labels: Sequence[str]) -> int:
    """Print `rerun_agreement` of two leaderboard.csv files and a summary; 0, or 2 when a file is missing."""
    frames = []
    for path in (published, rerun):
        if not Path(path).is_file():
            print(f"python -m bandpo.report: error: leaderboard not found: {path}", file=sys.stderr)
            return 2
        frames.append(pd.read_csv(path, keep_default_na=False, na_values=[""]))
    table = rerun_agreement(frames[0], frames[1], labels)
    if table.empty:
        print("python -m bandpo.report: error: the two leaderboards share no (model, entry, metric)", file=sys.stderr)
        return 2
    print(table.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    rated = table[table["inside"].notna()]
    claims = table[table["claim"] != 0]
    print(f"\nrerun inside the published 95% interval: {int(rated['inside'].sum())} of {len(rated)} rows")
    boot = table[table["inside_bootstrap"].notna()]
    print(f"inside the percentile-bootstrap interval instead: {int(boot['inside_bootstrap'].sum())} of {len(boot)}")
    print(f"paired claims (interval excludes 0) that hold on the rerun: {int(claims['claim_holds'].sum())} of "
          f"{len(claims)}")  # fmt: skip
    return 0


EXACT_TABLES = ("steps.csv", "scores.csv")  # the published tables whose bytes a same-bits rerun must repeat


def _first_difference(a: Sequence[dict], b: Sequence[dict], key: str) -> str | None:
    """The first entry (by ``key``) where two lists of records differ, in words; None when they are equal."""
    left, right = {r[key]: r for r in a}, {r[key]: r for r in b}
    for name in sorted(set(left) | set(right)):
        if name not in left or name not in right:
            return f"{name}: only in the {'rerun' if name not in left else 'published run'}"
        if left[name] != right[name]:
            fields = [k for k in sorted(set(left[name]) | set(right[name])) if left[name].get(k) != right[name].get(k)]
            return f"{name}: {', '.join(fields)} differ ({left[name].get(fields[0])} vs {right[name].get(fields[0])})"
    return None


def _first_row_difference(published: Path, rerun: Path) -> str | None:
    """The first line where two CSV files differ: its number, its key columns and the columns that differ."""
    a = published.read_text(encoding="utf-8").splitlines()
    b = rerun.read_text(encoding="utf-8").splitlines()
    if a == b:
        return None
    header = a[0].split(",") if a else []
    if not b or b[0] != (a[0] if a else None):
        return "the header differs"
    frames = [pd.read_csv(p, keep_default_na=False, dtype=str) for p in (published, rerun)]
    for i in range(max(len(frames[0]), len(frames[1]))):
        if i >= len(frames[0]) or i >= len(frames[1]):
            return f"row {i + 1}: only in the {'rerun' if i >= len(frames[0]) else 'published table'}"
        x, y = frames[0].iloc[i], frames[1].iloc[i]
        if not x.equals(y):
            keys = [c for c in ("experiment", "model", "entry", "seed", "step", "task", "metric") if c in header]
            cols = [c for c in header if x[c] != y[c]]
            where = ", ".join(f"{c}={x[c]}" for c in keys)
            return f"row {i + 1} ({where}): {', '.join(cols)} differ ({x[cols[0]]} vs {y[cols[0]]})"
    return "the files differ in bytes only (line endings or quoting)"


def exact_compare(published: str | os.PathLike, rerun: str | os.PathLike) -> list[tuple[str, str | None]]:
    """Whether a rerun gave the same bits as the published run: ``[(what, first difference or None)]`` for the base
    models (weights sha256 per folder, from each provenance.json), the runs (`run_digests`: per-step metrics and
    trained weights), and each of `EXACT_TABLES`. FileNotFoundError names a missing file."""
    published, rerun = Path(published), Path(rerun)
    for folder in (published, rerun):
        for name in ("provenance.json", *EXACT_TABLES):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder / name} not found (compare --exact reads a published results folder)")
    prov = [json.loads((f / "provenance.json").read_text(encoding="utf-8")) for f in (published, rerun)]
    bases = [[{"path": m["path"], "weights_sha256": m["weights_sha256"]} for m in p.get("base_models") or []]
             for p in prov]  # fmt: skip
    out = [
        (f"base models ({len(bases[0])})", _first_difference(bases[0], bases[1], "path")),
        (f"runs ({len(prov[0].get('runs') or [])}: per-step metrics, trained weights)",
         _first_difference(prov[0].get("runs") or [], prov[1].get("runs") or [], "run")),
    ]  # fmt: skip
    out += [(name, _first_row_difference(published / name, rerun / name)) for name in EXACT_TABLES]
    return out


def compare_exact(published: str | os.PathLike, rerun: str | os.PathLike) -> int:
    """Print `exact_compare`; 0 when every part is identical, 1 when one differs, 2 when a file is missing."""
    try:
        parts = exact_compare(published, rerun)
    except FileNotFoundError as err:
        print(f"python -m bandpo.report: error: {err}", file=sys.stderr)
        return 2
    for what, diff in parts:
        print(f"{what}: {'identical' if diff is None else 'DIFFERENT: ' + diff}")
    same = all(diff is None for _, diff in parts)
    print("the rerun gave the same bits" if same else "the rerun differs from the published run")
    return 0 if same else 1


def beside(results: str | os.PathLike, other: str | os.PathLike, metric: str = "mean@8") -> list[Path]:
    """Write ``results/beside.{csv,md}``: `bandpo.analysis.leaderboard.beside_table` of the report folder ``results``
    against the report folder ``other`` (e.g. the verl profile beside the published local-trainer page)."""
    results = Path(results)
    table = beside_table(results, other, metric)
    csv_path, md_path = results / "beside.csv", results / "beside.md"
    write_csv(table, csv_path)
    atomic_write_text(md_path, beside_markdown(table, *table.attrs["profiles"], metric))
    return [csv_path, md_path]
