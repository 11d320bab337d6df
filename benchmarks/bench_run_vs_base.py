"""Cost of one default run (training + its scoring) in this tree against an older commit, side by side.

    python benchmarks/bench_run_vs_base.py --base-commit 5bd8c05 [--model-id tiny-s] [--entry grpo] [--seed 0]
        [--repeats 2] [--no-eval] [--parallel N] [--models-root resources] [--set KEY=VALUE] [--this-set KEY=VALUE]
        [--json out.json]

The older commit is checked out for the run as a detached ``git worktree`` in a temporary folder (removed at the
end, also on an error; ``benchmarks/_worktree.py``). Runs, alternately (base first on even repeats, this tree first
on odd ones) and never at the same time, the command the workflow's rule ``train`` runs for one model x entry x
seed of ``config/config.yaml`` (`bandpo.plan.runs.Plan.train_spec`, the model's and entry's ``train`` settings
applied, with the jobs' environment, ``Plan.env``; here one thread): in this tree ``python -m bandpo.train --spec
FILE`` (`Plan.train_command`), in the older one the same settings as the flags and ``--set KEY=VALUE`` its trainer
took (`_worktree.legacy_train_command`), each with ``python -m`` from its own tree (``PYTHONPATH`` set to the tree,
so an editable install elsewhere does not interfere), on the same base model and data (the paths under
``resources/`` taken from ``--models-root``); then, unless ``--no-eval``, the scoring of the trained model as the
workflow's eval rule does it (``python -m bandpo.score``, `Plan.eval_spec`: lm-eval, the config's tasks, model args
and batch size; this tree reads it as a spec file, the older one as flags, with its own entry point and task
folder), alone in its lm-eval process (so the whole
start-up of lm-eval is charged to the run: a group of 3 seeds shares it; the ratio is conservative for a change that
does not touch the start-up). Prints per run wall seconds, CPU seconds (the child processes' user + system time,
which other jobs on the machine disturb less than wall time) and the ratios base / this tree per repeat and as
medians, and whether the two trees' runs of the seed logged the same numbers.

``--set KEY=VALUE`` adds a training setting (a `TrainConfig` field) to both trees' runs, ``--this-set KEY=VALUE`` to
this tree's only (a candidate setting against the older code as it ran). A setting that the older tree's trainer has
no field for (``old_log_probs``, newer than ``5bd8c05``) is left out of its command, which then runs as that code
always did (there: the old log-probs recomputed); the script prints which.

``--parallel N`` times the DAG's situation instead, N training jobs at once on N cores (seeds ``seed`` ..
``seed + N - 1``, training only): per tree the wall time of the N jobs together and their summed CPU time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _worktree import (
    base_worktree,
    entry_module,
    legacy_train_command,
    resolve,
    tasks_dir,
    tree_env,
    unknown_sets,
)
from _worktree import train_command as tree_train_command

from bandpo.core.options import parse_assignments
from bandpo.plan.runs import Plan
from bandpo.plan.validate import load_yaml, validate_config
from bandpo.score.spec import EvalRun
from bandpo.train.settings import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
THREADS = 1


def _timed(cmds: list[list[str]], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall time of ``cmds`` run at once (each a process; one for a single job), and their summed CPU time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:  # a file, not a pipe: no job blocks on output nobody reads yet
        procs = [subprocess.Popen(c, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=log) for c in cmds]
        codes = [p.wait() for p in procs]
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if any(codes):
            log.seek(0)
            failed = [shlex.join(c) for c, rc in zip(cmds, codes, strict=True) if rc]
            raise SystemExit(f"failed (rc {max(codes)}) in {cwd}: {'; '.join(failed)}\n{log.read()[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def rooted(path: str, models_root: Path) -> str:
    """A path under ``resources/`` taken from ``models_root`` instead (absolute, so that both trees read the same
    base model and data); any other path as it is."""
    m = re.fullmatch(r"resources/(.+)", path)
    return str(models_root / m[1]) if m else path


def planned_run(plan: Plan, model_id: str, slot: str, seed: int) -> TrainConfig:
    """The run ``model_id`` x ``slot`` x ``seed`` as the run plan builds it (`Plan.train_spec`); for a seed the config
    does not train, its first seed's run with this seed and this seed's base model (no setting depends on the
    seed)."""
    if (model_id, slot, seed) in plan.train_specs:
        return plan.train_spec(model_id, slot, seed)
    first = plan.train_spec(model_id, slot, plan.seeds_of(slot)[0])
    return dataclasses.replace(first, model=plan.model_dir(model_id, seed), seed=seed,
                               out=plan.run_dir(model_id, slot, seed))  # fmt: skip


def run_spec(plan: Plan, model_id: str, slot: str, seed: int, out: Path, models_root: Path,
             sets: dict[str, Any]) -> TrainConfig:  # fmt: skip
    """The rule ``train``'s run (`planned_run`; one thread, into ``out``, its base model and data under
    ``models_root``) with ``sets`` (`TrainConfig` field values) applied, validated (ValueError: a bad setting)."""
    spec = planned_run(plan, model_id, slot, seed)
    run = dataclasses.replace(spec, model=rooted(spec.model, models_root), data=rooted(spec.data, models_root),
                              out=str(out), threads=THREADS, **sets)  # fmt: skip
    run.validate()
    return run


def train_command(plan: Plan, model_id: str, slot: str, seed: int, out: Path, models_root: Path,
                  sets: dict[str, Any], tree: Path = ROOT) -> list[str]:  # fmt: skip
    """`run_spec`'s run as ``tree`` runs it (`_worktree.train_command`): this tree reads it from a spec file beside
    ``out`` (``OUT.spec.json``), an older tree gets it as flags, less the settings its trainer does not define."""
    return tree_train_command(run_spec(plan, model_id, slot, seed, out, models_root, sets), tree, f"{out}.spec.json")


def _knows_backend(tree: Path, backend: str) -> bool:
    """Whether ``tree``'s code names the scoring backend ``backend`` (lm-eval's hf is known to every tree)."""
    return backend == "hf" or any(f'"{backend}"' in f.read_text() for f in (tree / "bandpo").rglob("*.py"))


def eval_command(plan: Plan, tree: Path, model_id: str, slot: str, seed: int, model: Path, out: Path,
                 models_root: Path) -> list[str]:  # fmt: skip
    """The scoring rule's job (`Plan.eval_spec`) for one trained model (``--run MODEL OUT SEED``), with ``tree``'s
    lm-eval task folder: this tree reads it from a spec file written beside ``out`` (``OUT.spec.json``,
    `Plan.eval_command`), an older tree gets it as the flags its entry point took. A tree that does not know the
    config's backend (``bandpo-tiny`` is newer than ``5bd8c05``) scores with lm-eval's ``hf``."""
    job = plan.eval_spec(model_id, slot, [seed])
    changes = {"runs": [EvalRun(str(model), str(out), seed)], "include_path": str(tasks_dir(tree)), "threads": THREADS,
               "tasks": {name: data and rooted(data, models_root) for name, data in job.tasks.items()}}  # fmt: skip
    if tree == ROOT:
        return plan.eval_command(model_id, slot, [seed], f"{out}.spec.json", python=sys.executable, **changes)
    job = dataclasses.replace(job, **changes)
    backend = job.backend if _knows_backend(tree, job.backend) else "hf"  # an older tree scores with hf, as it did
    args = ["--include-path", job.include_path, "--backend", backend, "--model-args",
            json.dumps(job.model_args, sort_keys=True), "--batch-size", str(job.batch_size)]  # fmt: skip
    args += [a for name, data in job.tasks.items() for a in ("--task", f"{name}={data}" if data else name)]
    args += ["--apply-chat-template"] if job.apply_chat_template else []
    args += ["--limit", str(job.limit)] if job.limit else []
    return [sys.executable, "-m", entry_module(tree, "bandpo.score"), *args, "--threads", str(job.threads),
            "--run", str(model), str(out), str(seed)]  # fmt: skip


def checked_plan(ap: argparse.ArgumentParser, args: argparse.Namespace, seeds) -> tuple[Plan, Path]:
    """The `Plan` of ``args.config`` and the resolved ``args.models_root``, after checking (through ``ap.error``)
    that the config exists and trains locally, ``args.model_id`` is one of its models, ``args.entry`` a method entry
    of its main experiment, and that the base models of ``seeds`` and the entry's data are under the models root."""
    if not (ROOT / args.config).is_file():
        ap.error(f"--config {args.config}: not a file")
    plan = Plan(validate_config(load_yaml(ROOT / args.config), root=ROOT), ROOT)
    if plan.trainer != "local":
        ap.error(f"--config {args.config}: trainer {plan.trainer!r}; these runs are the local trainer's")
    if args.model_id not in plan.models:
        ap.error(f"--model-id {args.model_id!r}: not a model of {args.config} ({', '.join(plan.models)})")
    if args.entry not in plan.slots or args.entry not in plan.entries:
        ap.error(f"--entry {args.entry!r}: not a method entry of {args.config}'s main experiment")
    if (args.model_id, args.entry, plan.seeds_of(args.entry)[0]) not in plan.train_specs:
        ap.error(f"--model-id {args.model_id!r}: {args.config} does not train it with --entry {args.entry!r}")
    root = Path(args.models_root).resolve()
    needed = [plan.model_dir(args.model_id, s) for s in seeds] + [plan.data_dir(plan.xp_of(args.entry)["data"])]
    missing = [p for p in (rooted(p, root) for p in dict.fromkeys(needed)) if not Path(p).is_dir()]  # one per size
    if missing:
        ap.error(f"--models-root {args.models_root}: missing {', '.join(missing)} (build them with the DAG)")
    return plan, root


