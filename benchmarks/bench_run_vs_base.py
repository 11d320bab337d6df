"""Cost of one default run (training + its scoring) in this tree against an older commit, side by side.

    python benchmarks/bench_run_vs_base.py --base-commit 5bd8c05 [--model-id tiny-s] [--entry grpo] [--seed 0]
        [--repeats 2] [--no-eval] [--parallel N] [--models-root resources] [--set KEY=VALUE] [--this-set KEY=VALUE]
        [--json out.json]

The older commit is checked out for the run as a detached ``git worktree`` in a temporary folder (removed at the
end, also on an error; ``benchmarks/_worktree.py``). Runs, alternately (base first on even repeats, this tree first
on odd ones) and never at the same time, the command the workflow's rule ``train`` runs for one model x entry x
seed of ``config/config.yaml`` (`bandpo.config.jobs.Jobs.command` with its environment, ``Jobs.env``: the model's and
entry's ``train`` settings applied; here one thread), each with ``python -m`` from its own tree (``PYTHONPATH`` set
to the tree, so an editable install elsewhere does not interfere), on the same base model and data (the paths under
``resources/`` taken from ``--models-root``); then, unless ``--no-eval``, the scoring of the trained model as the
workflow's eval rule does it (``python -m bandpo.score`` with ``Jobs.eval_args``: lm-eval, the config's tasks, model
args and batch size; an older tree's own entry point and task folder), alone in its lm-eval process (so the whole
start-up of lm-eval is charged to the run: a group of 3 seeds shares it; the ratio is conservative for a change that
does not touch the start-up). Prints per run wall seconds, CPU seconds (the child processes' user + system time,
which other jobs on the machine disturb less than wall time) and the ratios base / this tree per repeat and as
medians, and whether the two trees' runs of the seed logged the same numbers.

``--set KEY=VALUE`` adds a training setting to both trees' runs, ``--this-set KEY=VALUE`` to this tree's only (a
candidate setting against the older code as it ran). A setting of the config that the older tree's trainer has no
field for (``old_log_probs``, newer than ``5bd8c05``) is left out of its command, which then runs as that code
always did (there: the old log-probs recomputed); the script prints which.

``--parallel N`` times the DAG's situation instead, N training jobs at once on N cores (seeds ``seed`` ..
``seed + N - 1``, training only): per tree the wall time of the N jobs together and their summed CPU time.
"""

from __future__ import annotations

import argparse
import functools
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

from _worktree import base_worktree, entry_module, resolve, tasks_dir, tree_env

from bandpo.config.jobs import Jobs
from bandpo.config.validate import load_yaml, validate_config

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


def rooted(args: list[str], models_root: Path) -> list[str]:
    """The job's arguments with every path under ``resources/`` (an argument, or the value of ``NAME=PATH``) taken
    from ``models_root`` instead (absolute, so that both trees read the same base model and data)."""

    def one(arg: str) -> str:
        m = re.fullmatch(r"([\w.-]+=)?resources/(.+)", arg)
        return f"{m[1] or ''}{models_root / m[2]}" if m else arg

    return [one(a) for a in args]


def train_command(jobs: Jobs, model_id: str, slot: str, seed: int, out: Path, models_root: Path,
                  extra: list[str], tree: Path = ROOT) -> list[str]:  # fmt: skip
    """The rule ``train``'s command (one thread, into ``out``), ``extra`` ``--set KEY=VALUE`` added; for an older
    ``tree``, without the ``--set`` of fields its trainer does not know (`unknown_sets`)."""
    cmd = rooted(jobs.command(model_id, slot, seed, out=str(out), threads=THREADS, python=sys.executable), models_root)
    at = cmd.index("--out")
    return known_sets_only(cmd[:at] + [a for kv in extra for a in ("--set", kv)] + cmd[at:], tree)


def known_sets_only(cmd: list[str], tree: Path) -> list[str]:
    """``cmd`` without the ``--set KEY=VALUE`` pairs of `unknown_sets`."""
    drop = set(unknown_sets(cmd, tree))
    return [a for i, a in enumerate(cmd) if i not in drop and i - 1 not in drop]


def unknown_sets(cmd: list[str], tree: Path) -> list[int]:
    """The positions in ``cmd`` of each ``--set`` whose field ``tree``'s trainer does not define (no
    ``    FIELD: type`` line in its ``bandpo/train*`` sources, where every tree keeps ``TrainConfig``)."""
    sources = _trainer_sources(tree)
    return [i for i, a in enumerate(cmd[:-1]) if a == "--set" and not re.search(
        rf"^    {re.escape(cmd[i + 1].split('=', 1)[0])}: ", sources, re.M)]  # fmt: skip


@functools.cache  # read once per tree, not once per job
def _trainer_sources(tree: Path) -> str:
    package = tree / "bandpo"
    return "\n".join(f.read_text() for f in [*package.glob("train*/**/*.py"), *package.glob("train*.py")])


