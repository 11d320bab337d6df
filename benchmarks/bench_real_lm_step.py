"""A real-LM GRPO training step three ways, side by side: the suite's trainer on its fast path, the same trainer
through transformers' modules, and TRL 1.16's GRPOTrainer, on the same model, data and settings.

    python benchmarks/bench_real_lm_step.py [--model resources/models/smollm2-135m] [--data DIR]
        [--warmup-steps 1] [--steps 1] [--repeats 3] [--threads 2] [--max-new-tokens 32] [--temperature 1.0]
        [--grader-mode strict-answer-line] [--variants fast hf trl] [--trl-python PYTHON] [--no-flops] [--json FILE]

The variants (one child process each, never two at once; `bench_trainer_vs_trl.py`'s children and timing):

- ``fast``: ``bandpo.train.loop`` as the real-LM profile runs it: `bandpo.runtime.fastlm.FastLlama` computes every
  forward pass (rollouts, old log-probs, updates) from the model's own parameters, each prompt run once for its group
  in the sampler and in the update, the sampler's attention in C (``sampler_kernel: c``);
- ``hf``: the same trainer with FastLlama covering no model (``$BANDPO_BENCH_HF_PATH``): every forward pass through
  transformers' ``LlamaForCausalLM`` modules and cache classes (each prompt still run once for its group: the
  trainer's own sharing), ``sampler_kernel: torch``;
- ``trl``: TRL's GRPOTrainer (``benchmarks/_trl_grpo_run.py``): HF ``generate`` on every prompt repeated 8 times, the
  old log-probs recomputed (4 updates share a generation), each update's forward over prompt + completion per row.

Settings, all three: 16 prompts x 8 completions per step from ``train.jsonl``, each prompt the last user turn of the
model's chat template (after its row's worked exchanges, if any), plain sampling (top_k 0, top_p 1) at
``--temperature``, at most ``--max-new-tokens`` new tokens; the reward ``bandpo.grader`` in ``--grader-mode``
(``$BANDPO_GRADER_MODE`` of every child); 4 optimizer updates per step on mini-batches of 4 whole prompt groups (32
sequences; TRL: ``steps_per_generation`` 4), the GRPO loss (clip 0.2, no KL), AdamW lr 1e-5, weight decay 0.01, gradient
clipping 1.0; fp32 on the CPU, ``--threads`` threads, the suite's numerics (`bandpo.core.numerics.env`). The suite takes
its old log-probs from the sampler (``old_log_probs: sampler``, as the real-LM profile), TRL recomputes them.

Measurement: ``--warmup-steps`` steps first (not timed), then from the start of the first timed step to the end of
the last one (wall and the trainer process's CPU time) and the completion tokens of those steps (up to and including
EOS). The figures: seconds per step, and completion tokens per second (the three sample different completions, of
somewhat different lengths); ratios of each pair of the same repeat, their median over ``--repeats``. The variants'
order rotates between repeats, so that a busy period of the shared machine falls on each in turn.

The work (unless ``--no-flops``): each suite variant's run once more under torch's FLOP counter (the matrix products
of every forward and backward pass, `bench_trainer_vs_trl.suite_worker`; a seed gives the same steps, so the timed
steps' work is the same in every repeat), and this machine's float32 matrix-product rate at the model's shapes
(hidden x hidden and hidden x intermediate products of 2048 rows, in a child with the same threads and numerics). The
figures: FLOPs per timed step, achieved GFLOP/s (FLOPs over the median seconds per step), and their share of the
matrix-product rate. A step's time is its FLOPs over its rate, so the speed-up against the HF-modules path is the
FLOP ratio times the rate ratio, and no path that computes the same FLOPs can be faster than the measured rate allows:
what bounds the speed-up, printed beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_trainer_vs_trl as base  # noqa: E402  (the children, their environment and the timing)

ROOT = base.ROOT
VARIANTS = ("fast", "hf", "trl")
LABELS = {"fast": "suite, fast path", "hf": "suite, HF modules", "trl": "TRL GRPOTrainer"}


def suite_run(args, out: str, variant: str):
    """The suite's run of ``variant`` (fast / hf) as a validated `bandpo.train.settings.TrainConfig`."""
    from bandpo.train.settings import from_dict

    return from_dict({
        "model": args.model, "data": args.data, "out": out, "method": "grpo", "seed": args.seed,
        "threads": args.threads, "progress": False, "steps": args.warmup_steps + args.steps, "prompts_per_step": 16,
        "samples_per_prompt": 8, "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
        "updates_per_step": 4, "lr": 1e-5, "weight_decay": 0.01, "grad_clip": 1.0, "kl_coef": 0.0, "lr_end": None,
        "minibatch": "group", "chat_template": True, "old_log_probs": "sampler",
        "sampler_kernel": "c" if variant == "fast" else "torch", "checkpoint_every": 1000,
    })  # fmt: skip


