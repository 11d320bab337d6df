"""Cost of the fixed numerics (`bandpo.core.numerics`): fixed against native, side by side in one run.

    python benchmarks/bench_numerics.py [--config config/config.yaml] [--model-id tiny-s] [--build-steps 150]
        [--train-steps 8] [--repeats 3] [--json out.json]

Times two jobs as the workflow runs them (`bandpo.plan.runs.Plan`: the rules' command lines and environment,
one thread) under five numerics, alternating within each repeat (the order reversed on odd repeats):

- ``fixed``: ``BANDPO_NUMERICS=fixed``, the default (MKL's AVX2 reproducibility branch with STRICT, ATen's AVX2
  kernels, oneDNN capped at AVX2; on a CPU that is not Intel's, the preloaded library that lets MKL honour the
  branch);
- ``native``: ``BANDPO_NUMERICS=native``, this machine's own kernels;
- ``native-avx2``: native with MKL and ATen capped at AVX2, what an AVX2-only machine runs natively (on an
  AVX-512 machine: the part of the cost that is only the narrower vectors);
- ``fixed-nostrict``: fixed's settings with ``MKL_CBWR=AVX2`` (no STRICT: matrix products may then depend on the
  thread count), the price of STRICT;
- ``compatible``: fixed's settings with ``MKL_CBWR=COMPATIBLE``, MKL's SSE2 branch, the one it honours on every
  vendor's CPU without a preloaded library: the alternative to that library, not taken.

The variant arms run with ``BANDPO_NUMERICS=native`` and the variables set explicitly: under ``fixed`` the package
would reset them to `bandpo.core.numerics.FIXED` as the job starts (before 2026-12-04 ``fixed-nostrict`` did run
``fixed``'s settings, so its figures then measured nothing).

The jobs:

- a base-model build (``python -m bandpo.models build``, the model's size, ``--build-steps`` pretraining steps);
- a training run (rule ``train``'s command for the default GRPO entry, ``python -m bandpo.train --spec FILE``,
  ``--train-steps`` steps) from the built base model ``resources/models/<model-id>`` (build it first: ``snakemake
  --cores all resources/models/tiny-s/config.json``).

Prints per job the wall seconds, CPU seconds and, for training, the seconds spent in steps (``train_seconds_total``
of run.json), their medians and the ratios of each arm to native. fixed / native above 1 is what the same bits on
every CPU cost on this machine; fixed / native-avx2 what they cost where AVX2 is the widest instruction set. Also
prints whether the arms' runs give the same numbers as fixed (they need not: on a CPU whose native kernels are not
the AVX2 ones they differ in the last bits).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _timing import timed_process

from bandpo.core import numerics
from bandpo.plan.runs import Plan
from bandpo.plan.validate import load_yaml, validate_config

ROOT = Path(__file__).resolve().parents[1]
MODES = ("fixed", "native", "native-avx2", "fixed-nostrict", "compatible")
ARMS = {  # arm -> (the numerics it starts from, variables changed; a changed fixed runs as native, see above)
    "fixed": ("fixed", {}),
    "native": ("native", {}),
    "native-avx2": ("native", {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}),
    "fixed-nostrict": ("fixed", {"MKL_CBWR": "AVX2"}),
    "compatible": ("fixed", {"MKL_CBWR": "COMPATIBLE"}),
}


def mode_env(plan: Plan, arm: str) -> dict[str, str]:
    """The job's environment (`Plan.env`, one thread) under the numerics of ``arm`` (`ARMS`)."""
    env = {**os.environ, **plan.env(), "OMP_NUM_THREADS": "1"}
    for key in (*numerics.FIXED, "MKL_ENABLE_INSTRUCTIONS"):
        env.pop(key, None)
    env.pop("LD_PRELOAD", None)
    mode, extra = ARMS[arm]
    env = {**env, **numerics.env(mode), **extra}
    if mode == "fixed" and extra:  # under fixed the package would reset the changed variables as the job starts
        env[numerics.MODE_ENV] = "native"
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model-id", default="tiny-s")
    ap.add_argument("--entry", default="grpo")
    ap.add_argument("--build-steps", type=int, default=150)
    ap.add_argument("--train-steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the per-job figures here")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.build_steps < 1 or args.train_steps < 1:
        ap.error("--repeats, --build-steps and --train-steps must be >= 1")
    cfg = validate_config(load_yaml(ROOT / args.config), root=ROOT)
    plan = Plan(cfg, ROOT)
    if args.model_id not in plan.models or plan.models[args.model_id]["source"] != "tiny":
        ap.error(f"--model-id {args.model_id!r}: not a tiny model of {args.config}")
    if plan.trainer != "local" or (args.model_id, args.entry, 0) not in plan.train_specs:
        ap.error(f"--entry {args.entry!r}: {args.config} trains no local run of it on {args.model_id}, seed 0")
    base = plan.model_dir(args.model_id, 0)
    if not (ROOT / base / "config.json").is_file():
        ap.error(f"build the base model first: snakemake --cores all {base}/config.json")
    data = plan.pretrain_data(args.model_id)

    rows: list[dict] = []
    finals: dict[str, set] = {m: set() for m in MODES}
    print(f"{args.model_id}: build {args.build_steps} steps, train {args.train_steps} steps, one thread, "
          f"{args.repeats} repeat(s); load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"{'job':6} {'mode':14} {'wall s':>8} {'CPU s':>8} {'steps s':>8}")
    with tempfile.TemporaryDirectory(prefix="bandpo-numerics-") as tmp:
        for repeat in range(args.repeats):
            order = MODES if repeat % 2 == 0 else MODES[::-1]
            for mode in order:
                env = mode_env(plan, mode)
                out = Path(tmp) / f"{mode}{repeat}"
                build = [sys.executable, "-m", "bandpo.models", "build", *plan.tiny_build_args(args.model_id, 0)]
                build[build.index("--out") + 1] = str(out / "model")
                build += ["--data", data, "--steps", str(args.build_steps), "--threads", "1", "--no-progress"]
                wall, cpu = timed_process(build, ROOT, env)
                weights = hashlib.sha256((out / "model" / "model.safetensors").read_bytes()).hexdigest()
                rows.append({"job": "build", "mode": mode, "repeat": repeat, "wall_s": wall, "cpu_s": cpu})
                print(f"{'build':6} {mode:14} {wall:8.2f} {cpu:8.2f}", flush=True)
                train = plan.train_command(args.model_id, args.entry, 0, out / "spec.json", python=sys.executable,
                                           out=str(out / "run"), threads=1, steps=args.train_steps)  # fmt: skip
                wall, cpu = timed_process(train, ROOT, env)
                summary = json.loads((out / "run" / "run.json").read_text())
                steps_s = summary["train_seconds_total"]
                metrics = (out / "run" / "metrics.jsonl").read_text().splitlines()
                last = {k: v for k, v in json.loads(metrics[-1]).items() if k in ("entropy", "reward_mean", "loss")}
                finals[mode].add(json.dumps({"base_sha256": weights, **last}, sort_keys=True))
                rows.append({"job": "train", "mode": mode, "repeat": repeat, "wall_s": wall, "cpu_s": cpu,
                             "steps_s": steps_s})  # fmt: skip
                print(f"{'train':6} {mode:14} {wall:8.2f} {cpu:8.2f} {steps_s:8.2f}", flush=True)

    print("medians, and each arm / native:")
    print(f"  {'job':6} {'figure':8} " + " ".join(f"{m:>15}" for m in MODES) + "   " +
          " ".join(f"{m + '/native':>22}" for m in MODES[2:] + MODES[:1]))  # fmt: skip
    for job, keys in (("build", ("wall_s", "cpu_s")), ("train", ("wall_s", "cpu_s", "steps_s"))):
        for key in keys:
            med = {m: statistics.median(r[key] for r in rows if r["job"] == job and r["mode"] == m) for m in MODES}
            ratios = " ".join(f"{med[m] / med['native']:22.3f}" for m in MODES[2:] + MODES[:1])
            print(f"  {job:6} {key:8} " + " ".join(f"{med[m]:15.2f}" for m in MODES) + "   " + ratios)
    if med["native-avx2"] > 0:
        print(f"fixed / native-avx2 (the cost where AVX2 is the widest set), train steps: "
              f"{med['fixed'] / med['native-avx2']:.3f}")  # fmt: skip
    if med["fixed"] > 0:
        print(f"compatible / fixed (MKL's SSE2 branch instead of the preloaded library), train steps: "
              f"{med['compatible'] / med['fixed']:.3f}")  # fmt: skip
    for mode in MODES:
        if len(finals[mode]) != 1:
            print(f"WARNING: the {mode} runs did not repeat their own numbers: {sorted(finals[mode])}")
    for mode in MODES[1:]:
        same = finals[mode] == finals["fixed"]
        print(f"base model's bytes and final step's numbers, {mode} vs fixed: {'the same' if same else 'different'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
