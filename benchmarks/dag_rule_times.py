"""Per-rule cost of a DAG run, from the benchmark files Snakemake wrote (logs/{profile}/benchmarks/**/*.tsv).

    python benchmarks/dag_rule_times.py logs/embedded/benchmarks [--cores 2] [--log .snakemake/log/X.snakemake.log]
                                        [--csv results/dag_rules.csv]

Prints a Markdown table, one row per rule kind (model builds per model, training runs per model and experiment,
lm-eval groups per model, data, report): jobs, mean and summed wall seconds, summed CPU seconds, and the summed
wall time divided by the cores (what the rule kind costs the DAG when the cores are kept busy). The wall time of
the whole run (``--log``: from the first to the last time stamp of snakemake's log of the run) against the sum /
cores shows the scheduling gaps (a core idle while a job waits for its inputs). ``--csv`` also writes the table
(columns rule, jobs, wall_s_mean, wall_s_sum, cpu_s_sum, minutes_per_core, elapsed_min), as the publication run's
results/dag_rules.csv, from which docs/results.md's per-rule table is generated.

``--results results/{profile}`` (the run's results folder) adds the fixed cost per job (issue #23's measure): a
training job's wall time in its benchmark file minus the training time its run.json records (``train_seconds_total``,
the sum of its steps), i.e. start-up, imports, model load, checkpoints, publishing and exit; an lm-eval group's
wall time minus the scoring time its task files record (``seconds.eval``, one scoring per run). Printed per rule kind
(median and mean over its jobs); the probe's training jobs also spend their probe measurements outside the steps.
With ``--csv`` the medians go into the table's column ``fixed_s`` (blank for other rules), which
`benchmarks/dag_budget.py` uses as the measured run's fixed part of a training job.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from bandpo.sweep import split_slot


def kind_label(kind: str, model: str, experiment: str | None = None) -> str:
    """The table's row name of a job kind (``train`` per model and experiment, ``build`` and ``eval`` per model);
    `benchmarks/dag_budget.py` matches its planned jobs to a measured table by it."""
    return {"train": f"train {model} ({experiment})", "build": f"model build {model}",
            "eval": f"lm-eval group {model}"}[kind]  # fmt: skip


def rule_kind(rel: Path) -> str:
    """The row a benchmark file belongs to, from its path under the benchmarks folder."""
    parts = rel.with_suffix("").parts
    if parts[0] == "train" and len(parts) >= 3:  # train/{model}/{entry}[@{experiment}]/seed{s}
        return kind_label("train", parts[1], split_slot(parts[2])[1])
    if parts[0] == "models" and len(parts) >= 2:  # models/{model}[/seed{s}]
        return kind_label("build", parts[1])
    if parts[0] == "eval" and len(parts) >= 2:  # eval/{model}/...
        return kind_label("eval", parts[1])
    return parts[0]


def read_benchmark(path: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of the last run recorded in one benchmark file; NaN where a field is missing."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if not rows:
        return math.nan, math.nan

    def number(key: str) -> float:
        try:
            return float(rows[-1].get(key, "nan"))
        except ValueError:
            return math.nan

    return number("s"), number("cpu_time")


def summarize(folder: Path) -> dict[str, list[tuple[float, float]]]:
    kinds: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for path in sorted(folder.rglob("*.tsv")):
        kinds[rule_kind(path.relative_to(folder))].append(read_benchmark(path))
    return dict(kinds)


STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]", re.M)


def fixed_costs(folder: Path, results: Path) -> dict[str, list[float]]:
    """Per rule kind, each job's fixed cost in seconds (see the module's docstring): training jobs and lm-eval
    groups whose records are under ``results`` (``runs/`` and ``eval/``, laid out as the benchmark files)."""
    kinds: dict[str, list[float]] = defaultdict(list)
    for path in sorted(folder.rglob("*.tsv")):
        rel = path.relative_to(folder)
        wall, _ = read_benchmark(path)
        if rel.parts[0] == "train":  # train/{model}/{slot}/seed{s}.tsv -> runs/{model}/{slot}/seed{s}/run.json
            record = results / "runs" / Path(*rel.with_suffix("").parts[1:]) / "run.json"
            if record.is_file():
                kinds[rule_kind(rel)].append(wall - json.loads(record.read_text())["train_seconds_total"])
        elif rel.parts[0] == "eval" and len(rel.parts) == 3:  # eval/{model}/{slot}.tsv -> eval/{model}/{slot}/seed*/
            scored = []
            for run in sorted((results / "eval" / Path(*rel.with_suffix("").parts[1:])).glob("seed*")):
                # one scoring of a run covers all its tasks; each task file records that scoring's time
                times = [json.loads(t.read_text()).get("seconds", {}).get("eval") for t in run.glob("*.json")]
                scored += {x for x in times if isinstance(x, (int, float))}
            if scored:
                kinds[rule_kind(rel)].append(wall - sum(scored))
    return dict(kinds)


def elapsed_minutes(log: Path) -> float:
    """Minutes from the first to the last time stamp (``[Tue Dec  1 21:20:40 2026]``) of a snakemake log."""
    stamps = [datetime.strptime(" ".join(m.split()), "%a %b %d %H:%M:%S %Y") for m in STAMP.findall(log.read_text())]
    if len(stamps) < 2:
        raise ValueError(f"{log}: fewer than two time stamps")
    return (max(stamps) - min(stamps)).total_seconds() / 60


def table(kinds: dict[str, list[tuple[float, float]]], cores: int, elapsed: float = math.nan) -> list[dict]:
    """One row per rule kind and a last row ``all`` (carrying ``elapsed_min``)."""
    rows = []
    for kind in sorted(kinds):
        values = kinds[kind]
        wall = sum(w for w, _ in values if not math.isnan(w))
        cpu = sum(c for _, c in values if not math.isnan(c))
        rows.append({"rule": kind, "jobs": len(values), "wall_s_mean": wall / len(values), "wall_s_sum": wall,
                     "cpu_s_sum": cpu, "minutes_per_core": wall / cores / 60, "elapsed_min": math.nan})  # fmt: skip
    wall, cpu = sum(r["wall_s_sum"] for r in rows), sum(r["cpu_s_sum"] for r in rows)
    rows.append({"rule": "all", "jobs": sum(r["jobs"] for r in rows), "wall_s_mean": math.nan, "wall_s_sum": wall,
                 "cpu_s_sum": cpu, "minutes_per_core": wall / cores / 60, "elapsed_min": elapsed})  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path, help="logs/{profile}/benchmarks of a finished run")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--log", type=Path, default=None, help="snakemake's log of the run (.snakemake/log/*.log)")
    ap.add_argument("--csv", type=Path, default=None, help="also write the table here")
    ap.add_argument("--results", type=Path, default=None, help="the run's results/{profile}: fixed cost per job")
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        ap.error(f"not a folder: {args.folder}")
    kinds = summarize(args.folder)
    if not kinds:
        ap.error(f"no benchmark files under {args.folder}")
    rows = table(kinds, args.cores, elapsed_minutes(args.log) if args.log else math.nan)
    fixed = fixed_costs(args.folder, args.results) if args.results else {}
    if fixed:
        for r in rows:
            r["fixed_s"] = statistics.median(fixed[r["rule"]]) if r["rule"] in fixed else math.nan
    print(f"| rule | jobs | wall s / job | wall s, sum | CPU s, sum | sum / {args.cores} cores, min |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        mean = "" if r["rule"] == "all" else f"{r['wall_s_mean']:.0f}"
        print(f"| {r['rule']} | {r['jobs']} | {mean} | {r['wall_s_sum']:.0f} | {r['cpu_s_sum']:.0f} | "
              f"{r['minutes_per_core']:.1f} |")  # fmt: skip
    if args.log:
        print(f"\nelapsed, first to last job: {rows[-1]['elapsed_min']:.1f} min")
    if fixed:
        print("\n| rule | jobs | fixed s / job, median | mean |")
        print("|---|---:|---:|---:|")
        for kind in sorted(fixed):
            v = fixed[kind]
            print(f"| {kind} | {len(v)} | {statistics.median(v):.2f} | {statistics.fmean(v):.2f} |")
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else f"{v:.6g}" if isinstance(v, float)
                                else v) for k, v in r.items()})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
