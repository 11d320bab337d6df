"""Minimal run outputs rebuilt from the published tables (results/scores.csv, runs.csv, leaderboard.csv), so that the
report can be run again on the inputs behind the published leaderboard without the raw runs (which are not
committed).

What the leaderboard reads from the run outputs is all in those tables: every per-seed lm-eval score with its
stderr and sample count (scores.csv, read from lm-eval's results files), and per training run its step count,
final entropy and reward (means over the last 10% of steps), clip fraction (mean over steps) and training time
(runs.csv). Each run is rebuilt with those values at every step, which gives the same per-run statistics; the
method label is the published leaderboard's params column (what the trainer writes into run.json as
``method_label``). The run contract's other required keys and files (accuracy, response length, the clip-fraction
split, step time, ``model/config.json``, versions), which the leaderboard does not read, are written as zeros or
empty so that the rebuilt runs load. The tables hold 6 significant digits, so statistics recomputed from them can
differ from the published ones in the 6th digit; the Markdown table (1 decimal in percent) does not.

The published pages are rebuilt with a newer report (new statistics, no new runs) by::

    python tests/published_runs.py --out /tmp/rebuilt    # the report's tables and pages, to compare

which writes the report's tables and pages from the rebuilt run outputs, the HTML page embedding the published
figures (the rebuilt runs have no per-step curves, so their figures, and their steps.csv, are not the published
run's and are not to be copied). A new rule (not new data) is written into a published folder by::

    python tests/published_runs.py --published results --out /tmp/work --rerender    # rerender_published

which replaces only what the report derives from the tables by its rule (`RERENDERED_FILES`). The runs rebuilt from a
folder with steps.csv carry its per-step rows, so the report's figures drawn from them are the published runs' (up to
steps.csv's 5 digits); a new drawing of the figures (not new data) is written into a published folder by::

    python tests/published_runs.py --published results/real-lm --out /tmp/work --figures    # redraw_figures

which replaces figures/<name>.png and figures/<name>.csv of every figure of `bandpo.report.figures.FIGURES`, and
prints, per figure whose data the folder published, whether the redrawn data is the published one.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bandpo.analysis.steps import OFFPOLICY, read_steps, update_keys
from bandpo.core.files import write_csv
from bandpo.decide.selection import select_setting
from bandpo.score.lm_eval_results import FILTER_NAME
from bandpo.study import BASE_ENTRY, MAIN, report_experiments, run_folder, slot_id


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")


def published_config(published: Path) -> dict:
    """The resolved config the published results were built with (provenance.json's ``config``); {} without one."""
    path = published / "provenance.json"
    return json.loads(path.read_text(encoding="utf-8")).get("config") or {} if path.is_file() else {}


def published_experiments(published: Path) -> dict | None:
    """The experiments the published page was built with, as the report rule passes them: the run plan's
    `bandpo.study.report_experiments` of the resolved config in provenance.json (its margins, in the config's
    points, converted there as for a run); None when it has none."""
    config = published_config(published)
    return report_experiments(config) if config.get("experiments") else None


def published_axes(published: Path) -> dict | None:
    """The design axes of the published config whose cells all ran (as the report rule passes them), or None."""
    config = published_config(published)
    xps, axes = config.get("experiments") or {}, config.get("axes") or {}
    return {a: v for a, v in axes.items() if all(c in xps for c in v["cells"])} or None


def rebuild_run_outputs(published: Path, dest: Path, with_labels: bool = True) -> Path:
    """Write ``dest/{profile}/eval/...`` and ``dest/{profile}/runs/...`` from the tables under ``published``;
    returns the profile's results folder, with ``atlas.csv`` when the published page shows the atlas.
    ``with_labels=False`` leaves ``method_label`` out of run.json (runs
    written before the trainer recorded it)."""
    scores = pd.read_csv(published / "scores.csv", keep_default_na=False, na_values=[""])
    runs = pd.read_csv(published / "runs.csv", keep_default_na=False, na_values=[""])
    board = pd.read_csv(published / "leaderboard.csv", keep_default_na=False, na_values=[""])
    (profile,) = set(scores["profile"])
    root = dest / profile
    for frame in (scores, runs, board):  # tables published before experiments existed hold main's rows only
        if "experiment" not in frame:
            frame["experiment"] = MAIN
        frame["experiment"] = frame["experiment"].fillna(MAIN)
    # the tables hold a reusing cell's copies of main's rows (bandpo.analysis.axis.with_reuse); the report makes them
    # again from main's runs, so they are not rebuilt as runs of their own
    experiments = published_experiments(published) or {}
    copies = {(x, e) for x, v in experiments.items() for e in v.get("reuse") or []}
    scores, runs = (f[[(x, e) not in copies for x, e in zip(f["experiment"], f["entry"], strict=True)]]
                    for f in (scores, runs))  # fmt: skip
    per_step = _steps_by_run(published / "steps.csv")
    reused_by = {e: x for x, v in experiments.items() for e in v.get("reuse") or []}
    labels = {(r.experiment, r.model, r.entry): r.params for r in board.itertuples()}
    for (experiment, model, entry, seed), g in scores.groupby(["experiment", "model", "entry", "seed"], sort=True):
        folder = root / "eval" / run_folder(model, slot_id(experiment, entry), seed)
        first = g.iloc[0]
        params = json.loads(first["params"]) if isinstance(first["params"], str) and first["params"] else None
        method = None if first["method"] == BASE_ENTRY else first["method"]
        results = {"results": {}, "configs": {}, "n-samples": {}}
        for task, t in g.groupby("task", sort=True):
            res = {"alias": task}
            for r in t.itertuples():
                res[f"{r.name},{FILTER_NAME}"] = float(r.value)
                res[f"{r.name}_stderr,{FILTER_NAME}"] = float(r.stderr) if pd.notna(r.stderr) else "N/A"
            results["results"][task] = res
            results["configs"][task] = {"repeats": int(t["n"].iloc[0])}
            summary = {
                "schema": "bandpo-bench/eval-summary/v1",
                "profile": profile,
                "model": model,
                "entry": entry,
                "seed": int(seed),
                "method": method,
                "params": params,
                "task": task,
                "k": int(t["n"].iloc[0]),
                "lm_eval": {"results_file": "lm_eval_results.json", "filter": FILTER_NAME},
                "experiment": experiment,
            }
            subset = t["subset"].iloc[0] if "subset" in t else None
            if isinstance(subset, str) and subset:
                summary["subsets"] = {task: subset}
            grader = t["grader"].iloc[0] if "grader" in t else None
            if isinstance(grader, str) and grader:
                summary["grader"] = {"id": grader}
            _write_json(folder / f"{task}.json", summary)
        _write_json(folder / "lm_eval_results.json", results)
    for r in runs.itertuples():
        folder = root / "runs" / run_folder(r.model, slot_id(r.experiment, r.entry), r.seed)
        folder.mkdir(parents=True, exist_ok=True)
        steps = int(r.steps)
        unread = dict.fromkeys(("response_length", "clipfrac", "clipfrac_upper", "clipfrac_lower"), 0.0)
        accuracy = getattr(r, "accuracy_final", float("nan"))  # runs.csv before it held the accuracy: 0
        # a main run that a cell reuses: its copy under the cell also holds the all-updates statistics (all/<key>)
        cell = reused_by.get(r.entry) if r.experiment == MAIN else None
        logged = per_step.get((cell, r.model, r.entry, int(r.seed))) or per_step.get(
            (r.experiment, r.model, r.entry, int(r.seed))
        )
        if logged is not None:  # the run's own per-step metrics, as steps.csv keeps them
            zeros = {**unread, **dict.fromkeys(update_keys(), 0.0)}  # keys an off-policy run keeps as offpolicy/<key>
            rows = [{**zeros, **m, "step_seconds": float(r.train_seconds) / steps} for m in logged]
        else:  # published before steps.csv: the run's summary statistics at every step
            rows = [
                {"step": s, "entropy": r.entropy_final, "reward_mean": r.reward_final, "offpolicy/clipfrac": r.clipfrac,
                 "accuracy": float(accuracy) if pd.notna(accuracy) else 0.0,
                 "step_seconds": float(r.train_seconds) / steps, **unread}
                for s in range(1, steps + 1)
            ]  # fmt: skip
            first = getattr(r, "entropy_first", float("nan"))  # runs.csv before it held step 1's entropy: none
            if pd.notna(first) and steps > 1:  # step 1's entropy; the final 10% window keeps entropy_final
                rows[0]["entropy"] = float(first)
        _write_json(folder / "model" / "config.json", {})
        (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in rows), encoding="utf-8")
        params = json.loads(r.params)
        info = {
            "config": {"method": r.method, "params": params, "seed": int(r.seed), "steps": steps},
            "method_params": params,
            "steps": steps,
            "train_seconds_total": float(r.train_seconds),
            "versions": {},
        }
        if with_labels:
            info["method_label"] = labels[(r.experiment, r.model, r.entry)]
        _write_json(folder / "run.json", info)
    # the equivalence atlas is an input of the page built after it existed (its section shows it): published
    # results/atlas.csv beside a page built before the atlas (no section) was not part of that build
    atlas = published / "atlas.csv"
    page = published / "leaderboard.md"
    if atlas.is_file() and page.is_file() and "## Equivalence atlas" in page.read_text(encoding="utf-8"):
        shutil.copyfile(atlas, root / "atlas.csv")
    # the selection table an experiment's select job wrote (the page shows it), made again from the scores
    # (with the published config's full experiments: a compared-arms rule reads each cell's methods)
    axes, full = published_axes(published) or {}, published_config(published).get("experiments") or {}
    for x, v in experiments.items():
        if v.get("select") and v["select"]["axis"] in axes:
            _setting, table = select_setting(scores, full, axes, x)
            (root / "select").mkdir(parents=True, exist_ok=True)
            write_csv(table, root / "select" / f"{x}.csv")
    return root


