"""``python -m bandpo.report``: the report stage's command line, one subcommand each::

    python -m bandpo.report build --results results/embedded [--out results/embedded] [--baseline grpo]
                                  [--bounds results/embedded/bounds.csv]
    python -m bandpo.report publish --src results/embedded --dest results [--config-json '{...}']
                                    [--models resources/models/tiny-s/seed0 ...]
    python -m bandpo.report compare --published results/leaderboard.csv --rerun OTHER/leaderboard.csv
    python -m bandpo.report compare --exact --published results --rerun OTHER
    python -m bandpo.report beside --results results/verl-cpu --other results
    python -m bandpo.report smoke --dest results [--out SECTION.md --results results/real-lm-smoke ...]
    python -m bandpo.report metric-cost [--results results/real-lm]

``compare`` checks a rerun (another machine, thread count or BLAS path) against the published leaderboard: which
rows' means fall outside the published 95% intervals, and whether every paired difference from the baseline whose
interval excludes 0 keeps its sign (`bandpo.analysis.scores.rerun_agreement`). ``compare --exact`` checks that a
rerun under the fixed numerics (`bandpo.core.numerics`) gave the same bits (`bandpo.report.compare.exact_compare`).
The decisions the DAG feeds back into its jobs (select, base-check, rank) are ``python -m bandpo.decide``'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bandpo.analysis.scores import DEFAULT_BASELINE
from bandpo.core.files import atomic_write_text
from bandpo.report import metric_cost
from bandpo.report.build import build_report
from bandpo.report.compare import beside, compare, compare_exact
from bandpo.report.publish import provenance, publish
from bandpo.report.smoke import section_markdown, smoke_rows, write_section

PROG = "python -m bandpo.report"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description="the report stage of BandPO-Bench")
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
                   help="the run plan's experiments as JSON (bandpo.study.report_experiments: margins in "
                        "fractions): notes, primary.csv and the verdicts")  # fmt: skip
    b.add_argument("--axes-json", default=None, help="the config's design axes as JSON: axis.csv")
    b.add_argument("--base-per-seed", choices=["true", "false"], default=None,
                   help="the config's base_per_seed (the page's sentence on base models)")  # fmt: skip
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
    k = sub.add_parser("smoke", help="rewrite the published page's real-LM smoke section from the smoke folders")
    k.add_argument("--dest", default="results", help="the page's folder (holds real-lm-smoke/, real-lm-verl/)")
    k.add_argument("--out", default=None, help="also write the section's Markdown here (the smoke DAG's output)")
    k.add_argument("--results", default=None, help="the smoke profile's report folder: its provenance.json goes there")
    k.add_argument("--config-json", default=None, help="the resolved run config (JSON) to record in provenance.json")
    k.add_argument("--models", nargs="*", default=[], help="base model folders whose source and checksums it records")
    m = sub.add_parser("metric-cost", help="the real LM's candidate metrics priced by the cost of a decision")
    m.add_argument("--results", default="results/real-lm", help="a published real-LM comparison's folder")
    return ap  # fmt: skip


def run_build(args: argparse.Namespace) -> int:
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
    return 0


def run_publish(args: argparse.Namespace) -> int:
    config = json.loads(args.config_json) if args.config_json else None
    for path in publish(args.src, args.dest, config, args.models):
        print(path)
    return 0


def run_compare(args: argparse.Namespace) -> int:
    if args.exact:
        return compare_exact(args.published, args.rerun)
    return compare(args.published, args.rerun, args.metrics)


def run_beside(args: argparse.Namespace) -> int:
    for path in beside(args.results, args.other, args.metric):
        print(path)
    return 0


def run_smoke(args: argparse.Namespace) -> int:
    """The smoke section of the published page; with ``--results`` the smoke profile's provenance.json too."""
    rows = smoke_rows(args.dest)
    if rows.empty:
        raise FileNotFoundError(f"no smoke profile's scores.csv under {args.dest}")
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


def run_metric_cost(args: argparse.Namespace) -> int:
    """`bandpo.report.metric_cost`'s table of a published real-LM comparison and the choice its rule makes."""
    folder = Path(args.results)
    if not (folder / "scores.csv").is_file():
        raise FileNotFoundError(f"{folder} holds no scores.csv (a published results folder)")
    table = metric_cost.cost_table(folder)
    print(metric_cost.table_markdown(table) + "\n\nChoice: " + metric_cost.choice(table))
    return 0


COMMANDS = {"build": run_build, "publish": run_publish, "compare": run_compare, "beside": run_beside,
            "smoke": run_smoke, "metric-cost": run_metric_cost}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.command == "build" and not 0 < args.confidence < 1:
        ap.error("--confidence must be in (0, 1)")
    try:
        return COMMANDS[args.command](args)
    except (FileNotFoundError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
