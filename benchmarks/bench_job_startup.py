"""Fixed cost of a training job (process start, imports, grader start, model load, saving) in this tree against an
older commit, side by side.

    python benchmarks/bench_job_startup.py --base-commit 5bd8c05 [--model DIR] [--data DIR] [--repeats 3]
        [--config config/config.yaml]

The older commit is checked out for the run as a detached ``git worktree`` in a temporary folder (removed at the
end, also on an error; ``benchmarks/_worktree.py``). Per tree, alternately (base first on even repeats):
``python -m bandpo.train --help`` (interpreter + the trainer's module imports) and a one-step run of the default
trainer (`TrainConfig`'s defaults with ``steps=1``, one thread: this tree reads it from a spec file, ``--spec FILE``
as the workflow runs a job, the older tree gets the same settings as flags, ``_worktree.legacy_train_command``)
whose "other" is its wall time minus the logged ``step_seconds``
(everything but the step: imports, grader workers, model load, checkpoint-free publishing of model/, metrics and
run.json). Each runs with ``PYTHONPATH`` set to its tree and the environment of the config's jobs
(`bandpo.plan.runs.Plan.env`, one thread). CPU seconds are the child process's user + system time including its
grader workers (what the job costs a core); for the one-step run they include the step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _timing import timed_process
from _worktree import base_worktree, resolve, train_command, tree_env

from bandpo.plan.runs import Plan
from bandpo.plan.validate import load_yaml, validate_config
from bandpo.train.settings import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-commit", required=True, help="the commit to compare against (a temporary worktree of it)")
    ap.add_argument("--model", default="resources/models/tiny-s")
    ap.add_argument("--data", default="resources/data/tiny-math")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--config", default="config/config.yaml", help="whose jobs' environment the runs get")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    model, data = Path(args.model).resolve(), Path(args.data).resolve()
    for name, path in (("--model", model / "config.json"), ("--data", data / "train.jsonl")):
        if not path.is_file():
            ap.error(f"{name}: {path} not found")
    if not (ROOT / args.config).is_file():
        ap.error(f"--config {args.config}: not a file")
    env = {**Plan(validate_config(load_yaml(ROOT / args.config), root=ROOT), ROOT).env(), "OMP_NUM_THREADS": "1"}
    resolve(args.base_commit)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows: dict[str, dict[str, list[float]]] = {"base": {}, "this": {}}
    with base_worktree(args.base_commit) as base:
        trees = {"base": base, "this": ROOT}
        for repeat in range(args.repeats):
            for name in ["base", "this"] if repeat % 2 == 0 else ["this", "base"]:
                tree, r = trees[name], rows[name]
                w, c = timed_process([sys.executable, "-m", "bandpo.train", "--help"], tree, tree_env(tree, env))
                r.setdefault("help_wall", []).append(w)
                r.setdefault("help_cpu", []).append(c)
                with tempfile.TemporaryDirectory(prefix="bandpo-startup-") as tmp:
                    run = TrainConfig(model=str(model), data=str(data), out=tmp + "/run", seed=0, threads=1,
                                      progress=False, steps=1)  # fmt: skip
                    cmd = train_command(run, tree, tmp + "/spec.json")
                    w, c = timed_process(cmd, tree, tree_env(tree, env))
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
