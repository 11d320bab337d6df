"""Whether a speed-up that changes the bits keeps the recipe: old code against new on several seeds, side by side.

    python benchmarks/bench_recipe_check.py --new-set old_log_probs=sampler [--base-commit COMMIT | --old-set K=V]
        [--new-env K=V] [--old-env K=V] [--seeds 0 1 2 3 4] [--model-id tiny-s] [--entry grpo] [--parallel 2]
        [--margin 1.5] [--windows 8] [--models-root resources] [--keep DIR] [--json out.json]

The two arms: "old" is this tree as it is (``--old-set KEY=VALUE``: a training setting, a `TrainConfig` field, for
it) or, with ``--base-commit``, that commit (a temporary ``git worktree``, as `bench_run_vs_base.py`: the same
settings as the flags its trainer took, less those it has no field for); "new" is this tree with ``--new-set``.
``--new-env`` / ``--old-env KEY=VALUE`` change an arm's numerics (e.g. ``--new-env MKL_CBWR=AVX2``: MKL without
STRICT): that arm's jobs run with ``BANDPO_NUMERICS=native`` and the fixed numerics' variables
(`bandpo.core.numerics.env`) with these on top, since under ``fixed`` the package resets them as a job starts.
For every seed both arms run the command of the workflow's rule ``train`` for one entry of ``config/config.yaml``
(`bandpo.plan.runs.Plan`: the model's and entry's ``train`` settings, one thread; this tree reads the run's spec
file) and then score the trained model as the eval rule does (``python -m bandpo.score``: lm-eval, the entry's
task, k samples).
Jobs run ``--parallel`` at a time, the old and the new job of a seed side by side (the DAG runs two jobs on two
cores), so both arms meet the same machine.

It prints, and ``--json`` keeps:

- speed: the sum over seeds of the runs' training time (``step_seconds``), old / new, and the same for each job's
  wall and CPU time (the job process and its children, from ``os.wait4``);
- the score: final mean@k per seed and the paired difference new - old in points with its 95% t interval, and the
  verdict rule of every comparison (`bandpo.stats`, docs/statistics.md) on old - new: is the old recipe better than
  the new by at least ``--margin`` (δ, 1.5 points by default)? A group-sequential design (a look every ``--k`` seed
  pairs up to ``--n-max`` at ``--planning-sd``): "not better by δ" means the speed-up does not cost δ;
- the curves: per-step ``entropy`` and ``reward_mean`` in ``--windows`` equal windows of steps; per window the mean
  over seeds of new - old against the seed spread (the SD across seeds of the old arm's window means);
- the verdict: SAME RECIPE when the rule says the old recipe is not better by δ and every window of both curves
  differs by at most one seed spread (the curves guard both directions); RECIPE CHANGE when a curve leaves its spread
  or the rule says the old recipe is better (to be declared, measured and published as such, or not made);
  otherwise UNRESOLVED: no look has decided, rerun with the next look's seeds.

``--keep DIR`` keeps the runs in DIR/old|new/seedN (by default a temporary folder, removed at the end); a job whose
folder holds its ``job.json`` (written when its scoring has finished) is not run again, its recorded times are
used: more seeds can be added to a check, and a check stopped half-way loses only the jobs that were running.

What it checks is the definition of "changes nothing that matters" of benchmarks/README.md ("Speed-ups that
change the bits"). Needs the base models and data the DAG builds (``resources/``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _worktree import base_worktree, resolve, tree_env
from bench_run_vs_base import checked_plan, checked_sets, eval_command, train_command

from bandpo.stats.design import SequentialDesign, plan_design
from bandpo.stats.rule import BETTER, NOT_BETTER, POINTS, decide

ROOT = Path(__file__).resolve().parents[1]
CURVES = ("entropy", "reward_mean")


def _run_all(jobs: list[dict], parallel: int) -> None:
    """Run ``jobs`` (each: ``cmds`` run one after another, ``cwd``, ``env``), ``parallel`` at a time, in order;
    records per job ``wall`` and ``cpu`` (user + system of each process and its children, from ``os.wait4``) and
    calls its ``done(job)`` after its last command."""
    waiting, running = list(jobs), {}

    def start(job: dict) -> None:
        job.setdefault("wall", 0.0)
        job.setdefault("cpu", 0.0)
        job["log"] = tempfile.TemporaryFile("w+")
        cmd = job["cmds"].pop(0)
        job["t0"] = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=job["cwd"], env=job["env"], stdout=subprocess.DEVNULL, stderr=job["log"])
        job["cmd"] = cmd
        running[proc.pid] = (proc, job)

    try:
        while waiting or running:
            while waiting and len(running) < parallel:
                start(waiting.pop(0))
            pid, status, usage = os.wait4(-1, 0)
            if pid not in running:  # pragma: no cover - a child of something else
                continue
            proc, job = running.pop(pid)
            proc.returncode = os.waitstatus_to_exitcode(status)
            job["wall"] += time.perf_counter() - job["t0"]
            job["cpu"] += usage.ru_utime + usage.ru_stime
            if proc.returncode:
                job["log"].seek(0)
                log = job["log"].read()[-3000:]
                raise SystemExit(f"failed (rc {proc.returncode}): {' '.join(job['cmd'])}\n{log}")
            job["log"].close()
            if job["cmds"]:  # the job's next command (its scoring) starts at once, in the slot it holds
                start(job)
            else:
                job["done"](job)
    finally:  # a failure or Ctrl-C: the other jobs are stopped, not left running
        for proc, _job in running.values():
            proc.terminate()
            proc.wait()


def _record(job: dict) -> None:
    """A finished job's times, into its folder's job.json (what ``--keep`` reuses) and its record."""
    job["record"].update(wall=job["wall"], cpu=job["cpu"])
    record = {"sets": job["sets"], "numerics_env": job["numerics_env"], "wall": job["wall"], "cpu": job["cpu"]}
    (job["out"] / "job.json").write_text(json.dumps(record))


def arm_env(env: dict[str, str], overrides: list[str]) -> dict[str, str]:
    """A job's environment with an arm's numerics variables (``KEY=VALUE``) on top, under ``BANDPO_NUMERICS=native``
    so that the package leaves them as set; ``env`` itself without any."""
    if not overrides:
        return env
    return {**env, "BANDPO_NUMERICS": "native", **dict(item.split("=", 1) for item in overrides)}


def score_rule(design: SequentialDesign, new_minus_old: list[float]):
    """The verdict rule (`bandpo.stats.rule.decide`) on old - new (fractions of the score, in seed order, up to the
    design's n_max): is the old recipe better than the new by at least the margin? None with fewer pairs than the
    first look's. ``new_minus_old`` in points, as printed."""
    used = [-x / POINTS for x in new_minus_old][: design.n_max]
    return decide(design, used) if len(used) >= design.k else None


def recipe_verdict(rule, curves_agree: bool) -> str:
    """SAME RECIPE: the old recipe is not better by the margin and the curves agree; RECIPE CHANGE: a curve leaves
    its spread or the old recipe is better; else UNRESOLVED (no look has decided)."""
    if rule is not None and rule.verdict == NOT_BETTER and curves_agree:
        return "SAME RECIPE"
    if not curves_agree or (rule is not None and rule.verdict == BETTER):
        return "RECIPE CHANGE"
    return "UNRESOLVED"


def windows(values: list[float], n: int) -> list[float]:
    """The means of ``values`` over ``n`` consecutive windows of (nearly) equal size."""
    bounds = [round(i * len(values) / n) for i in range(n + 1)]
    return [statistics.fmean(values[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def curve_check(old: list[list[float]], new: list[list[float]], n_windows: int) -> dict:
    """Per window: mean over seeds of new - old, and the seed spread (SD across seeds of the old arm's window
    means); ``agree`` when every window's |difference| is at most its spread."""
    w_old = [windows(c, n_windows) for c in old]
    w_new = [windows(c, n_windows) for c in new]
    rows = []
    for w in range(len(w_old[0])):
        a = [s[w] for s in w_old]
        b = [s[w] for s in w_new]
        diff = statistics.fmean(y - x for x, y in zip(a, b, strict=True))
        spread = statistics.stdev(a) if len(a) > 1 else math.nan
        rows.append({"window": w, "old": statistics.fmean(a), "new": statistics.fmean(b), "diff": diff,
                     "spread": spread})  # fmt: skip
    agree = all(math.isfinite(r["spread"]) and abs(r["diff"]) <= r["spread"] for r in rows)
    worst = max((abs(r["diff"]) / r["spread"] for r in rows if r["spread"]), default=math.nan)
    return {"windows": rows, "agree": agree, "worst": worst}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new-set", action="append", default=[], help="KEY=VALUE train setting of the new arm")
    ap.add_argument("--old-set", action="append", default=[], help="KEY=VALUE train setting of the old arm")
    ap.add_argument("--new-env", action="append", default=[], help="KEY=VALUE numerics variable of the new arm")
    ap.add_argument("--old-env", action="append", default=[], help="KEY=VALUE numerics variable of the old arm")
    ap.add_argument("--base-commit", help="the old arm runs this commit's code (a temporary worktree)")
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model-id", default="tiny-s")
    ap.add_argument("--entry", default="grpo", help="a method entry of the config's main experiment")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--parallel", type=int, default=2, help="jobs at once (default 2: the DAG on 2 cores)")
    ap.add_argument("--margin", type=float, default=1.5, help="δ, points of mean@k: does the speed-up cost this much? "
                    "(default 1.5)")  # fmt: skip
    ap.add_argument("--k", type=int, default=5, help="pairs a look of the sequential design (default 5)")
    ap.add_argument("--n-max", type=int, default=None,
                    help="the design's last look, a multiple of --k (default: the fewest that meets)")  # fmt: skip
    ap.add_argument("--planning-sd", type=float, default=2.7,
                    help="the design's planning SD of the paired differences, points (default 2.7)")  # fmt: skip
    ap.add_argument("--windows", type=int, default=8, help="windows of steps for the curves (default 8)")
    ap.add_argument("--models-root", default="resources", help="folder holding models/ and data/ (default resources)")
    ap.add_argument("--keep", help="keep the runs here; finished ones are reused (default: a temporary folder)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if len(set(args.seeds)) < 2 or len(set(args.seeds)) != len(args.seeds):
        ap.error("--seeds: at least 2 distinct seeds (the issue asks for 5)")
    if args.parallel < 1 or args.windows < 1 or not args.margin > 0:
        ap.error("--parallel and --windows must be >= 1, --margin > 0")
    if not args.base_commit and args.new_set == args.old_set and args.new_env == args.old_env:
        ap.error("the two arms are the same: give --new-set, --old-set, --new-env, --old-env or --base-commit")
    for item in (*args.new_env, *args.old_env):
        if "=" not in item or not item.split("=", 1)[0]:
            ap.error(f"--new-env/--old-env {item!r}: expected KEY=VALUE")
    plan, root = checked_plan(ap, args, args.seeds)
    new_sets = checked_sets(ap, plan, args, "--new-set", args.new_set)
    old_sets = checked_sets(ap, plan, args, "--old-set", args.old_set)
    if args.base_commit:
        resolve(args.base_commit)
    env = {**plan.env(), "OMP_NUM_THREADS": "1"}
    task = plan.tasks_of(args.entry)[0]["task"]

    with contextlib.ExitStack() as stack:
        old_tree = stack.enter_context(base_worktree(args.base_commit)) if args.base_commit else ROOT
        if args.keep:
            tmp = Path(args.keep).resolve()
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bandpo-recipe-")))
        arms = {"old": (old_tree, args.old_set, old_sets, args.old_env), "new": (ROOT, args.new_set, new_sets,
                                                                                   args.new_env)}  # fmt: skip
        old_name = args.base_commit or "this tree"
        print(f"{args.model_id} {args.entry}, seeds {args.seeds}, {args.parallel} jobs at once; old = {old_name} "
              f"{args.old_set} {args.old_env}, new = this tree {args.new_set} {args.new_env}", flush=True)  # fmt: skip
        work, todo = [], []
        for seed in args.seeds:
            for arm, (tree, sets, settings, envs) in arms.items():
                out = tmp / arm / f"seed{seed}"
                job = {"arm": arm, "seed": seed, "out": out, "sets": sets, "numerics_env": envs}
                work.append(job)
                done = json.loads((out / "job.json").read_text()) if (out / "job.json").is_file() else None
                if done and done["sets"] == sets and done.get("numerics_env", []) == envs:
                    job.update(done)
                    continue
                shutil.rmtree(out, ignore_errors=True)  # a job stopped half-way starts again
                cmds = [
                    train_command(plan, args.model_id, args.entry, seed, out, root, settings, tree),
                    eval_command(plan, tree, args.model_id, args.entry, seed, out / "model", out / "eval", root),
                ]
                todo.append({**job, "cmds": cmds, "cwd": tree, "env": tree_env(tree, arm_env(env, envs)), "record": job,
                             "done": _record})  # fmt: skip
        if len(todo) < len(work):
            print(f"reusing {len(work) - len(todo)} finished jobs of {tmp}", flush=True)
        _run_all(todo, args.parallel)
        for job in work:
            out = job.pop("out")
            metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
            job["steps_s"] = sum(m["step_seconds"] for m in metrics)
            job["curves"] = {c: [m[c] for m in metrics] for c in CURVES}
            summary = json.loads((out / "eval" / f"{task}.json").read_text())
            job["k"] = summary["k"]
            job["score"] = summary["metrics"][f"mean@{summary['k']}"]

    by = {arm: sorted((j for j in work if j["arm"] == arm), key=lambda j: j["seed"]) for arm in arms}
    print("\nspeed, old / new (sums over seeds):")
    speed = {}
    for key in ("steps_s", "wall", "cpu"):
        o, n = (sum(j[key] for j in by[a]) for a in ("old", "new"))
        speed[key] = o / n
        print(f"  {key:8} old {o:7.1f} s  new {n:7.1f} s  {o / n:.2f}x")
    k = work[0]["k"]
    print(f"\nfinal mean@{k} (points) per seed:")
    d = []
    for o, n in zip(by["old"], by["new"], strict=True):
        d.append(100 * (n["score"] - o["score"]))
        print(f"  seed {o['seed']}: old {100 * o['score']:6.2f}  new {100 * n['score']:6.2f}  new - old {d[-1]:+6.2f}")
    if args.n_max is None:
        design = plan_design(args.margin / POINTS, args.k, args.planning_sd / POINTS)
    else:
        design = SequentialDesign(args.margin / POINTS, args.k, args.n_max, args.planning_sd / POINTS)
    rule = score_rule(design, d)
    if rule is None:
        print(f"  {len(d)} pairs: fewer than the first look's {design.k}")
    else:
        print(f"  paired difference new - old {-POINTS * rule.estimate:+.2f} points over {rule.n} pairs (look "
              f"{rule.look}), 95% t interval [{-POINTS * rule.ci_high:+.2f}, {-POINTS * rule.ci_low:+.2f}]; is the old "
              f"recipe better than the new by at least {args.margin} points? {rule.label}")  # fmt: skip
    curves = {}
    for c in CURVES:
        curves[c] = curve_check([j["curves"][c] for j in by["old"]], [j["curves"][c] for j in by["new"]],
                                args.windows)  # fmt: skip
        print(f"\n{c} in {len(curves[c]['windows'])} windows of steps (mean over seeds; spread = SD across seeds, "
              f"old arm):")  # fmt: skip
        for r in curves[c]["windows"]:
            print(f"  window {r['window']}: old {r['old']:.4f} new {r['new']:.4f} diff {r['diff']:+.4f} "
                  f"spread {r['spread']:.4f}{'' if abs(r['diff']) <= r['spread'] else '  <- outside'}")  # fmt: skip
        print(f"  {'agree' if curves[c]['agree'] else 'DO NOT agree'} within the seed spread (worst |diff| / spread "
              f"{curves[c]['worst']:.2f})")  # fmt: skip
    curves_agree = all(v["agree"] for v in curves.values())
    verdict = recipe_verdict(rule, curves_agree)
    print(f"\nverdict: {verdict}")
    if verdict == "UNRESOLVED" and rule is not None and rule.next_n:
        print(f"  no look has decided: rerun with the seeds of the next look ({rule.next_n} pairs)")
    if args.json:
        tests = None if rule is None else dataclasses.asdict(rule)
        record = {"args": vars(args), "speed": speed, "differences": d, "rule": tests, "curves": curves,
                  "runs": work, "verdict": verdict}  # fmt: skip
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
