"""Fixed cost of a training job (process start, imports, grader start, model load, saving) in this tree against
another checkout, side by side.

    python benchmarks/bench_job_startup.py --base-tree ../base-5bd8c05 [--model DIR] [--data DIR] [--repeats 3]

Per tree, alternately (base first on even repeats): ``python -m bandpo.train --help`` (interpreter + the trainer's
module imports) and a one-step run of the default trainer (``--set steps=1``, one thread) whose "other" is its
wall time minus the logged ``step_seconds`` (everything but the step: imports, grader workers, model load,
checkpoint-free publishing of model/, metrics and run.json). CPU seconds are the child process's user + system
time including its grader workers (what the job costs a core); for the one-step run they include the step.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(cmd: list[str], tree: Path) -> tuple[float, float]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONHASHSEED": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(tree),
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"failed in {tree}: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-tree", required=True, type=Path)
    ap.add_argument("--model", default="resources/models/tiny-s/seed0")
    ap.add_argument("--data", default="resources/data/tiny-math")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    trees = {"base": args.base_tree.resolve(), "this": ROOT}
    model, data = str(Path(args.model).resolve()), str(Path(args.data).resolve())
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows: dict[str, dict[str, list[float]]] = {t: {} for t in trees}
    for repeat in range(args.repeats):
        for name in ["base", "this"] if repeat % 2 == 0 else ["this", "base"]:
            tree, r = trees[name], rows[name]
            w, c = _timed([sys.executable, "-m", "bandpo.train", "--help"], tree)
            r.setdefault("help_wall", []).append(w)
            r.setdefault("help_cpu", []).append(c)
            with tempfile.TemporaryDirectory(prefix="bandpo-startup-") as tmp:
                cmd = [
                    sys.executable,
                    "-m",
                    "bandpo.train",
                    "--model",
                    model,
                    "--data",
                    data,
                    "--out",
                    tmp + "/run",
                    "--seed",
                    "0",
                    "--threads",
                    "1",
                    "--no-progress",
                    "--set",
                    "steps=1",
                ]
                w, c = _timed(cmd, tree)
                step = json.loads(Path(tmp, "run", "run.json").read_text())["train_seconds_total"]
            r.setdefault("run_wall", []).append(w)
            r.setdefault("run_cpu", []).append(c)
            r.setdefault("other_wall", []).append(w - step)
            print(
                f"repeat {repeat} {name}: --help wall {r['help_wall'][-1]:.2f} s CPU {r['help_cpu'][-1]:.2f} s | "
                f"1-step run wall {w:.2f} s CPU {c:.2f} s, other (wall - step) {w - step:.2f} s",
                flush=True,
            )
    print("medians:")
    for name, r in rows.items():
        print(f"  {name}: " + ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in r.items()))
    print(
        "ratios base / this (medians): "
        + ", ".join(
            f"{k} {statistics.median(rows['base'][k]) / statistics.median(rows['this'][k]):.2f}x" for k in rows["this"]
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