def checked_sets(ap: argparse.ArgumentParser, plan: Plan, args: argparse.Namespace, option: str,
                 items: list[str]) -> dict[str, Any]:  # fmt: skip
    """``KEY=VALUE`` items of ``option`` as `TrainConfig` field values (`bandpo.core.options.parse_assignments`),
    checked on the run of ``args.model_id`` x ``args.entry`` (through ``ap.error``: an unknown field, a bad
    value)."""
    try:
        sets = parse_assignments(items, TrainConfig)
        run_spec(plan, args.model_id, args.entry, plan.seeds_of(args.entry)[0], Path("run"), Path("."), sets)
    except (TypeError, ValueError) as e:
        ap.error(f"{option}: {' '.join(str(e).split())}")
    return sets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-commit", required=True, help="the commit to compare against (a temporary worktree of it)")
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model-id", default="tiny-s")
    ap.add_argument("--entry", default="grpo", help="a method entry of the config's main experiment")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--models-root", default="resources", help="folder holding models/ and data/ (default resources)")
    ap.add_argument("--no-eval", action="store_true", help="time training only")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE training setting for both trees' runs")
    ap.add_argument("--this-set", action="append", default=[], help="KEY=VALUE training setting for this tree's runs")
    ap.add_argument("--parallel", type=int, default=1, help="N training jobs at once (seeds seed..seed+N-1)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.parallel < 1:
        ap.error("--repeats and --parallel must be >= 1")
    seeds = range(args.seed, args.seed + args.parallel)
    plan, root = checked_plan(ap, args, seeds)
    both = checked_sets(ap, plan, args, "--set", args.set)
    sets = {"base": both, "this": {**both, **checked_sets(ap, plan, args, "--this-set", args.this_set)}}
    resolve(args.base_commit)  # an unknown commit fails here, before anything runs
    env = {**plan.env(), "OMP_NUM_THREADS": str(THREADS)}
    task = plan.tasks_of(args.entry)[0]["task"]
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3

    rows = []
    with base_worktree(args.base_commit) as base:
        trees = {"base": base, "this": ROOT}
        print(
            f"{args.model_id} {args.entry} seed {args.seed}, one thread, load average {load[0]:.2f} {load[1]:.2f} "
            f"{load[2]:.2f}; base = {args.base_commit} (worktree {base}), this = {ROOT} {args.this_set}",
            flush=True,
        )
        full = legacy_train_command(run_spec(plan, args.model_id, args.entry, args.seed, Path("run"), root,
                                             sets["base"]), None)  # fmt: skip
        left_out = [full[i + 1] for i in unknown_sets(full, base)]
        if left_out:
            print(f"base: left out, its trainer has no such field: {', '.join(left_out)}", flush=True)
        for repeat in range(args.repeats):
            order = ["base", "this"] if repeat % 2 == 0 else ["this", "base"]
            for name in order:
                tree = trees[name]
                with tempfile.TemporaryDirectory(prefix="bandpo-runcost-") as tmp:
                    out = Path(tmp) / "run"
                    if args.parallel > 1:  # the DAG's situation: N jobs at once, training only
                        cmds = [train_command(plan, args.model_id, args.entry, s, Path(tmp) / f"run{s}", root,
                                              sets[name], tree) for s in seeds]  # fmt: skip
                        wall, cpu = _timed(cmds, tree, tree_env(tree, env))
                        rows.append({"tree": name, "repeat": repeat, "wall": wall, "cpu": cpu})
                        print(f"repeat {repeat} {name:4}: {args.parallel} jobs at once, wall {wall:6.1f} s, "
                              f"CPU {cpu:6.1f} s", flush=True)  # fmt: skip
                        continue
                    cmd = train_command(plan, args.model_id, args.entry, args.seed, out, root, sets[name], tree)
                    train_wall, train_cpu = _timed([cmd], tree, tree_env(tree, env))
                    summary = json.loads((out / "run.json").read_text())
                    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
                    r = {
                        "tree": name,
                        "repeat": repeat,
                        "train_wall": train_wall,
                        "train_cpu": train_cpu,
                        "steps_s": summary["train_seconds_total"],
                        "final": summary["final"],
                        "reward_per_step": [m["reward_mean"] for m in metrics],
                    }
                    if not args.no_eval:
                        ecmd = eval_command(plan, tree, args.model_id, args.entry, args.seed, out / "model",
                                            Path(tmp) / "eval", root)  # fmt: skip
                        r["eval_wall"], r["eval_cpu"] = _timed([ecmd], tree, tree_env(tree, env))
                        r["eval_metrics"] = json.loads((Path(tmp) / "eval" / f"{task}.json").read_text())["metrics"]
                    else:
                        r["eval_wall"] = r["eval_cpu"] = 0.0
                    r["wall"] = r["train_wall"] + r["eval_wall"]
                    r["cpu"] = r["train_cpu"] + r["eval_cpu"]
                rows.append(r)
                print(
                    f"repeat {repeat} {name:4}: train wall {r['train_wall']:6.1f} s CPU {r['train_cpu']:6.1f} s "
                    f"(steps {r['steps_s']:5.1f} s) | eval wall {r['eval_wall']:5.1f} s CPU {r['eval_cpu']:5.1f} s | "
                    f"total wall {r['wall']:6.1f} s CPU {r['cpu']:6.1f} s | final {r['final']}",
                    flush=True,
                )
    print("ratios base / this (per repeat):")
    ratios = {k: [] for k in ("wall", "cpu", "train_wall", "train_cpu", "eval_wall", "eval_cpu")}
    for repeat in range(args.repeats):
        b = next(r for r in rows if r["repeat"] == repeat and r["tree"] == "base")
        t = next(r for r in rows if r["repeat"] == repeat and r["tree"] == "this")
        for k in ratios:
            if t.get(k, 0) > 0:
                ratios[k].append(b[k] / t[k])
        print(f"  repeat {repeat}: " + ", ".join(f"{k} {v[-1]:.2f}x" for k, v in ratios.items() if v))
        if args.parallel > 1:
            continue
        same = b["reward_per_step"] == t["reward_per_step"]
        print(f"  repeat {repeat}: same per-step rewards in both trees: {same}")
    print("median: " + ", ".join(f"{k} {statistics.median(v):.2f}x" for k, v in ratios.items() if v))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