def _steps_by_run(path: Path) -> dict[tuple[str, str, str, int], list[dict]]:
    """steps.csv's rows per run (experiment, model, entry, seed), each a metrics.jsonl row (empty cells left out);
    {} without the file."""
    if not path.is_file():
        return {}
    frame = read_steps(path).drop(columns=["profile"])
    out = {}
    for (x, m, e, seed), g in frame.groupby(["experiment", "model", "entry", "seed"], sort=False):
        metrics = g.drop(columns=["experiment", "model", "entry", "seed", OFFPOLICY])
        out[(x, m, e, int(seed))] = [{k: (int(v) if k == "step" else float(v)) for k, v in row.items() if pd.notna(v)}
                                     for row in metrics.to_dict("records")]  # fmt: skip
    return out


NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
MAX_LAST_DIGIT_TIES = 5  # printed values that may sit on a rounding tie of the 6-digit tables


def page_differences(ours: str, theirs: str) -> list[str]:
    """Where a page rebuilt from the published tables differs from the published page, beyond what the tables'
    6 significant digits allow: the text between numbers must be identical, and a number may differ from the
    published one only by one unit in its last printed decimal (a statistic that sits on a rounding tie, e.g. an
    interval end of 0.17350, computed once from full-precision runs and once from their 6-digit copies), at most
    `MAX_LAST_DIGIT_TIES` times. Returns the differences found ([] when the pages agree)."""
    out, ties = [], 0
    a_lines, b_lines = ours.splitlines(), theirs.splitlines()
    if len(a_lines) != len(b_lines):
        return [f"{len(a_lines)} lines against {len(b_lines)}"]
    for i, (a, b) in enumerate(zip(a_lines, b_lines, strict=True), 1):
        if a == b:
            continue
        if NUMBER.split(a) != NUMBER.split(b) or len(NUMBER.findall(a)) != len(NUMBER.findall(b)):
            out.append(f"line {i}: {a!r} against {b!r}")
            continue
        for x, y in zip(NUMBER.findall(a), NUMBER.findall(b), strict=True):
            if x == y:
                continue
            decimals = len(x.partition(".")[2])
            if decimals != len(y.partition(".")[2]) or abs(float(x) - float(y)) > 1.01 * 10.0**-decimals:
                out.append(f"line {i}: {x} against {y}")
            else:
                ties += 1
    if ties > MAX_LAST_DIGIT_TIES:
        out.append(f"{ties} numbers differ in their last digit (at most {MAX_LAST_DIGIT_TIES} ties expected)")
    return out