def env_of(args, variant: str) -> dict[str, str]:
    env = base.child_env(args.threads)
    env["BANDPO_GRADER_MODE"] = args.grader_mode
    env.pop(base.HF_PATH_ENV, None)
    if variant == "hf":
        env[base.HF_PATH_ENV] = "1"
    return env


def run_suite(args, work: Path, tag: str, variant: str, count_flops: bool = False) -> dict:
    timings = work / f"{variant}-{tag}.json"
    spec = work / f"{variant}-{tag}.spec.json"
    run = suite_run(args, str(work / f"{variant}-run-{tag}"), variant)
    spec.write_text(json.dumps(dataclasses.asdict(run), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    worker = Path(base.__file__).resolve()
    cmd = [sys.executable, str(worker), "--suite-worker", str(timings), "--", "--spec", str(spec)]
    env = env_of(args, variant)
    if count_flops:
        env[base.FLOPS_ENV] = "1"
    base.run_child(cmd, work / f"{variant}-{tag}.log", env)
    result = json.loads(timings.read_text(encoding="utf-8"))
    if result.get("hf_path") != (variant == "hf"):
        raise SystemExit(f"{variant}: the worker ran with hf_path={result.get('hf_path')}")
    return result


def run_trl(args, work: Path, tag: str) -> dict:
    timings = work / f"trl-{tag}.json"
    cmd = [
        args.trl_python, str(base.TRL_RUNNER), "--model", args.model, "--data", args.data, "--out", str(timings),
        "--warmup-steps", str(args.warmup_steps), "--steps", str(args.steps), "--threads", str(args.threads),
        "--seed", str(args.seed), "--prompts-per-step", "16", "--samples-per-prompt", "8", "--updates-per-step", "4",
        "--max-new-tokens", str(args.max_new_tokens), "--temperature", str(args.temperature), "--lr", "1e-5",
        "--weight-decay", "0.01", "--chat-template",
    ]  # fmt: skip
    base.run_child(cmd, work / f"trl-{tag}.log", env_of(args, "trl"))
    return json.loads(timings.read_text(encoding="utf-8"))


MATMUL_RATE = """
import json, sys, time
import torch
torch.manual_seed(0)
rates = []
for k, n in ((576, 576), (576, 1536), (1536, 576)):  # SmolLM2-135M: hidden x hidden, hidden x intermediate and back
    a, b = torch.randn(2048, k), torch.randn(k, n)
    a @ b
    best = 0.0
    for _ in range(5):
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 0.5:
            a @ b
            reps += 1
        best = max(best, 2 * 2048 * k * n * reps / (time.perf_counter() - t0))
    rates.append(best)
json.dump({"gflops": [r / 1e9 for r in rates], "threads": torch.get_num_threads()}, sys.stdout)
"""


def matmul_rate(args) -> dict:
    """This machine's float32 matrix-product rate (GFLOP/s, best of 5 half-second runs per shape) in a child with the
    variants' threads and numerics (`env_of`)."""
    out = subprocess.run([sys.executable, "-c", MATMUL_RATE], env=env_of(args, "fast"), capture_output=True, text=True,
                         check=True)  # fmt: skip
    return json.loads(out.stdout)


def step_flops(result: dict, warmup_steps: int) -> float:
    """FLOPs per timed step of a counted run (`run_suite` with ``count_flops``)."""
    timed = result["cycles"][warmup_steps:]
    return sum(c["flops"] for c in timed) / len(timed)


def summarise(result: dict, warmup_steps: int) -> dict:
    s = base.summarise(result, warmup_steps)
    s["cpu_seconds_per_step"] = s["cpu_seconds"] / s["steps"]
    return s


def add_step_arguments(ap: argparse.ArgumentParser, data: str, temperature: float, steps_help: str) -> None:
    """The run's flags (`suite_run`, `env_of`), shared with profile_real_lm_step.py: model, data, warm-up and
    measured steps, threads, seed, new tokens, temperature, grader mode."""
    ap.add_argument("--model", default="resources/models/smollm2-135m", help="Hugging Face model directory")
    ap.add_argument("--data", default=data, help="directory with train.jsonl")
    ap.add_argument("--warmup-steps", type=int, default=1)
    ap.add_argument("--steps", type=int, default=1, help=steps_help)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=temperature)
    ap.add_argument("--grader-mode", default="strict-answer-line")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_step_arguments(ap, "resources/data/tiny-math-real-lm", 1.0, "timed steps per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--trl-python", default=sys.executable, help="python that imports trl (bench_trainer_vs_trl.py)")
    ap.add_argument("--no-flops", action="store_true", help="skip the FLOP count and the matrix-product rate")
    ap.add_argument("--json", default=None, help="also write every result here")
    ap.add_argument("--keep", default=None, help="keep the run folders and logs in this folder")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup_steps < 0 or args.repeats < 1:
        ap.error("--steps and --repeats must be >= 1, --warmup-steps >= 0")
    if "fast" not in args.variants:
        ap.error("--variants: the ratios are against fast; include it")
    base.resolve_paths(ap, args)
    if "trl" in args.variants:
        probe = subprocess.run([args.trl_python, "-c", "import trl"], capture_output=True, text=True)
        if probe.returncode != 0:
            ap.error(f"--trl-python {args.trl_python} cannot import trl (bench_trainer_vs_trl.py says how)")
    tmp = None
    if args.keep:
        work = Path(args.keep).resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bench-real-lm-step-")
        work = Path(tmp.name)

    rows = []
    try:
        for r in range(args.repeats):
            order = list(args.variants)
            order = order[r % len(order) :] + order[: r % len(order)]
            rep = {}
            for variant in order:
                load = os.getloadavg()[0]
                print(f"[repeat {r + 1}/{args.repeats}] {variant} ... (load average {load:.2f})", flush=True)
                tag = f"r{r}"
                raw = run_trl(args, work, tag) if variant == "trl" else run_suite(args, work, tag, variant)
                rep[variant] = {"summary": summarise(raw, args.warmup_steps), "load_before": load,
                                "versions": raw.get("versions"), "machine": raw.get("machine")}  # fmt: skip
            fast = rep["fast"]["summary"]
            for v in args.variants:
                s = rep[v]["summary"]
                rep[v]["ratio_step"] = s["seconds_per_step"] / fast["seconds_per_step"]
                rep[v]["ratio_tokens"] = fast["tokens_per_second"] / s["tokens_per_second"]
                rep[v]["ratio_cpu"] = s["cpu_seconds_per_step"] / fast["cpu_seconds_per_step"]
            rows.append(rep)
        work_of = {}
        if not args.no_flops:
            for variant in [v for v in args.variants if v != "trl"]:
                print(f"[work] {variant}: the same run under the FLOP counter ...", flush=True)
                work_of[variant] = step_flops(run_suite(args, work, "flops", variant, True), args.warmup_steps)
            rate = matmul_rate(args)
    finally:
        if tmp is not None:
            tmp.cleanup()

    machine = rows[0]["fast"]["machine"] or {}
    versions = {k: v for rep in rows for var in rep.values() for k, v in (var.get("versions") or {}).items()}
    print(f"\nmodel {args.model}; data {args.data}")
    print(f"{args.steps} timed step(s) after {args.warmup_steps} warm-up, {args.threads} thread(s), 16 x 8 rows, "
          f"<= {args.max_new_tokens} new tokens, T = {args.temperature}, grader {args.grader_mode}")  # fmt: skip
    print(f"machine: {machine.get('cpu_model', '?')}; {', '.join(f'{k} {v}' for k, v in sorted(versions.items()))}")
    print(f"{'repeat':>6}  {'variant':<18} {'s/step':>8} {'CPU s/step':>10} {'tokens/s':>9} {'resp len':>8} "
          f"{'x step':>7} {'x tokens/s':>10} {'x CPU':>6} {'load':>5}")  # fmt: skip
    for r, rep in enumerate(rows):
        for v in args.variants:
            s = rep[v]["summary"]
            print(
                f"{r + 1:>6}  {LABELS[v]:<18} {s['seconds_per_step']:>8.1f} {s['cpu_seconds_per_step']:>10.1f} "
                f"{s['tokens_per_second']:>9.1f} {s['response_length']:>8.1f} {rep[v]['ratio_step']:>6.2f}x "
                f"{rep[v]['ratio_tokens']:>9.2f}x {rep[v]['ratio_cpu']:>5.2f}x {rep[v]['load_before']:>5.2f}"
            )
    medians = {}
    print()
    for v in args.variants:
        if v == "fast":
            continue
        med = {k: statistics.median(rep[v][k] for rep in rows) for k in ("ratio_step", "ratio_tokens", "ratio_cpu")}
        medians[v] = med
        print(
            f"fast path against {LABELS[v]}: median {med['ratio_step']:.2f}x per step, {med['ratio_tokens']:.2f}x "
            f"tokens/s, {med['ratio_cpu']:.2f}x CPU per step ({len(rows)} repeat(s); target of #56: >= 3x)"
        )
    roofline = {}
    if work_of:
        peak = max(rate["gflops"])
        print(f"\nwork per timed step (torch's FLOP counter) and its rate; this machine's float32 matrix products at "
              f"the model's shapes: {', '.join(f'{g:.0f}' for g in rate['gflops'])} GFLOP/s "
              f"({rate['threads']} thread(s), the variants' numerics)")  # fmt: skip
        for v, flops in work_of.items():
            seconds = statistics.median(rep[v]["summary"]["seconds_per_step"] for rep in rows)
            achieved = flops / seconds / 1e9
            roofline[v] = {"tflop_per_step": flops / 1e12, "seconds_per_step": seconds, "gflops": achieved,
                           "share_of_matmul_rate": achieved / peak}  # fmt: skip
            print(f"  {LABELS[v]:<18} {flops / 1e12:6.2f} TFLOP a step in {seconds:5.1f} s: {achieved:5.0f} GFLOP/s, "
                  f"{achieved / peak:.0%} of the best matrix-product rate")  # fmt: skip
        fast = roofline["fast"]
        ideal = fast["tflop_per_step"] * 1e3 / peak  # seconds a step at the best matrix-product rate
        print(f"  the fast path's FLOPs at the best matrix-product rate: {ideal:.1f} s a step, at most "
              f"{fast['seconds_per_step'] / ideal:.2f}x faster than measured")  # fmt: skip
        if "hf" in roofline:
            hf = roofline["hf"]
            bound = hf["seconds_per_step"] / ideal
            flop_ratio, rate_ratio = hf["tflop_per_step"] / fast["tflop_per_step"], fast["gflops"] / hf["gflops"]
            print(f"  against the HF-modules path: {flop_ratio:.2f}x the FLOPs at a {rate_ratio:.2f}x lower rate, "
                  f"together {hf['seconds_per_step'] / fast['seconds_per_step']:.2f}x the step time; the fast path's "
                  f"FLOPs at the best matrix-product rate would be {bound:.2f}x")  # fmt: skip
            roofline["bound_against_hf"] = bound
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "repeats": rows, "median": medians,
                                               "roofline": roofline, "matmul": rate if work_of else None}, indent=2),
                                   encoding="utf-8")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
