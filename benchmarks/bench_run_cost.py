"""Cost of one default embedded training run (one method, one seed) per model size, on one core.

Runs exactly the command the Snakemake rule ``train`` runs for each tiny model main trains the entry on
(`bandpo.plan.runs.Plan`: ``python -m bandpo.train --spec FILE`` and the rule's environment, the model's and the
entry's ``train`` settings in the spec; here with ``threads`` 1 and a temporary run folder), one run at a time, and
prints its wall
time split into training (the sum of the logged ``step_seconds``) and everything else (imports, grader start,
model load, saving), its CPU time, and the wall time as a share of its budget (2 minutes for tiny-s,
4 minutes for tiny-m)::

    python benchmarks/bench_run_cost.py [--config config/config.yaml] [--entry grpo] [--repeats 3] [--seed 0]
        [--json cost.json]

Needs the models and data the DAG builds (``snakemake --cores all resources/models/tiny-s/config.json ...``,
the base model of the seed, or a finished embedded run). Each run writes to a temporary directory that is removed
afterwards. Times are wall-clock on a shared machine: run it with nothing else on the machine, or read the spread
over ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bandpo.plan.runs import Plan
from bandpo.plan.sweep import cell_models, model_path
from bandpo.plan.validate import load_yaml, validate_config

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = {"tiny-s": 120.0, "tiny-m": 240.0}  # the local trainer's per-run targets (one core)
THREADS = 1


def run_command(cfg: dict, model_id: str, slot: str, seed: int, out: str, spec: str,
                threads: int = THREADS) -> list[str]:  # fmt: skip
    """``python -m bandpo.train --spec SPEC`` as the workflow's rule ``train`` runs it
    (`bandpo.plan.runs.Plan.train_command`), its spec written to ``spec``: into ``out`` with ``threads`` threads;
    ``slot`` is the entry id for main's runs."""
    return Plan(cfg, ROOT).train_command(model_id, slot, seed, spec, python=sys.executable, out=out, threads=threads)


def run_env(cfg: dict, threads: int = THREADS) -> dict[str, str]:
    """The job's environment as the rule sets it (`bandpo.plan.runs.Plan.env`), with ``threads`` BLAS threads."""
    return {**os.environ, **Plan(cfg, ROOT).env(), "OMP_NUM_THREADS": str(threads)}


def time_run(cmd: list[str], out: Path, env: dict[str, str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"run failed (rc {proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "run.json").read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "train_s": summary["train_seconds_total"], "cpu_s": cpu, "steps": summary["steps"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--entry", default="grpo", help="method entry of the config (default grpo)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the per-run figures here")
    args = ap.parse_args(argv)

    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if not (ROOT / args.config).is_file():
        ap.error(f"--config {args.config}: not a file")
    cfg = validate_config(load_yaml(ROOT / args.config), root=ROOT)  # defaults filled in
    plan = Plan(cfg, ROOT)
    if args.entry not in plan.slots or args.entry not in plan.entries:
        ap.error(f"--entry {args.entry!r} is not a method entry of {args.config}'s main experiment")
    if plan.trainer != "local" or args.seed not in plan.seeds_of(args.entry):
        ap.error(f"--seed {args.seed}: not a local run of {args.config} (entry {args.entry!r} trains seeds "
                 f"{plan.seeds_of(args.entry)}, trainer {plan.trainer})")  # fmt: skip
    # the tiny models main trains the entry on
    models = [m for m in cell_models(cfg, plan.xp_of(args.entry), args.entry) if plan.models[m]["source"] == "tiny"]
    missing = [m for m in models if not (ROOT / model_path(cfg, m, args.seed) / "config.json").is_file()]
    if missing or not models:
        ap.error(f"build the models first (missing: {', '.join(missing) or 'no tiny models in the config'})")

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"entry {args.entry}, seed {args.seed}, one thread, {args.repeats} repeat(s), load average {load:.2f}")
    print(f"{'model':8} {'steps':>5} {'wall s':>8} {'train s':>8} {'other s':>8} {'CPU s':>7} {'wall/budget':>11}")
    rows = []
    for repeat in range(args.repeats):
        for model_id in models:  # one run at a time, sizes alternating across repeats
            with tempfile.TemporaryDirectory(prefix="bandpo-cost-") as tmp:
                cmd = run_command(cfg, model_id, args.entry, args.seed, f"{tmp}/run", f"{tmp}/spec.json")
                r = time_run(cmd, Path(tmp) / "run", run_env(cfg))
            r.update(model=model_id, repeat=repeat, budget_s=BUDGET_S.get(model_id, float("nan")))
            rows.append(r)
            other = r["wall_s"] - r["train_s"]
            print(f"{model_id:8} {r['steps']:>5} {r['wall_s']:8.1f} {r['train_s']:8.1f} {other:8.1f} {r['cpu_s']:7.1f}"
                  f" {r['wall_s'] / r['budget_s']:10.2f}x", flush=True)  # fmt: skip
    print("median wall per model:")
    for model_id in models:
        walls = [r["wall_s"] for r in rows if r["model"] == model_id]
        budget = BUDGET_S.get(model_id, float("nan"))
        median = statistics.median(walls)
        print(f"  {model_id}: {median:.1f} s (max {max(walls):.1f} s) against a {budget:.0f} s budget")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
