"""Per-rule cost of a DAG run, from the benchmark files Snakemake wrote (logs/{profile}/benchmarks/**/*.tsv).

    python benchmarks/dag_rule_times.py logs/embedded/benchmarks [--cores 2]

Prints a Markdown table, one row per rule kind (model builds per model, training runs per model and experiment,
lm-eval groups per model, data, report): jobs, mean and summed wall seconds, summed CPU seconds, and the summed
wall time divided by the cores (what the rule kind costs the DAG when the cores are kept busy). The wall time of
the whole run is snakemake's own "Elapsed time"; the gap between it and the sum / cores is scheduling (a core idle
while a job waits for its inputs).
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from bandpo.sweep import split_slot


def rule_kind(rel: Path) -> str:
    """The row a benchmark file belongs to, from its path under the benchmarks folder."""
    parts = rel.with_suffix("").parts
    if parts[0] == "train" and len(parts) >= 3:  # train/{model}/{entry}[@{experiment}]/seed{s}
        experiment = split_slot(parts[2])[1]
        return f"train {parts[1]} ({experiment})"
    if parts[0] == "models" and len(parts) >= 2:  # models/{model}[/seed{s}]
        return f"model build {parts[1]}"
    if parts[0] == "eval" and len(parts) >= 2:  # eval/{model}/...
        return f"lm-eval group {parts[1]}"
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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path, help="logs/{profile}/benchmarks of a finished run")
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        ap.error(f"not a folder: {args.folder}")
    kinds = summarize(args.folder)
    if not kinds:
        ap.error(f"no benchmark files under {args.folder}")
    print(f"| rule | jobs | wall s / job | wall s, sum | CPU s, sum | sum / {args.cores} cores, min |")
    print("|---|---:|---:|---:|---:|---:|")
    total = 0.0
    for kind in sorted(kinds):
        values = kinds[kind]
        wall = sum(w for w, _ in values if not math.isnan(w))
        cpu = sum(c for _, c in values if not math.isnan(c))
        total += wall
        print(f"| {kind} | {len(values)} | {wall / len(values):.0f} | {wall:.0f} | {cpu:.0f} | "
              f"{wall / args.cores / 60:.1f} |")  # fmt: skip
    print(f"| all | {sum(map(len, kinds.values()))} | | {total:.0f} | | {total / args.cores / 60:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
