"""verl's trainer on CPU, two settings of the CPU profile side by side: the replay buffer, the rollout server, or any
one setting (``--try``).

``--compare buffer`` (default): verl 0.9.1's sync trainer waits for a step's rollouts by polling its replay buffer
every 2 s, so the generation phase of a step (``timing_s/gen``) lasts a whole number of polls;
``config/verl-cpu.yaml`` selects the suite's subclass that polls every 0.05 s (``trainer.v1.sampler.custom_sampler``).
The baseline runs without those two overrides (verl's buffer).

``--compare rollout``: `bandpo.verl.hf_rollout.HFRolloutServer` as it was before it served a step as one batch with the
suite's sampler (transformers ``generate``, a 0.01 s quiet window: ``engine_kwargs.hf.sampler=generate``,
``batch_wait_s=0.01``), against the profile's server (a step's 256 requests as one batch, the suite's sampler).

``--try KEY=VALUE``: the profile as it is (the baseline) against the profile with one setting changed, KEY a field
of the profile's ``train:`` block (``ppo_max_token_len_per_gpu=16384``) or a Hydra key of its ``extra_overrides``,
whose entry is replaced (``actor_rollout_ref.rollout.agent.num_workers=2``) or, if absent, added. It is how a
candidate setting is measured before it goes into the profile.

This script trains the same entry and seed of the CPU profile twice per repeat, baseline and candidate,
alternating, each a short run of the DAG's own ``train_verl`` job (``config/verl-cpu.yaml`` shrunk to one run of
``--steps`` steps, in a work folder that links the repository's ``resources/``), and prints per run the medians
over steps 2.. (step 1 warms up) of verl's ``timing_s/gen`` (generation phase), ``timing_s/old_log_prob``,
``timing_s/update_actor`` and ``timing_s/step``, then the ratios baseline / candidate::

    python benchmarks/bench_verl_poll.py [--compare buffer|rollout | --try KEY=VALUE] [--entry grpo] [--seed 0]
        [--steps 8] [--repeats 2] [--work /tmp/verl-poll]

Needs the profile's base model (``resources/models/tiny-s/seed{seed}``) and data, built by the embedded DAG, and the
``verl-cpu`` extra. Each run takes 2-4 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SAMPLER = "trainer.v1.sampler.custom_sampler."


ROLLOUT_BEFORE = ["+actor_rollout_ref.rollout.engine_kwargs.hf.sampler=generate",
                  "+actor_rollout_ref.rollout.engine_kwargs.hf.batch_wait_s=0.01"]  # fmt: skip


def config(
    entry: str, seed: int, steps: int, profile: bool, compare: str = "buffer", change: str | None = None
) -> dict:
    """config/verl-cpu.yaml reduced to one run; without ``profile``, the baseline of ``compare``. With ``change``
    (``--try``'s KEY=VALUE), the profile (``profile`` False) or the profile with that setting (True)."""
    cfg = yaml.safe_load((ROOT / "config" / "verl-cpu.yaml").read_text())
    cfg["profile"] = f"verl-{'try' if change else compare}-{'profile' if profile else 'baseline'}"
    cfg["methods"] = [m for m in cfg["methods"] if m["id"] == entry]
    if not cfg["methods"]:
        raise SystemExit(f"entry {entry!r} is not in config/verl-cpu.yaml")
    cfg["seeds"] = [seed]
    cfg["train"]["steps"] = steps
    cfg.pop("beside", None)
    overrides = cfg["train"]["extra_overrides"]
    if not any(o.startswith(SAMPLER) for o in overrides):
        raise SystemExit("config/verl-cpu.yaml does not select the polling replay buffer")
    if change is not None:
        if profile:
            with_change(cfg["train"], change)
    elif not profile and compare == "buffer":
        cfg["train"]["extra_overrides"] = [o for o in overrides if not o.startswith(SAMPLER)]
    elif not profile:
        cfg["train"]["extra_overrides"] = overrides + ROLLOUT_BEFORE
    return cfg


def with_change(verl: dict, change: str) -> None:
    """Apply ``--try``'s KEY=VALUE to the profile's ``train:`` block (see the module docstring)."""
    key, sep, value = change.partition("=")
    if not sep or not key or not value:
        raise SystemExit(f"--try wants KEY=VALUE, got {change!r}")
    if key in verl and key != "extra_overrides":
        verl[key] = yaml.safe_load(value)  # a VerlRun field: typed as YAML reads it
        return
    overrides = verl["extra_overrides"]
    hits = [i for i, o in enumerate(overrides) if o.lstrip("+~").partition("=")[0] == key.lstrip("+~")]
    if len(hits) > 1:
        raise SystemExit(f"--try {key}: the profile sets it {len(hits)} times")
    if hits:
        overrides[hits[0]] = change
    else:
        overrides.append(change)


def run(work: Path, cfg: dict, entry: str, seed: int) -> list[dict]:
    """Train one run through the DAG; its per-step verl timings."""
    path = work / f"{cfg['profile']}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    out = work / "results" / cfg["profile"] / "runs" / cfg["models"][0]["id"] / entry / f"seed{seed}"
    shutil.rmtree(out, ignore_errors=True)
    target = out / "verl_metrics.jsonl"
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(work), "--cores", "2",
           "--configfile", str(path), "--rerun-triggers", "mtime", "--", str(target.relative_to(work))]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
    finally:
        subprocess.run(["ray", "stop", "--force"], capture_output=True)
    if proc.returncode != 0:
        raise SystemExit((proc.stdout + proc.stderr)[-3000:])
    return [json.loads(line)["data"] for line in target.read_text().splitlines()]


