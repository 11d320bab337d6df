"""A scoring job under lm-eval's ``hf`` backend against the suite's own model class (``bandpo-tiny``), side by side.

    python benchmarks/bench_score_backend.py [--config config/config.yaml] [--model-id tiny-s] [--seeds 0 1 2]
        [--repeats 3] [--json out.json]

Runs the command the workflow's scoring rule runs for the base model of ``--model-id`` (`bandpo.plan.runs.Plan`:
``python -m bandpo.score --spec FILE`` with the rule's job and environment, one thread; one lm-eval process scoring
the given seeds, as ``eval.group_seeds`` groups them), once with backend ``hf`` and once with ``bandpo-tiny``
(`bandpo.score.tiny_lm`), alternating within each repeat (the order reversed on odd repeats), each into a
temporary folder. Prints per job the wall and CPU seconds and the start-up the job itself recorded (lm-eval ready:
``seconds.process_startup`` of its summaries), their medians and the ratios hf / bandpo-tiny, and whether the two
backends wrote the same completions (the samples files' responses) and metrics for every seed.

Needs the base model and data the DAG builds (``snakemake --cores all resources/models/tiny-s/config.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _timing import timed_process

from bandpo.core.files import read_jsonl
from bandpo.plan.runs import Plan
from bandpo.plan.validate import load_yaml, validate_config

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("hf", "bandpo-tiny")


def score_command(plan: Plan, model_id: str, seeds: list[int], backend: str, out: Path) -> list[str]:
    """The scoring rule's command for the base model's ``seeds`` (`Plan.eval_command`), with ``backend``, writing
    under ``out`` (each seed into ``out/seed<s>``; its spec file ``OUT.spec.json``)."""
    job = plan.eval_spec(model_id, "base", seeds)
    runs = [dataclasses.replace(r, out_dir=str(out / f"seed{r.seed}")) for r in job.runs]
    return plan.eval_command(model_id, "base", seeds, f"{out}.spec.json", python=sys.executable, runs=runs,
                             backend=backend, threads=1)  # fmt: skip


def outputs(out: Path, seeds: list[int]) -> dict:
    """Per seed: every sample's responses and the summary's metrics (what must not depend on the backend)."""
    got = {}
    for s in seeds:
        folder = out / f"seed{s}"
        summary = json.loads((folder / "tiny_math.json").read_text())
        got[s] = {"resps": [r["resps"] for r in read_jsonl(folder / "tiny_math.samples.jsonl")],
                  "metrics": summary["metrics"], "startup": summary["seconds"]["process_startup"]}  # fmt: skip
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model-id", default="tiny-s")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the per-job figures here")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    cfg = validate_config(load_yaml(ROOT / args.config), root=ROOT)
    cfg["eval"]["backend"] = "hf"  # any; each job sets its own
    plan = Plan(cfg, ROOT)
    if args.model_id not in plan.models or plan.models[args.model_id]["source"] != "tiny":
        ap.error(f"--model-id {args.model_id!r}: not a tiny model of {args.config}")
    if not (ROOT / plan.model_dir(args.model_id, args.seeds[0]) / "config.json").is_file():
        ap.error(f"build the base model first: snakemake --cores all {plan.model_dir(args.model_id, 0)}/config.json")
    env = {**os.environ, **plan.env(), "OMP_NUM_THREADS": "1"}
    rows, seen = [], {}
    print(f"{args.model_id} base model, seeds {args.seeds}, one thread, {args.repeats} repeat(s); load average "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"{'backend':12} {'wall s':>8} {'CPU s':>8} {'start-up s':>10}")
    with tempfile.TemporaryDirectory(prefix="bandpo-score-") as tmp:
        for repeat in range(args.repeats):
            for backend in BACKENDS if repeat % 2 == 0 else BACKENDS[::-1]:
                out = Path(tmp) / f"{backend}{repeat}"
                wall, cpu = timed_process(score_command(plan, args.model_id, args.seeds, backend, out), ROOT, env)
                got = outputs(out, args.seeds)
                startup = statistics.mean(g["startup"] for g in got.values())
                seen.setdefault(backend, []).append(
                    {s: {k: g[k] for k in ("resps", "metrics")} for s, g in got.items()}
                )
                rows.append({"backend": backend, "repeat": repeat, "wall_s": wall, "cpu_s": cpu, "startup_s": startup})
                print(f"{backend:12} {wall:8.2f} {cpu:8.2f} {startup:10.2f}", flush=True)
    print("medians, and hf / bandpo-tiny:")
    for key in ("wall_s", "cpu_s", "startup_s"):
        med = {b: statistics.median(r[key] for r in rows if r["backend"] == b) for b in BACKENDS}
        print(f"  {key:10} hf {med['hf']:7.2f}  bandpo-tiny {med['bandpo-tiny']:7.2f}  "
              f"ratio {med['hf'] / med['bandpo-tiny']:.2f}x")  # fmt: skip
    same = all(run == seen["hf"][0] for b in BACKENDS for run in seen[b])
    print(f"completions and metrics, every seed and repeat, hf vs bandpo-tiny: {'identical' if same else 'DIFFERENT'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