# What a rebuild from the published tables may replace in results/ (figures and steps.csv need the real runs)
REBUILT_FILES = ("leaderboard.csv", "leaderboard.md", "leaderboard.html", "stats.csv", "primary.csv", "runs.csv",
                 "scores.csv")  # fmt: skip


def rebuild_published(published: Path, out: Path, work: Path, own_figures: bool = False) -> list[Path]:
    """The report of today's code on the inputs behind the published tables: run outputs rebuilt under ``work``
    (`rebuild_run_outputs`), the report built into ``out`` with the published experiments (`published_experiments`)
    and the published figures embedded in the page (``own_figures``: the figures drawn into ``out``). Returns the
    paths of `REBUILT_FILES` under ``out``."""
    from bandpo.methods import bounds_table
    from bandpo.report import build_report

    results = rebuild_run_outputs(published, work)
    bounds_table.main(["--out", str(results / "bounds.csv")])
    base_per_seed = published_config(published).get("base_per_seed")
    build_report(results, out, experiments=published_experiments(published), axes=published_axes(published),
                 page_figures=None if own_figures else published / "figures", base_per_seed=base_per_seed)  # fmt: skip
    return [out / name for name in REBUILT_FILES]


# The columns of leaderboard.csv that the verdict rule writes (bandpo.analysis.family.family_verdicts), per
# headline metric label L: L_<suffix>; those of the rule before issue #55 (four verdicts), which a re-rendering drops
RULE_SUFFIXES = ("p_better", "p_not_better", "p_better_holm", "p_not_better_holm", "margin", "verdict",
                 "verdict_holm", "label", "n_needed", "role")  # fmt: skip
