"""The board: one leaderboard and everything the report says about it, the one object every renderer takes.

`bandpo.report.build.build_report` makes it from a profile's runs and scores; `Board.read` reads it back from a
published results folder, which is what the doc blocks render (`docs.blocks`). The Markdown page
(`bandpo.report.markdown`), the HTML page (`bandpo.report.page`) and the doc blocks read its fields. The figures are
drawn from the runs' per-step metrics, which the board does not hold; it names the ones the pages show.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bandpo.analysis.load import load_atlas

# The board's frames and the files they are published as, in the order `build_report` writes them
TABLES = {"scores": "scores.csv", "stats": "stats.csv", "runs": "runs.csv", "leaderboard": "leaderboard.csv",
          "primary": "primary.csv", "axis_runs": "axis_runs.csv", "axis": "axis.csv", "dag": "dag_rules.csv",
          "beside": "beside.csv"}  # fmt: skip
ATLAS_TABLE = "atlas.csv"  # the equivalence atlas (bandpo.train.atlas, rule atlas): shown and published when present


@dataclass(frozen=True)
class Panel:
    """A section of the page beside the leaderboard tables: a heading, sentences, and a table whose cells are
    text already (e.g. the off-policy axis's rules, `bandpo.report.axis.axis_panels`)."""

    heading: str
    lines: tuple[str, ...] = ()
    table: pd.DataFrame | None = None


@dataclass(frozen=True, eq=False)
class Board:
    """One leaderboard with its tables, the config that shaped them and the text the pages print about them.

    The published tables (each None when absent): ``leaderboard`` (leaderboard.csv: one row per (experiment, subset,
    model, entry)), ``stats``, ``scores``, ``runs``, ``primary`` (each experiment's primary comparison), ``axis``
    and ``axis_runs`` (the design axes' rules, and per run), ``dag`` (dag_rules.csv: a DAG run's per-rule cost),
    ``beside`` (one profile's runs beside another's) and ``atlas`` (the equivalence atlas). The config:
    ``experiments``, ``axes``, ``base_per_seed`` (None: unknown). What the pages add: ``per_task`` (the per-task
    frame), ``notes`` ((experiment, text) per experiment), ``power`` (`bandpo.analysis.scores.power_table`),
    ``panels`` (`Panel`), ``figures`` (name -> PNG file, in the order shown), ``captions`` and ``title``. A board
    read back from a folder (`read`) keeps ``folder`` and ``provenance`` (provenance.json)."""

    leaderboard: pd.DataFrame
    stats: pd.DataFrame | None = None
    scores: pd.DataFrame | None = None
    runs: pd.DataFrame | None = None
    primary: pd.DataFrame | None = None
    axis: pd.DataFrame | None = None
    axis_runs: pd.DataFrame | None = None
    dag: pd.DataFrame | None = None
    beside: pd.DataFrame | None = None
    atlas: pd.DataFrame | None = None
    experiments: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    axes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    base_per_seed: bool | None = None
    per_task: pd.DataFrame | None = None
    notes: tuple[tuple[str, str], ...] = ()
    power: pd.DataFrame | None = None
    panels: tuple[Panel, ...] = ()
    figures: Mapping[str, Path] = field(default_factory=dict)
    captions: Mapping[str, str] = field(default_factory=dict)
    title: str | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict)
    folder: Path | None = None
    _parts: dict[str, Board] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def read(cls, folder: str | os.PathLike = "results") -> Board:
        """The board of a published results folder: every table of `TABLES` it holds (leaderboard.csv at least),
        atlas.csv, and provenance.json with the config it records."""
        folder = Path(folder)
        if not (folder / TABLES["leaderboard"]).is_file():
            raise FileNotFoundError(f"{folder / TABLES['leaderboard']} not found (not a published results folder)")
        tables = {name: read_table(folder / file) for name, file in TABLES.items() if (folder / file).is_file()}
        path = folder / "provenance.json"
        provenance = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        config = provenance.get("config") or {}
        return cls(**tables, atlas=load_atlas(folder / ATLAS_TABLE), experiments=config.get("experiments") or {},
                   axes=config.get("axes") or {}, base_per_seed=config.get("base_per_seed"), provenance=provenance,
                   folder=folder)  # fmt: skip

    def part(self, name: str) -> Board:
        """The board of a settled experiment published from a config of its own (``publish_dir``: results/offpolicy,
        results/probe) or of another profile (results/verl-cpu), under this board's folder; read once."""
        if name not in self._parts:
            if self.folder is None or not (self.folder / name).is_dir():
                raise FileNotFoundError(f"no published folder {name!r} under {self.folder} (its config publishes it)")
            self._parts[name] = Board.read(self.folder / name)
        return self._parts[name]

    def row(self, experiment: str, model: str, entry: str, subset: str = "") -> pd.Series:
        """The leaderboard's one row of (experiment, subset, model, entry); KeyError when there is not exactly one."""
        b = self.leaderboard
        sel = b[(b.experiment == experiment) & (b.subset == subset) & (b.model == model) & (b.entry == entry)]
        if len(sel) != 1:
            raise KeyError(f"leaderboard.csv has {len(sel)} rows for {(experiment, subset, model, entry)}")
        return sel.iloc[0]

    def tables(self) -> list[tuple[str, pd.DataFrame]]:
        """(file name, frame) of every published table the board holds, in the order of `TABLES`."""
        return [(file, getattr(self, name)) for name, file in TABLES.items() if getattr(self, name) is not None]


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """A published csv as written (`bandpo.core.files.write_csv`): only empty cells are missing values, and the
    ``experiment`` and ``subset`` of a row that has none are "" (main's rows, a task scoring the whole data)."""
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    for col in ("experiment", "subset"):
        if col in frame:
            frame[col] = frame[col].astype(object).fillna("")
    return frame