TIMINGS = {"gen": "generation phase", "old_log_prob": "old log-prob pass", "update_actor": "actor update",
           "step": "step"}  # fmt: skip
"""verl's ``timing_s/<key>`` per step, printed as medians over steps 2.."""

NAMES = {  # (baseline, profile) per --compare
    "buffer": ("verl's replay buffer (2 s)", "polling 0.05 s"),
    "rollout": ("generate, 0.01 s window", "one batch, suite sampler"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pick = ap.add_mutually_exclusive_group()
    pick.add_argument("--compare", choices=sorted(NAMES), default="buffer")
    pick.add_argument("--try", dest="change", metavar="KEY=VALUE", help="the profile against the profile with this")
    ap.add_argument("--entry", default="grpo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", default="/tmp/verl-poll", help="work folder (its resources/ links the repository's)")
    args = ap.parse_args(argv)
    if args.steps < 3 or args.repeats < 1:
        raise SystemExit("--steps must be >= 3 and --repeats >= 1")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "resources").exists():
        (work / "resources").symlink_to(ROOT / "resources")
    names = ("profile", f"profile, {args.change}") if args.change else NAMES[args.compare]
    if args.change:
        config(args.entry, args.seed, args.steps, True, change=args.change)  # a bad KEY=VALUE fails before any run
    medians: dict[bool, list[tuple[float, ...]]] = {False: [], True: []}
    what = "setting" if args.change else args.compare
    print(f"| repeat | {what} | gen s | old log-prob s | update s | step s |\n|---|---|---:|---:|---:|---:|")
    for r in range(args.repeats):
        for profile in (False, True) if r % 2 == 0 else (True, False):
            cfg = config(args.entry, args.seed, args.steps, profile, args.compare, args.change)
            steps = run(work, cfg, args.entry, args.seed)[1:]
            row = tuple(statistics.median(s[f"timing_s/{k}"] for s in steps) for k in TIMINGS)
            medians[profile].append(row)
            print(f"| {r + 1} | {names[profile]} | " + " | ".join(f"{v:.2f}" for v in row) + " |", flush=True)
    for i, what in enumerate(TIMINGS.values()):
        base = statistics.median(m[i] for m in medians[False])
        fast = statistics.median(m[i] for m in medians[True])
        print(f"{what}: {names[0]} {base:.2f} s, {names[1]} {fast:.2f} s: {base / fast:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