RETIRED_SUFFIXES = ("p", "p_equivalence", "p_holm", "p_equivalence_holm")
# What a re-rendering writes into the published folder: the files the report derives from the tables by its rule
RERENDERED_FILES = ("leaderboard.md", "leaderboard.html", "primary.csv", "leaderboard.csv")


def _rule_columns(board: pd.DataFrame) -> list[str]:
    labels = {c.removesuffix("_diff_sd") for c in board.columns if c.endswith("_diff_sd")}
    return [c for c in board.columns if any(c == f"{lab}_{x}" for lab in labels
                                            for x in (*RULE_SUFFIXES, *RETIRED_SUFFIXES))]  # fmt: skip


def _same_numbers(a: str, b: str) -> bool:
    """Whether two lines with the same text between their numbers hold the same numbers up to what the tables' 6
    significant digits move: relatively 1e-5, or one unit in the last printed decimal (a rounding tie)."""
    for x, y in zip(NUMBER.findall(a), NUMBER.findall(b), strict=True):
        fx, fy = float(x), float(y)
        unit = 10.0 ** -min(len(x.partition(".")[2]), len(y.partition(".")[2]))
        if abs(fx - fy) > max(1e-5 * max(abs(fx), abs(fy)), 1.01 * unit):
            return False
    return True


