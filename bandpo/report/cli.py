"""The report stage as a whole: `build_report` (a profile's results -> tables, page, figures), `publish` (copy them
to the top-level ``results/`` with provenance) and the command line::

    python -m bandpo.report build --results results/embedded [--out results/embedded] [--baseline grpo]
                                  [--bounds results/embedded/bounds.csv]
    python -m bandpo.report publish --src results/embedded --dest results [--config-json '{...}']
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from bandpo.files import atomic_write_bytes, atomic_write_text
from bandpo.report.figures import (
    FIGURE_CAPTIONS,
    FIGURES,
    bounds_figure,
    clipfrac_figure,
    final_scores_figure,
    save_figure,
    training_curves_figure,
)
from bandpo.report.load import BOUNDS_COLUMNS, load_bounds, load_eval_scores, load_runs, run_metrics, run_summaries
from bandpo.report.page import leaderboard_html
from bandpo.report.stats import DEFAULT_BASELINE, run_stats, score_stats
from bandpo.report.tables import (
    entry_graders,
    entry_labels,
    leaderboard,
    leaderboard_markdown,
    per_task_table,
    write_csv,
)

LEADERBOARD_FILES = ("leaderboard.csv", "leaderboard.md", "leaderboard.html")
PUBLISHED_TABLES = ("stats.csv", "scores.csv", "runs.csv")  # published with the leaderboard when present


def build_report(
    results_dir: str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    baseline: str | None = DEFAULT_BASELINE,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    bounds: str | os.PathLike | None = None,
    embed_figures: bool = True,
) -> dict[str, Path]:
    """Load everything under ``results_dir`` (= ``results/{profile}``), compute the statistics, write the tables
    and figures into ``out_dir`` (default: ``results_dir``). ``bounds`` is the bounds table of the bound figure
    (default ``results_dir/bounds.csv``; without it the figure is a placeholder). Returns {name: path} of what
    was written."""
    results_dir = Path(results_dir)
    out = Path(out_dir) if out_dir is not None else results_dir
    if not results_dir.is_dir():
        raise FileNotFoundError(f"results folder not found: {results_dir}")
    bounds = Path(bounds) if bounds is not None else results_dir / "bounds.csv"
    if not bounds.is_file() and bounds != results_dir / "bounds.csv":
        raise FileNotFoundError(f"bounds table not found: {bounds}")
    runs = load_runs(results_dir)
    scores = load_eval_scores(results_dir)
    metrics = run_metrics(runs, results_dir.name)
    summaries = run_summaries(runs, results_dir.name)
    stats = score_stats(scores, baseline, n_resamples, confidence, seed)
    per_run, per_entry = run_stats(metrics, summaries, n_resamples, confidence, seed)
    board = leaderboard(stats, per_entry, per_run, entry_labels(summaries), entry_graders(scores))
    if board.empty:
        raise ValueError(
            f"nothing to report under {results_dir}: no runs/*/*/seed*/metrics.jsonl and no "
            "eval/*/*/seed*/*.json evaluation summaries"
        )

    written: dict[str, Path] = {}
    fig_dir = out / "figures"
    bounds_table = load_bounds(bounds) if bounds.is_file() else pd.DataFrame(columns=BOUNDS_COLUMNS)
    built = {
        "bounds": bounds_figure(bounds_table),
        "training_curves": training_curves_figure(metrics, baseline=baseline, seed=seed),
        "clipfrac_buckets": clipfrac_figure(metrics, baseline=baseline, seed=seed),
        "final_scores": final_scores_figure(stats, baseline=baseline),
    }
    for name, (fig, df) in built.items():
        written[f"figures/{name}.png"] = save_figure(fig, fig_dir / f"{name}.png")
        write_csv(df, fig_dir / f"{name}.csv")
        written[f"figures/{name}.csv"] = fig_dir / f"{name}.csv"
    for name, df in (("scores.csv", scores), ("stats.csv", stats), ("runs.csv", per_run), ("leaderboard.csv", board)):
        write_csv(df, out / name)
        written[name] = out / name
    tasks = per_task_table(stats, board)
    atomic_write_text(out / "leaderboard.md", leaderboard_markdown(board, figures=FIGURES, per_task=tasks))
    written["leaderboard.md"] = out / "leaderboard.md"
    figs = {name: fig_dir / f"{name}.png" for name in FIGURES} if embed_figures else None
    delta = float(bounds_table["delta"].iloc[0]) if not bounds_table.empty else float("nan")
    captions = {name: text.format(delta=delta) for name, text in FIGURE_CAPTIONS.items()}
    atomic_write_text(out / "leaderboard.html", leaderboard_html(board, figs, captions, per_task=tasks))
    written["leaderboard.html"] = out / "leaderboard.html"
    return written


PROVENANCE_PACKAGES = ("torch", "transformers", "lm_eval", "math-verify", "verl", "snakemake", "pandas", "scipy",
                       "seaborn", "datasets")  # fmt: skip


def provenance(config: Mapping | None = None) -> dict:
    """Where published numbers come from: git commit (and whether the tree had uncommitted changes), Python and
    package versions, the machine (`bandpo.provenance.machine`), and the resolved run config when given."""
    import subprocess

    from bandpo.provenance import machine, versions

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30, check=True,
                                  cwd=Path(__file__).resolve().parent)  # the suite's checkout  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip()

    packages = versions(*PROVENANCE_PACKAGES)
    python = packages.pop("python")
    host = machine()
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "python": python,
        "platform": host["platform"],
        "cpu_count": host["cpu_count"],
        "machine": host,
        "packages": packages,
        "config": dict(config) if config is not None else None,
    }


def publish(src: str | os.PathLike, dest: str | os.PathLike = "results", config: Mapping | None = None) -> list[Path]:
    """Copy a profile's leaderboard (``src/leaderboard.{csv,md,html}``), tables (``stats.csv``, ``scores.csv``,
    ``runs.csv``) and figures (``src/figures/*.png``) to ``dest`` (same names), each file atomically, and write
    ``dest/provenance.json`` (`provenance`: git commit, package versions, the run config). Returns the written
    paths."""
    src, dest = Path(src), Path(dest)
    missing = [n for n in LEADERBOARD_FILES if not (src / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{src}: missing {', '.join(missing)} (run `python -m bandpo.report build` first)")
    written = []
    pairs = [(src / n, dest / n) for n in LEADERBOARD_FILES]
    pairs += [(src / n, dest / n) for n in PUBLISHED_TABLES if (src / n).is_file()]
    pairs += [(p, dest / "figures" / p.name) for p in sorted((src / "figures").glob("*.png"))]
    for s, d in pairs:
        if s.resolve() == d.resolve():
            continue
        atomic_write_bytes(d, s.read_bytes())
        written.append(d)
    atomic_write_text(dest / "provenance.json", json.dumps(provenance(config), indent=2, default=str) + "\n")
    written.append(dest / "provenance.json")
    return written


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
    p = sub.add_parser("publish", help="copy a profile's leaderboard and figures to the top-level results/")
    p.add_argument("--src", required=True, help="the profile's report folder, e.g. results/embedded")
    p.add_argument("--dest", default="results")
    p.add_argument("--config-json", default=None, help="the resolved run config (JSON) to record in provenance.json")
    args = ap.parse_args(argv)
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
            )
            print(json.dumps({k: str(v) for k, v in written.items()}, indent=1))
        else:
            config = json.loads(args.config_json) if args.config_json else None
            for path in publish(args.src, args.dest, config):
                print(path)
    except (FileNotFoundError, ValueError) as e:
        print(f"python -m bandpo.report: error: {e}", file=sys.stderr)
        return 2
    return 0
