"""Cost of one default run (training + its scoring) in this tree against another checkout, side by side.

    python benchmarks/bench_run_vs_base.py --base-tree ../base-5bd8c05 [--model-id tiny-s] [--entry grpo]
        [--seed 0] [--repeats 2] [--no-eval] [--parallel N] [--models-root resources] [--json out.json]

Runs, alternately (base first on even repeats, this tree first on odd ones) and never at the same time, the
command the workflow's ``train_local`` rule runs for one model x entry x seed of ``config/config.yaml`` (the
model's and entry's ``train`` settings applied, one thread), each with ``python -m`` from its own tree
(``PYTHONPATH`` set to the tree, so an editable install elsewhere does not interfere), on the same base model and
data; then, unless ``--no-eval``, the scoring of the trained model as the workflow's eval rule does it
(``python -m bandpo.evaluate``, lm-eval, the config's tasks and batch size), alone in its lm-eval process (so the
whole start-up of lm-eval is charged to the run: a group of 3 seeds shares it; the ratio is conservative for a
change that does not touch the start-up). Prints per run wall seconds, CPU seconds (the child processes' user +
system time, which other jobs on the machine disturb less than wall time) and the ratios base / this tree per
repeat and as medians, and whether the two trees' runs of the seed logged the same numbers.

``--parallel N`` times the DAG's situation instead, N training jobs at once on N cores (seeds ``seed`` ..
``seed + N - 1``, training only): per tree the wall time of the N jobs together and their summed CPU time.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bandpo import sweep  # noqa: E402


def _env(tree: Path) -> dict:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONHASHSEED": "0",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(tree),
    }
    return env


def _timed(cmds: list[list[str]], cwd: Path) -> tuple[float, float]:
    """Wall time of ``cmds`` run at once (each a process; one for a single job), and their summed CPU time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:  # a file, not a pipe: no job blocks on output nobody reads yet
        procs = [subprocess.Popen(c, cwd=cwd, env=_env(cwd), stdout=subprocess.DEVNULL, stderr=log) for c in cmds]
        codes = [p.wait() for p in procs]
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if any(codes):
            log.seek(0)
            failed = [shlex.join(c) for c, rc in zip(cmds, codes, strict=True) if rc]
            raise SystemExit(f"failed (rc {max(codes)}) in {cwd}: {'; '.join(failed)}\n{log.read()[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-tree", required=True, type=Path, help="a checkout of the commit to compare against")
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model-id", default="tiny-s")
    ap.add_argument("--entry", default="grpo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--models-root", default="resources", help="folder holding models/ and data/ (default resources)")
    ap.add_argument("--no-eval", action="store_true", help="time training only")
    ap.add_argument("--set", action="append", default=[], help="extra --set KEY=VALUE for both trainers")
    ap.add_argument("--parallel", type=int, default=1, help="N training jobs at once (seeds seed..seed+N-1)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    cfg = sweep.validate_config(sweep.load_yaml(ROOT / args.config), root=ROOT)
    entry = sweep.by_id(cfg["methods"])[args.entry]
    root = Path(args.models_root).resolve()
    model_dir = root / Path(sweep.model_path(cfg, args.model_id, args.seed)).relative_to("resources")
    data_dir = root / "data" / cfg["train_data"][0]
    ev = cfg["eval"]
    trees = {"base": args.base_tree.resolve(), "this": ROOT}
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    print(
        f"{args.model_id} {args.entry} seed {args.seed}, one thread, load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f}; base = {trees['base']}, this = {ROOT}",
        flush=True,
    )

    def train_cmd(seed: int, out: Path) -> list[str]:
        """The workflow's train_local command for this model, entry and seed (one thread)."""
        params = json.dumps(entry.get("params") or {}, sort_keys=True)
        cmd = [sys.executable, "-m", "bandpo.train", "--model", str(model_dir), "--data", str(data_dir),
               "--method", entry["method"], "--params", params, "--seed", str(seed)]  # fmt: skip
        cmd += sweep.set_args(sweep.train_overrides(cfg, args.model_id, args.entry))
        cmd += [a for s in args.set for a in ("--set", s)]
        return cmd + ["--out", str(out), "--threads", "1", "--no-progress"]

    rows = []
    for repeat in range(args.repeats):
        order = ["base", "this"] if repeat % 2 == 0 else ["this", "base"]
        for name in order:
            tree = trees[name]
            with tempfile.TemporaryDirectory(prefix="bandpo-runcost-") as tmp:
                out = Path(tmp) / "run"
                if args.parallel > 1:  # the DAG's situation: N jobs at once, training only
                    cmds = [train_cmd(args.seed + i, Path(tmp) / f"run{i}") for i in range(args.parallel)]
                    wall, cpu = _timed(cmds, tree)
                    rows.append({"tree": name, "repeat": repeat, "wall": wall, "cpu": cpu})
                    print(f"repeat {repeat} {name:4}: {args.parallel} jobs at once, wall {wall:6.1f} s, "
                          f"CPU {cpu:6.1f} s", flush=True)  # fmt: skip
                    continue
                cmd = train_cmd(args.seed, out)
                train_wall, train_cpu = _timed([cmd], tree)
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
                    model_args = json.dumps(ev["model_args"], sort_keys=True)
                    ecmd = [
                        sys.executable,
                        "-m",
                        "bandpo.evaluate",
                        "--include-path",
                        "bandpo/lm_eval_tasks",
                        "--backend",
                        ev["backend"],
                        "--model-args",
                        model_args,
                        "--batch-size",
                        str(ev["batch_size"]),
                        "--threads",
                        "1",
                        "--run",
                        str(out / "model"),
                        str(Path(tmp) / "eval"),
                        str(args.seed),
                    ]
                    for t in cfg["experiments"]["main"]["eval_tasks"]:
                        ecmd += ["--task", f"{t['task']}={root / 'data' / t['data'] / 'test.jsonl'}"]
                    r["eval_wall"], r["eval_cpu"] = _timed([ecmd], tree)
                    task = cfg["experiments"]["main"]["eval_tasks"][0]["task"]
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
