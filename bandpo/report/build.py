"""`build_report`: one profile's results (``results/{profile}``: runs/ and eval/) turned into its board
(`bandpo.report.board.Board`: the statistics of `bandpo.analysis`), written as the published tables, the figures
and the two pages (``python -m bandpo.report build``)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from bandpo.analysis.axis import RESULT_COLUMNS, UPDATE_MEANS, axis_cells, axis_results, run_outcomes, with_reuse
from bandpo.analysis.experiments import (
    build_sections,
    collapse_factors,
    entropy_shift_results,
    of_experiment,
    primary_results,
    run_pair_results,
)
from bandpo.analysis.family import family_verdicts
from bandpo.analysis.leaderboard import per_task_table
from bandpo.analysis.load import (
    BOUNDS_COLUMNS,
    load_atlas,
    load_bounds,
    load_eval_scores,
    load_runs,
    run_metrics,
    run_summaries,
)
from bandpo.analysis.scores import DEFAULT_BASELINE, power_table
from bandpo.analysis.steps import write_steps
from bandpo.core.files import atomic_write_text, write_csv
from bandpo.report.axis import axis_panels
from bandpo.report.board import ATLAS_TABLE, Board
from bandpo.report.columns import with_seeds
from bandpo.report.figures import (
    EXPERIMENT_FIGURES,
    FIGURE_CAPTIONS,
    FIGURES,
    FOREST,
    PROBE,
    PROBE_CURVES,
    RANDOM_REWARD,
    TRAINING_CURVES,
    UPDATES_AXIS,
    UPDATES_KEY,
    axis_dose_figure,
    axis_entropy_figure,
    bound_keys,
    bounds_figure,
    check_views,
    clipfrac_figure,
    final_scores_figure,
    save_figure,
    training_curves_figure,
    with_validation_before,
)
from bandpo.report.forest import forest_figure
from bandpo.report.markdown import leaderboard_markdown
from bandpo.report.notes import experiment_notes
from bandpo.report.page import leaderboard_html
from bandpo.study import MAIN


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What a build reads of a profile's results: the scores, the runs' per-step metrics and one summary per run,
    each with the rows main's runs lend the experiments that reuse them (`bandpo.analysis.axis.with_reuse`)."""

    scores: pd.DataFrame
    metrics: pd.DataFrame
    summaries: pd.DataFrame