def _knows_backend(tree: Path, backend: str) -> bool:
    """Whether ``tree``'s code names the scoring backend ``backend`` (lm-eval's hf is known to every tree)."""
    return backend == "hf" or any(f'"{backend}"' in f.read_text() for f in (tree / "bandpo").rglob("*.py"))


def eval_command(jobs: Jobs, tree: Path, model_id: str, slot: str, seed: int, model: Path, out: Path,
                 models_root: Path) -> list[str]:  # fmt: skip
    """The scoring rule's command for one trained model, with ``tree``'s entry point and lm-eval task folder: the
    arguments of `Jobs.eval_args` up to its run folders, then this run's (``--run MODEL OUT SEED``). A tree that
    does not know the config's backend (``bandpo-tiny`` is newer than ``5bd8c05``) scores with lm-eval's ``hf``."""
    args = jobs.eval_args(model_id, slot, [seed])
    args = rooted(args[: args.index("--run")], models_root)
    args[args.index("--include-path") + 1] = str(tasks_dir(tree))
    if "--backend" in args and not _knows_backend(tree, args[args.index("--backend") + 1]):
        args[args.index("--backend") + 1] = "hf"  # an older tree scores with lm-eval's hf backend, as it did
    return [sys.executable, "-m", entry_module(tree, "bandpo.score"), *args, "--threads", str(THREADS),
            "--run", str(model), str(out), str(seed)]  # fmt: skip


def checked_jobs(ap: argparse.ArgumentParser, args: argparse.Namespace, seeds) -> tuple[Jobs, Path]:
    """The `Jobs` of ``args.config`` and the resolved ``args.models_root``, after checking (through ``ap.error``)
    that the config exists, ``args.model_id`` is one of its models, ``args.entry`` a method entry of its main
    experiment, and that the base models of ``seeds`` and the entry's data are under the models root."""
    if not (ROOT / args.config).is_file():
        ap.error(f"--config {args.config}: not a file")
    jobs = Jobs(validate_config(load_yaml(ROOT / args.config), root=ROOT), ROOT)
    if args.model_id not in jobs.models:
        ap.error(f"--model-id {args.model_id!r}: not a model of {args.config} ({', '.join(jobs.models)})")
    if args.entry not in jobs.slots or args.entry not in jobs.entries:
        ap.error(f"--entry {args.entry!r}: not a method entry of {args.config}'s main experiment")
    root = Path(args.models_root).resolve()
    needed = [jobs.model_dir(args.model_id, s) for s in seeds] + [jobs.data_dir(jobs.xp_of(args.entry)["data"])]
    missing = [p for p in rooted(list(dict.fromkeys(needed)), root) if not Path(p).is_dir()]  # one model per size
    if missing:
        ap.error(f"--models-root {args.models_root}: missing {', '.join(missing)} (build them with the DAG)")
    return jobs, root


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
    ap.add_argument("--set", action="append", default=[], help="extra --set KEY=VALUE for both trainers")
    ap.add_argument("--this-set", action="append", default=[], help="extra --set KEY=VALUE for this tree's trainer")
    ap.add_argument("--parallel", type=int, default=1, help="N training jobs at once (seeds seed..seed+N-1)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.parallel < 1:
        ap.error("--repeats and --parallel must be >= 1")
    seeds = range(args.seed, args.seed + args.parallel)
    jobs, root = checked_jobs(ap, args, seeds)
    resolve(args.base_commit)  # an unknown commit fails here, before anything runs
    env = {**jobs.env(), "OMP_NUM_THREADS": str(THREADS)}
    task = jobs.tasks_of(args.entry)[0]["task"]
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
        full = train_command(jobs, args.model_id, args.entry, args.seed, Path("run"), root, args.set)
        left_out = [full[i + 1] for i in unknown_sets(full, base)]
        if left_out:
            print(f"base: left out, its trainer has no such field: {', '.join(left_out)}", flush=True)
        for repeat in range(args.repeats):
            order = ["base", "this"] if repeat % 2 == 0 else ["this", "base"]
            for name in order:
                tree = trees[name]
                sets = args.set + (args.this_set if name == "this" else [])
                with tempfile.TemporaryDirectory(prefix="bandpo-runcost-") as tmp:
                    out = Path(tmp) / "run"
                    if args.parallel > 1:  # the DAG's situation: N jobs at once, training only
                        cmds = [train_command(jobs, args.model_id, args.entry, s, Path(tmp) / f"run{s}", root, sets,
                                              tree) for s in seeds]  # fmt: skip
                        wall, cpu = _timed(cmds, tree, tree_env(tree, env))
                        rows.append({"tree": name, "repeat": repeat, "wall": wall, "cpu": cpu})
                        print(f"repeat {repeat} {name:4}: {args.parallel} jobs at once, wall {wall:6.1f} s, "
                              f"CPU {cpu:6.1f} s", flush=True)  # fmt: skip
                        continue
                    cmd = train_command(jobs, args.model_id, args.entry, args.seed, out, root, sets, tree)
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
                        ecmd = eval_command(jobs, tree, args.model_id, args.entry, args.seed, out / "model",
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
