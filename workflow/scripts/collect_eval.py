"""Collect the per-run evaluation summaries ({task}.json) into one CSV table (written atomically).

    python collect_eval.py --out results/embedded/eval/summary.csv results/embedded/eval/*/*/seed*/*.json

One row per (model, entry, seed, task); metric columns as lm-eval reported them (mean@k, pass@k, maj@k,
best@k_bootstrap) plus their stderr. A placeholder for the leaderboard, which aggregates over seeds.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import tempfile
from pathlib import Path

ID_COLUMNS = ["profile", "model", "entry", "method", "seed", "task", "k", "n_problems", "step", "trainer"]


def rows_from(paths: list[str]) -> tuple[list[dict], list[str]]:
    rows, metric_cols = [], []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            s = json.load(f)
        row = {c: s.get(c) for c in ID_COLUMNS}
        row["params"] = json.dumps(s.get("params"), sort_keys=True) if s.get("params") is not None else ""
        for name, value in s["metrics"].items():
            row[name] = value
            if name not in metric_cols:
                metric_cols.append(name)
            se = (s.get("stderr") or {}).get(name)
            row[f"{name}_stderr"] = se
            if f"{name}_stderr" not in metric_cols:
                metric_cols.append(f"{name}_stderr")
        row["summary"] = str(p)
        rows.append(row)
    rows.sort(key=lambda r: (str(r["model"]), str(r["entry"]) != "base", str(r["entry"]), str(r["task"]), r["seed"]))
    return rows, metric_cols


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("summaries", nargs="+")
    args = ap.parse_args(argv)
    rows, metric_cols = rows_from(args.summaries)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=ID_COLUMNS + ["params"] + metric_cols + ["summary"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(buf.getvalue())
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)
    print(f"{len(rows)} rows -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