def build_report(
    results_dir: str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    baseline: str | None = DEFAULT_BASELINE,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    bounds: str | os.PathLike | None = None,
    embed_figures: bool = True,
    experiments: Mapping[str, Mapping] | None = None,
    axes: Mapping[str, Mapping] | None = None,
    page_figures: str | os.PathLike | None = None,
    base_per_seed: bool | None = None,
) -> dict[str, Path]:
    """Load everything under ``results_dir`` (= ``results/{profile}``), compute the statistics, write the tables
    and figures into ``out_dir`` (default: ``results_dir``). ``bounds`` is the bounds table of the bound figure
    (default ``results_dir/bounds.csv``; without it the figure is a placeholder). ``experiments``: the run plan's
    experiments (`bandpo.study.report_experiments`: {id: {description, primary, margins, ...}}, the margins as
    fractions of the score) whose notes and comparisons with the control (primary.csv, the families) the page shows;
    the sections themselves come from the files (`bandpo.analysis.experiments`); an experiment's ``reuse`` entries
    are main's runs, copied into it (`bandpo.analysis.axis.with_reuse`). ``axes``: the config's design axes, whose
    rules are written to axis.csv (per run: axis_runs.csv). ``page_figures``: the folder whose PNGs the HTML page
    embeds (default: the figures written here; a rebuild from the published tables, whose runs hold no per-step
    curves, embeds the published ones). ``base_per_seed``: the config's key (None: unknown), for the sentence on
    base models of the page. ``results_dir/atlas.csv`` (the equivalence atlas, `bandpo.train.atlas`), when present,
    becomes a section of the page and the Markdown. Returns {name: path} of what was written."""
    results_dir = Path(results_dir)
    out = Path(out_dir) if out_dir is not None else results_dir
    if not results_dir.is_dir():
        raise FileNotFoundError(f"results folder not found: {results_dir}")
    bounds = Path(bounds) if bounds is not None else results_dir / "bounds.csv"
    if not bounds.is_file() and bounds != results_dir / "bounds.csv":
        raise FileNotFoundError(f"bounds table not found: {bounds}")
    specs = dict(experiments or {})
    inputs = read_inputs(results_dir, specs)
    board = make_board(results_dir, inputs, specs, axes or {}, baseline, n_resamples, confidence, seed,
                       base_per_seed)  # fmt: skip
    bounds_table = load_bounds(bounds) if bounds.is_file() else pd.DataFrame(columns=BOUNDS_COLUMNS)
    views = figure_experiments(inputs.metrics, board)
    written = write_figures(out / "figures", draw_figures(inputs.metrics, board, bounds_table, baseline, seed, views))
    for name, frame in board.tables():
        written[name] = write_csv(frame, out / name)
    # the per-step metrics behind runs.csv, the figures and (all/<key> of the axes' runs) axis_runs.csv
    cells = [c for axis in board.axes.values() for c in axis["cells"]]
    written["steps.csv"] = write_steps(inputs.metrics, out / "steps.csv", UPDATE_MEANS, cells)
    present = set(board.leaderboard["experiment"])
    shown = [n for n in FIGURES if n not in EXPERIMENT_FIGURES or set(views[n]) & present]
    shown = [name for name in shown if name != FOREST or MAIN in present]  # no main rows: no forest at the top
    page_dir = Path(page_figures) if page_figures is not None else out / "figures"
    delta = float(bounds_table["delta"].iloc[0]) if not bounds_table.empty else float("nan")
    board = dataclasses.replace(
        board,
        figures={name: page_dir / f"{name}.png" for name in shown},
        captions={name: text.format(delta=delta) for name, text in FIGURE_CAPTIONS.items()},
    )
    written["leaderboard.md"] = atomic_write_text(out / "leaderboard.md", leaderboard_markdown(board))
    written["leaderboard.html"] = atomic_write_text(out / "leaderboard.html", leaderboard_html(board, embed_figures))
    return written


def read_inputs(results_dir: Path, specs: Mapping[str, Mapping[str, Any]]) -> Inputs:
    """The scores (`load_eval_scores`) and runs (`load_runs`) under ``results_dir``, main's reused rows added."""
    runs = load_runs(results_dir)
    return Inputs(
        scores=with_reuse(load_eval_scores(results_dir), specs),
        metrics=with_reuse(run_metrics(runs, results_dir.name), specs),
        summaries=with_reuse(run_summaries(runs, results_dir.name), specs),
    )


def make_board(
    results_dir: Path,
    inputs: Inputs,
    specs: Mapping[str, Mapping[str, Any]],
    axes: Mapping[str, Mapping[str, Any]],
    baseline: str | None,
    n_resamples: int,
    confidence: float,
    seed: int,
    base_per_seed: bool | None,
) -> Board:
    """The board of one profile (its figures not yet named): the leaderboard with each experiment's family of
    secondaries, the statistics, the primary comparisons, the design axes whose cells ran (with the selections
    their experiments made, ``results_dir/select/*.csv``), the notes, the power table and the atlas. ValueError
    when there is nothing to report."""
    scores = inputs.scores
    table, stats, per_run = build_sections(scores, inputs.metrics, inputs.summaries, baseline, n_resamples,
                                           confidence, seed)  # fmt: skip
    subsets = scores[["task", "subset"]].drop_duplicates() if {"task", "subset"} <= set(scores) else None
    task_subsets = {} if subsets is None else dict(zip(subsets["task"], subsets["subset"].fillna(""), strict=True))
    if table.empty:
        raise ValueError(
            f"nothing to report under {results_dir}: no runs/*/*/seed*/metrics.jsonl and no "
            "eval/*/*/seed*/*.json evaluation summaries"
        )
    primary = check_looks(
        results_dir, primary_tables(scores, per_run, specs, n_resamples, confidence, seed, inputs.metrics)
    )
    table, primary, family = family_verdicts(table, specs, task_subsets, primary)
    ran = {a: v for a, v in axes.items() if any(c in specs for c in v["cells"])}
    outcomes = run_outcomes(inputs.metrics, scores, ran, specs)
    axis_table = axis_results(outcomes, ran)
    selections = {p.stem: pd.read_csv(p) for p in sorted((results_dir / "select").glob("*.csv"))}
    rules = {x: v["select"] for x, v in specs.items() if v.get("select")}
    notes = experiment_notes(specs, primary, family, collapse_factors(per_run, specs))
    return Board(
        leaderboard=table,
        stats=stats,
        scores=scores,
        runs=per_run,
        primary=primary,
        axis=axis_table if ran else None,
        axis_runs=outcomes if ran else None,
        atlas=load_atlas(results_dir / ATLAS_TABLE),
        experiments=specs,
        axes=ran,
        base_per_seed=base_per_seed,
        per_task=per_task_table(of_experiment(stats, MAIN), of_experiment(table, MAIN)),
        notes=tuple(notes),
        power=power_table(stats),
        panels=tuple(axis_panels(axis_table, ran, selections, rules)),
    )


