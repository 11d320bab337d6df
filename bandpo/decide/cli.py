"""``python -m bandpo.decide``: the decisions the DAG's rules ask for, one subcommand each::

    python -m bandpo.decide select --results results/embedded --experiment separation --experiments-json '{...}'
        --axes-json '{...}' --out results/embedded/select/separation.json
    python -m bandpo.decide base-check --published results --model tiny-s --dirs resources/models/tiny-s/seed0 ...
        --out results/embedded/rank/base/tiny-s.json
    python -m bandpo.decide rank --results results/embedded --entry half_clip --published results
        --checks results/embedded/rank/base/tiny-s.json --out results/embedded/rank/half_clip.md
        [--margins-json '{"tiny-s": 0.02}']
    python -m bandpo.decide look --spec results/embedded/plan/looks/main/tiny-s.json --look 2
        --out results/embedded/looks/main/tiny-s/look2.json

Each prints the paths it wrote (base-check: its verdict), or ``error: ...`` on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bandpo.core.files import atomic_write_text
from bandpo.decide.looks import write_look
from bandpo.decide.rank import base_check, write_rank
from bandpo.decide.selection import select

PROG = "python -m bandpo.decide"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description="the decisions the DAG feeds back into its jobs")
    sub = ap.add_subparsers(dest="command", required=True)
    x = sub.add_parser("select", help="an experiment's selected setting (its config's select rule) from the scores")
    x.add_argument("--results", required=True, help="results/{profile}: holds eval/")
    x.add_argument("--experiment", required=True, help="the experiment whose select rule is applied")
    x.add_argument("--experiments-json", required=True, help="the config's experiments as JSON")
    x.add_argument("--axes-json", required=True, help="the config's design axes as JSON")
    x.add_argument("--out", required=True, help="JSON {key: value} for bandpo.train.loop --set-file; beside it OUT.csv")
    bc = sub.add_parser("base-check", help="are the base models built here the published ones? (sha256)")
    bc.add_argument("--published", default="results", help="the published results folder (its provenance.json)")
    bc.add_argument("--model", required=True, help="the model id")
    bc.add_argument("--dirs", nargs="+", required=True, help="the model's base model folders built here")
    bc.add_argument("--out", required=True, help="the check as JSON (bandpo.decide.rank.base_check)")
    r = sub.add_parser("rank", help="a new method entry against the published runs, without rerunning them")
    r.add_argument("--results", required=True, help="results/{profile}: holds the entry's eval/")
    r.add_argument("--entry", required=True)
    r.add_argument("--published", default="results", help="the published results folder (scores.csv)")
    r.add_argument("--checks", nargs="+", required=True, help="the base-check JSON of every model the entry runs on")
    r.add_argument("--out", required=True, help="the ranking as Markdown; beside it the same path with .csv")
    r.add_argument("--margins-json", default=None,
                   help="main's margin per model, fractions of the score, from the run plan "
                        "(bandpo.study.report_experiments; rule rank passes this config's); default: the "
                        "published config's")  # fmt: skip
    lk = sub.add_parser("look", help="a sequential primary's verdict from the seeds of its first looks")
    lk.add_argument("--spec", required=True, help="the look's spec (the run plan's results/{profile}/plan/looks/...)")
    lk.add_argument("--look", type=int, required=True, help="the look, 1-based: the first look x k seed pairs")
    lk.add_argument("--out", required=True, help="the decision as JSON")
    return ap


def run_select(args: argparse.Namespace) -> list[Path]:
    experiments, axes = json.loads(args.experiments_json), json.loads(args.axes_json)
    return select(args.results, args.experiment, experiments, axes, args.out)


def run_base_check(args: argparse.Namespace) -> list[Path]:
    check = base_check(args.published, args.model, args.dirs)
    out = atomic_write_text(Path(args.out), json.dumps(check, indent=2) + "\n")
    print(f"{args.model}: {'identical to' if check['match'] else 'DIFFERENT from'} the published base models in "
          f"{args.published}")  # fmt: skip
    return [out]


def run_rank(args: argparse.Namespace) -> list[Path]:
    margins = json.loads(args.margins_json) if args.margins_json else None
    return write_rank(args.results, args.entry, args.published, args.checks, args.out, margins)


def run_look(args: argparse.Namespace) -> list[Path]:
    return [write_look(args.spec, args.look, args.out)]


COMMANDS = {"select": run_select, "base-check": run_base_check, "rank": run_rank, "look": run_look}


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        written = COMMANDS[args.command](args)
    except (FileNotFoundError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    if args.command != "base-check":  # base-check prints its verdict instead
        for path in written:
            print(path)
    return 0