CELL = re.compile(r"(\|| <td| data-v=)")  # where a table row of the Markdown or HTML page splits into its cells


def _merge_line(ours: str, theirs: str) -> str:
    """One rebuilt line against the published one it stands for: the published line when only the tables' 6 digits
    tell them apart (`_same_numbers`), else cell by cell (a table row whose verdict cell the rule changed keeps its
    other cells as published), else the rebuilt line."""
    if NUMBER.sub("#", ours) == NUMBER.sub("#", theirs):
        return theirs if _same_numbers(ours, theirs) else ours
    a, b = CELL.split(ours), CELL.split(theirs)
    if len(a) != len(b) or len(a) == 1:
        return ours
    return "".join(y if NUMBER.sub("#", x) == NUMBER.sub("#", y) and _same_numbers(x, y) else x
                   for x, y in zip(a, b, strict=True))  # fmt: skip


def keep_published_lines(rebuilt: str, published: str) -> str:
    """The rebuilt page with everything the rule did not change put back as published: lines aligned by their text
    between numbers (difflib), and each rebuilt line (or, in a table row the rule changed, each cell) that matches
    the published one in that text and in its numbers up to the tables' 6 digits replaced by the published one,
    whose numbers come from the full-precision runs (so a rounding tie prints as published, and the HTML's sort
    values keep their digits)."""
    import difflib

    ours, theirs = rebuilt.splitlines(keepends=True), published.splitlines(keepends=True)
    skeleton = [[NUMBER.sub("#", line) for line in lines] for lines in (ours, theirs)]
    out = list(ours)
    matcher = difflib.SequenceMatcher(None, skeleton[0], skeleton[1], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("equal", "replace") and i2 - i1 == j2 - j1:
            for k in range(i2 - i1):
                out[i1 + k] = _merge_line(ours[i1 + k], theirs[j1 + k])
    return "".join(out)


def rerender_published(published: Path, work: Path) -> list[Path]:
    """Re-render a published folder's derived files with today's rule, from its own tables (no new runs), and write
    `RERENDERED_FILES` into ``published``:

    * primary.csv and leaderboard.csv's rule columns (the family's p-values, verdicts, words and roles:
      `RULE_SUFFIXES`; the retired ones dropped) computed from the published scores.csv, runs.csv and
      leaderboard.csv themselves with the published config's experiments through the run plan
      (`published_experiments`); every other column of leaderboard.csv kept as published;
    * leaderboard.md and leaderboard.html from the report rebuilt on those tables (`rebuild_published`, in
      ``work``), every line the rule did not change kept as published (`keep_published_lines`), and the smoke
      section and the answer at the top (with the published parts' tiers) made again as `report publish` does.

    The data tables (scores.csv, runs.csv, steps.csv), stats.csv and provenance.json are left as they are. Returns
    the paths written."""
    from bandpo.analysis.family import family_verdicts
    from bandpo.core.files import atomic_write_text
    from bandpo.report import verdicts
    from bandpo.report.board import Board
    from bandpo.report.build import primary_tables
    from bandpo.report.smoke import SMOKE_PROFILES, write_section

    out = work / "out"
    rebuild_published(published, out, work / "_runs")
    board, specs = Board.read(published), published_experiments(published) or {}
    subsets = board.scores[["task", "subset"]].drop_duplicates()
    task_subsets = dict(zip(subsets["task"], subsets["subset"].fillna(""), strict=True))
    primary = primary_tables(board.scores, board.runs, specs, 0, 0.95, 0)
    old = board.leaderboard
    table, primary, _family = family_verdicts(old.drop(columns=_rule_columns(old)), specs, task_subsets, primary)
    written = [write_csv(table, published / "leaderboard.csv"), write_csv(primary, published / "primary.csv")]
    for name in ("leaderboard.md", "leaderboard.html"):
        page = keep_published_lines((out / name).read_text(encoding="utf-8"),
                                    (published / name).read_text(encoding="utf-8"))  # fmt: skip
        written.append(atomic_write_text(published / name, page))
    if any((published / profile).is_dir() for profile in SMOKE_PROFILES):
        write_section(published)  # the page's smoke section, from the smoke profiles' folders (not part of the rebuild)
    verdicts.write_section(published)  # the answer at the top, with the published parts' tiers, as `publish` does
    return written


def figure_data_differences(ours: Path, theirs: Path) -> list[str]:
    """Where the data a figure plotted (figures/<name>.csv) drawn again differs from the published one: columns,
    rows, text, or numbers beyond the tables' digits (relatively 1e-4: a statistic recomputed from 6-digit tables
    or 5-digit steps). [] when they agree."""
    a, b = (pd.read_csv(p, keep_default_na=False, na_values=[""]) for p in (ours, theirs))
    if list(a.columns) != list(b.columns) or a.shape != b.shape:
        return [f"columns/shape {list(a.columns)} {a.shape} against {list(b.columns)} {b.shape}"]
    numbers = [c for c in a.columns if pd.api.types.is_numeric_dtype(a[c]) and pd.api.types.is_numeric_dtype(b[c])]
    text = [c for c in a.columns if c not in numbers]
    out = [f"column {c}: text differs" for c in text if not a[c].astype(str).equals(b[c].astype(str))]
    for c in numbers:
        x, y = a[c].to_numpy(float), b[c].to_numpy(float)
        if not np.allclose(x, y, rtol=1e-4, atol=1e-8, equal_nan=True):
            out.append(f"column {c}: largest difference {np.nanmax(np.abs(x - y)):g}")
    return out


def redraw_figures(published: Path, work: Path) -> list[Path]:
    """Redraw every figure of a published folder with today's figures (no new runs) and write them into
    ``published/figures``: the report rebuilt on the folder's tables (`rebuild_published`, in ``work``; its runs
    carry steps.csv's per-step metrics, its board the published scores, its bounds table today's
    `bandpo.methods.bounds_table`), each figure of `FIGURES` copied as <name>.png and <name>.csv. Prints, per figure
    whose data the folder published, whether the redrawn data is the same (`figure_data_differences`). Returns the
    paths written."""
    from bandpo.report.figures import FIGURES

    if not (published / "steps.csv").is_file():
        raise FileNotFoundError(f"{published / 'steps.csv'} not found: the figures need the runs' per-step metrics")
    out = work / "out"
    rebuild_published(published, out, work / "_runs", own_figures=True)
    folder = published / "figures"
    folder.mkdir(exist_ok=True)
    written = []
    for name in FIGURES:
        ours, theirs = out / "figures" / f"{name}.csv", folder / f"{name}.csv"
        if theirs.is_file():
            differences = figure_data_differences(ours, theirs)
            print(f"{theirs}: {'; '.join(differences) if differences else 'same data as published'}")
        for suffix in (".png", ".csv"):
            written.append(Path(shutil.copyfile(out / "figures" / f"{name}{suffix}", folder / f"{name}{suffix}")))
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="rebuild the published report from the published tables")
    ap.add_argument("--published", default=str(Path(__file__).resolve().parents[1] / "results"))
    ap.add_argument("--out", required=True, help="where the rebuilt tables and pages go (--rerender: a work folder)")
    ap.add_argument("--rerender", action="store_true",
                    help="write the re-rendered files into the published folder (rerender_published)")  # fmt: skip
    ap.add_argument("--figures", action="store_true",
                    help="redraw the published figures from steps.csv and the tables (redraw_figures)")  # fmt: skip
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.figures:
        for path in redraw_figures(Path(args.published), out):
            print(path)
        return 0
    if args.rerender:
        for path in rerender_published(Path(args.published), out):
            print(path)
        return 0
    for path in rebuild_published(Path(args.published), out, out / "_runs"):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