def primary_tables(
    scores: pd.DataFrame,
    per_run: pd.DataFrame,
    specs: Mapping[str, Mapping[str, Any]],
    n_resamples: int,
    confidence: float,
    seed: int,
    metrics: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """primary.csv: each experiment's primary comparison of scores, then the rules on training statistics (an
    experiment's final entropy against step 1, and entries' entropy and rare-token clip fractions against the
    control's, from the runs and their per-step ``metrics``: the secondaries whose Holm verdicts `family_verdicts`
    adds)."""
    primary = primary_results(scores, specs, seed)
    for extra in (entropy_shift_results(per_run, specs, n_resamples, confidence, seed),
                  run_pair_results(per_run, specs, confidence, seed, metrics)):  # fmt: skip
        if not extra.empty:
            primary = pd.concat([primary, extra], ignore_index=True) if not primary.empty else extra
    return primary


def check_looks(results_dir: Path, primary: pd.DataFrame) -> pd.DataFrame:
    """Each sequential primary's verdict against the last look the DAG wrote for it
    (``results_dir/looks/{experiment}/{model}/look{j}.json``, `bandpo.decide.looks`), when there is one: `decide`
    on the same pairs stops at the same look, so the two agree; where they do not (pairs scored after the look, a
    look file of another design), the row's ``note`` says so. Rows without a look file are left as they are."""
    if primary.empty:
        return primary
    primary = primary.copy()
    for i, r in primary[primary["rule"] == "sequential"].iterrows():
        folder = results_dir / "looks" / str(r["experiment"]) / str(r["model"])
        files = sorted(folder.glob("look*.json"), key=lambda p: int(p.stem.removeprefix("look") or 0))
        if not files:
            continue
        last = json.loads(files[-1].read_text(encoding="utf-8"))
        if (last.get("verdict"), last.get("n")) != (r["verdict"], r["n"]):
            note = (f"the DAG's {files[-1].name} says {last.get('verdict')!r} at n = {last.get('n')}; recomputed "
                    f"from the scores: {r['verdict']!r} at n = {r['n']}")  # fmt: skip
            before = r["note"] if isinstance(r["note"], str) else ""
            primary.loc[i, "note"] = "; ".join(x for x in (before, note) if x)
    return primary


def draw_figures(
    metrics: pd.DataFrame,
    board: Board,
    bounds_table: pd.DataFrame,
    baseline: str | None,
    seed: int,
    views: Mapping[str, list[str]],
) -> dict[str, tuple[Any, pd.DataFrame]]:
    """Every figure of `bandpo.report.figures.FIGURES` with the data it plotted: the forest plot of the board's
    leaderboard, the bounds of the rules it compares, main's training curves, clip fractions and final scores, the
    random-reward and probe experiments' curves, and the off-policy axis (``views``: each experiment figure's
    experiments, `figure_experiments`)."""
    main_metrics = of_experiment(metrics, MAIN)
    axis_id = next((a for a, v in board.axes.items() if v.get("key") == UPDATES_KEY), None)
    off = board.axes.get(axis_id) or {"cells": [], "label": "D", "key": ""}
    axis_table = board.axis if board.axis is not None else pd.DataFrame(columns=RESULT_COLUMNS)
    off_results = axis_table[axis_table["axis"] == axis_id] if not axis_table.empty else axis_table
    off_cells = axis_cells(off, board.experiments) if off["cells"] else []
    return {
        FOREST: forest_figure(with_seeds(board.leaderboard, board.scores)),  # in the tables' order
        "bounds": bounds_figure(bounds_table, bound_keys(board.leaderboard), baseline),
        "training_curves": training_curves_figure(
            with_validation_before(main_metrics), columns=TRAINING_CURVES, baseline=baseline, seed=seed
        ),
        "clipfrac_buckets": clipfrac_figure(main_metrics, baseline=baseline, seed=seed),
        "final_scores": final_scores_figure(of_experiment(board.stats, MAIN), baseline=baseline),
        "random_reward_entropy": training_curves_figure(
            of_experiments(metrics, views["random_reward_entropy"]), columns=("entropy",), baseline=baseline, seed=seed
        ),
        "probe_curves": training_curves_figure(
            of_experiments(metrics, views["probe_curves"]), columns=PROBE_CURVES, baseline=baseline, seed=seed
        ),
        "probe_clipfrac_buckets": clipfrac_figure(
            of_experiments(metrics, views["probe_clipfrac_buckets"]), baseline=baseline, seed=seed
        ),
        "offpolicy_dose": axis_dose_figure(off_results, off["label"], baseline=baseline),
        "offpolicy_entropy": axis_entropy_figure(metrics, off_cells, off["label"], baseline=baseline, seed=seed),
    }


def figure_experiments(metrics: pd.DataFrame, board: Board) -> dict[str, list[str]]:
    """The experiments each figure of one kind of experiment (`EXPERIMENT_FIGURES`) draws: those whose config names
    it in ``views`` (`bandpo.report.figures.check_views`), and those that name no views and are of its kind by what
    they declare or log (no experiment id): `RANDOM_REWARD` those whose ``train`` sets ``reward: random``, `PROBE`
    those whose runs logged `PROBE_CURVES`, `UPDATES_AXIS` the cells of the axes over `UPDATES_KEY`."""
    check_views(board.experiments)
    declared = {x: set(spec["views"]) for x, spec in board.experiments.items() if (spec or {}).get("views")}
    random = [x for x, spec in board.experiments.items() if ((spec or {}).get("train") or {}).get("reward") == "random"]
    logged = metrics.dropna(subset=[c for c in PROBE_CURVES if c in metrics], how="all") if set(PROBE_CURVES) & set(
        metrics) else metrics.iloc[:0]  # fmt: skip
    probe = sorted(set(logged["experiment"].fillna(MAIN))) if "experiment" in logged else [MAIN] * (len(logged) > 0)
    cells = [c for a in board.axes.values() if a.get("key") == UPDATES_KEY for c in a["cells"]]
    inferred = {RANDOM_REWARD: random, PROBE: probe, UPDATES_AXIS: cells}
    return {
        name: [x for x in inferred[kind] if x not in declared] + [x for x, v in declared.items() if name in v]
        for name, kind in EXPERIMENT_FIGURES.items()
    }


def of_experiments(frame: pd.DataFrame, experiments: list[str]) -> pd.DataFrame:
    """The rows of ``frame`` of any of ``experiments`` (`of_experiment` of each, in order)."""
    parts = [of_experiment(frame, x) for x in experiments]
    return pd.concat(parts) if parts else frame.iloc[:0]


def write_figures(folder: Path, figures: Mapping[str, tuple[Any, pd.DataFrame]]) -> dict[str, Path]:
    """Each figure as ``folder/{name}.png`` and the data it plotted as ``folder/{name}.csv``."""
    written = {}
    for name, (fig, data) in figures.items():
        written[f"figures/{name}.png"] = save_figure(fig, folder / f"{name}.png")
        written[f"figures/{name}.csv"] = write_csv(data, folder / f"{name}.csv")
    return written
