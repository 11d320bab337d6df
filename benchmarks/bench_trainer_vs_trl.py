"""Training throughput of the suite's GRPO trainer (``bandpo.train.loop``) against TRL's GRPOTrainer, side by side.

Both train the same local model on the same task with the same batch, lengths, sampling, reward and number of
optimizer updates per rollout batch, on CPU, one after the other (never at the same time), and the benchmark prints
completion tokens per second of each and their ratio::

    python benchmarks/bench_trainer_vs_trl.py [--model resources/models/tiny-s] [--data resources/data/tiny-math]
        [--trl-python PYTHON] [--warmup-steps 2] [--steps 20] [--repeats 1] [--threads 1]
        [--seed 0] [--suite-set KEY=VALUE] [--json results.json] [--keep DIR]

TRL's side runs in a child process (``benchmarks/_trl_grpo_run.py``) under ``--trl-python``, by default this
interpreter, which has TRL after the README's set-up (``pip install -e ".[dev,verl-cpu]"``: the ``dev`` extra pulls
in ``bench``, trl 1.16.0, which accepts the installed torch and transformers and changes neither; verl works beside
it, docs/verl.md). ``--trl-python`` names another interpreter that imports both the project and TRL (another TRL
version, say); benchmarks/README.md, "Install", has the recipe checked in a fresh venv.

Settings, both trainers (defaults; a "step" = one rollout batch):

- batch: 16 prompts x 8 completions = 128 sequences per rollout batch, drawn from ``train.jsonl``;
- sampling: temperature 1.0, top_k 0, top_p 1.0 (plain sampling), at most 48 new tokens, stop at EOS;
- reward: ``bandpo.grader.grade_many`` (the batched ``bandpo.grader.grade``), 1 or 0, its worker started as a
  training job of the suite starts it (``bandpo.grader.start_workers``: one worker process);
- updates: 4 optimizer updates per rollout batch on disjoint shuffled mini-batches of 32 sequences (first on-policy,
  the rest off-policy, against the rollout policy's log-probs). The suite: ``minibatch: group``
  (4 whole prompt groups of 8 per mini-batch, verl's layout; the embedded default ``random`` costs about 1.3x a
  step at these settings: its first update waits for nearly every grade and each update runs most of the prompts;
  benchmarks/CHANGELOG.md, 2026-12-05). TRL: ``generation_batch_size`` 128,
  ``per_device_train_batch_size`` 32, ``steps_per_generation`` 4, ``gradient_accumulation_steps`` 1,
  ``num_iterations`` 1 (``max_steps`` = 4 x steps); since 4 steps share one generation, TRL computes the old
  log-probs with one extra no-grad forward pass, as ``bandpo.train.loop`` does;
- loss: GRPO ratio clipping eps 0.2, group-normalised advantages, per-sequence token mean then batch mean
  (TRL ``loss_type="grpo"``, ``scale_rewards="group"``), no KL (``beta=0``); not mapped, as it costs nothing:
  the suite's dual clip (c = 10) and TRL's logged extras (entropy, clip ratios);
- optimizer: AdamW, lr 2e-4 constant, weight decay 0.01, gradient clipping 1.0;
- fp32 on CPU, ``--threads`` torch threads, no vLLM, no bf16, no gradient checkpointing, no W&B (``report_to=[]``),
  no checkpoints (TRL) / the suite's default crash-safety checkpoint every 10 steps.

Measurement, identical for both: ``--warmup-steps`` rollout batches first (not timed), then the wall time from the
start of the first timed rollout batch to the end of the last one's last update (whatever each trainer does between
steps - logging, metrics, checkpoints - included), and the completion tokens generated in those batches, counted
up to and including the first EOS (no padding). The suite's side runs ``python -m bandpo.train --spec FILE``'s own
``main`` (the run's `TrainConfig`, ``--suite-set KEY=VALUE`` applied, written as a spec file) in a child process
with ``train_step`` wrapped by a timer (``--suite-worker``); TRL's side takes the same points
from a ``TrainerCallback`` and the tokens from ``completion_mask``. "in-step" tokens/s excludes what happens between
steps; "CPU-time" divides by the trainer process's CPU time over the same span instead of wall time, which a
busy machine disturbs less (the grader's worker processes are not in it; both trainers grade with the same
grader: TRL's reward function calls ``grade_many``, the suite hands each batch to ``bandpo.grader.Grading`` and its
worker judges while the updates run, each update waiting for its own prompt groups' grades; the suite's first
forward pass runs in a second thread of its process meanwhile).
Both children run under the suite's numerics as its training jobs get them (`bandpo.core.numerics.env`: on a CPU
that is not Intel's, the preloaded library that lets MKL run its AVX2 branch), so that both use the same kernels;
the summary prints the MKL branch each side ran.
``--repeats`` alternates the two trainers (suite first on even repeats, TRL first on odd ones) and reports the
median ratio: the machine is shared, and alternation spreads a busy period over both.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRL_RUNNER = Path(__file__).resolve().parent / "_trl_grpo_run.py"
HF_PATH_ENV = "BANDPO_BENCH_HF_PATH"  # set to 1: the suite's worker runs without FastLlama (bench_real_lm_step.py)
FLOPS_ENV = "BANDPO_BENCH_COUNT_FLOPS"  # set to 1: the worker counts each step's FLOPs (bench_real_lm_step.py)


class _GlobalOnly:
    """Stands in for FlopCounterMode's module tracker, which installs global module hooks (and `FastLlama` steps
    aside for a model with hooks): every count goes to the total."""

    parents = {"Global"}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def flop_counter():
    """torch's FLOP counter counting into one total (`_GlobalOnly`)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    counter.mod_tracker = _GlobalOnly()  # no per-module table: its module hooks would turn FastLlama off
    return counter


class InlineExecutor:
    """Runs each submitted call at once in the calling thread (a done future): the trainer's background passes in
    the main thread, where a FLOP counter (a thread-local dispatch mode) sees them; the run's numbers are the same
    (tests/unit/test_train.py::test_old_log_prob_pass_in_a_worker_thread_changes_no_number)."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def submit(self, fn, *args):
        from concurrent.futures import Future

        future: Future = Future()
        future.set_result(fn(*args))
        return future

    def shutdown(self, wait: bool = True) -> None:
        pass


# ----------------------------------------------------------------------------------------------------------------
# The suite's side (child process)


def suite_worker(timings_path: str, train_argv: list[str]) -> int:
    """Run ``python -m bandpo.train``'s ``main`` (`bandpo.train.cli.main`) on ``train_argv`` with every
    ``bandpo.train.loop.train_step`` timed; write the timings to JSON. With ``$BANDPO_BENCH_HF_PATH`` = 1 the
    trainer computes through the model's own transformers modules (`bandpo.runtime.fastlm.FastLlama` covers no
    model: the trainer's path for a model it does not cover). With ``$BANDPO_BENCH_COUNT_FLOPS`` = 1 each step runs
    under torch's FLOP counter (``torch.utils.flop_counter.FlopCounterMode``: the matrix products of every forward
    and backward pass; the C attention kernel's few FLOPs are not seen) with the background passes inline, and each
    cycle records ``flops``: the step's work, not its time (the counter slows it)."""
    import bandpo.grader

    bandpo.grader.start_workers()  # as ``python -m bandpo.train`` does before its imports (one worker)
    import bandpo.train.loop as bt

    if os.environ.get(HF_PATH_ENV) == "1":
        from bandpo.runtime.fastlm import FastLlama

        FastLlama.supports = staticmethod(lambda model: False)

    count_flops = os.environ.get(FLOPS_ENV) == "1"
    if count_flops:
        bt.ThreadPoolExecutor = InlineExecutor
    original = bt.train_step
    signature = inspect.signature(original)
    cycles: list[dict] = []

    def timed_train_step(*args, **kwargs):
        counter = flop_counter() if count_flops else None
        with counter or contextlib.nullcontext():
            start, cpu_start = time.perf_counter(), time.process_time()
            metrics = original(*args, **kwargs)
            end, cpu_end = time.perf_counter(), time.process_time()
        cfg = signature.bind(*args, **kwargs).arguments["run"].cfg
        n_seq = cfg.prompts_per_step * cfg.samples_per_prompt
        cycles.append(
            {
                "start": start,
                "end": end,
                "cpu_start": cpu_start,
                "cpu_end": cpu_end,
                "tokens": round(metrics["response_length"] * n_seq),
                "step_seconds": metrics["step_seconds"],
                "rollout_seconds": metrics["rollout_seconds"],
                "reward_mean": metrics["reward_mean"],
                **({"flops": counter.get_total_flops()} if counter is not None else {}),
            }
        )
        return metrics

    bt.train_step = timed_train_step
    from bandpo.train.cli import main as train_main

    t0 = time.perf_counter()
    rc = train_main(train_argv)
    total_seconds = time.perf_counter() - t0
    import torch

    from bandpo.core.provenance import machine, versions

    result = {
        "trainer": "bandpo.train.loop",
        "hf_path": os.environ.get(HF_PATH_ENV) == "1",
        "versions": versions("transformers", "torch"),
        "machine": machine(),
        "threads": torch.get_num_threads(),
        "cycles": cycles,
        "total_seconds": total_seconds,
        "reward_mean_per_step": [c["reward_mean"] for c in cycles],
    }
    Path(timings_path).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return rc


# ----------------------------------------------------------------------------------------------------------------
# The driver


def child_env(threads: int) -> dict[str, str]:
    """Both trainers' environment: the suite's numerics as its jobs get them (`bandpo.core.numerics.env`: on a CPU
    that is not Intel's, with the library that lets MKL run its AVX2 branch), so that both run the same kernels,
    and the suite's side runs as it does in the workflow; a process started as a script would not restart itself
    with the library and would run MKL's own branch for that CPU instead."""
    from bandpo.core import numerics

    env = dict(os.environ)
    env.update(numerics.env())
    env.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def resolve_paths(ap: argparse.ArgumentParser, args: argparse.Namespace, names=("model", "data")) -> None:
    """``--model`` / ``--data`` as absolute paths (relative ones from the checkout's root); an argparse error for
    one that does not exist."""
    for name in names:
        path = Path(getattr(args, name))
        path = path if path.is_absolute() else ROOT / path
        if not path.exists():
            ap.error(f"--{name}: {path} not found")
        setattr(args, name, str(path))


def run_child(cmd: list[str], log_path: Path, env: dict[str, str]) -> None:
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise SystemExit(f"command failed (exit {proc.returncode}): {' '.join(cmd)}\n--- log tail ---\n{tail}")


def suite_run(args, out: str):
    """The suite's run (`bandpo.train.settings.TrainConfig`, validated): the settings above, ``--suite-set`` on top
    (`bandpo.core.options.parse_assignments`); ValueError naming a bad one."""
    from bandpo.core.options import parse_assignments
    from bandpo.train.settings import TrainConfig, from_dict

    return from_dict({
        "model": args.model, "data": args.data, "out": out, "method": "grpo", "seed": args.seed,
        "threads": args.threads, "progress": False, "steps": args.warmup_steps + args.steps, "prompts_per_step": 16,
        "samples_per_prompt": 8, "max_new_tokens": 48, "temperature": 1.0, "updates_per_step": 4, "lr": 2e-4,
        "weight_decay": 0.01, "grad_clip": 1.0, "kl_coef": 0.0, "lr_end": None, "minibatch": "group",
        **parse_assignments(args.suite_set, TrainConfig),
    })  # fmt: skip


def run_suite(args, work: Path, tag: str) -> dict:
    timings = work / f"suite-{tag}.json"
    spec = work / f"suite-{tag}.spec.json"
    run = suite_run(args, str(work / f"suite-run-{tag}"))
    spec.write_text(json.dumps(dataclasses.asdict(run), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--suite-worker", str(timings), "--", "--spec", str(spec)]
    run_child(cmd, work / f"suite-{tag}.log", child_env(args.threads))
    result = json.loads(timings.read_text(encoding="utf-8"))
    result["command"] = cmd
    result["spec"] = dataclasses.asdict(run)
    return result


def run_trl(args, work: Path, tag: str) -> dict:
    timings = work / f"trl-{tag}.json"
    cmd = [
        args.trl_python, str(TRL_RUNNER), "--model", args.model, "--data", args.data, "--out", str(timings),
        "--warmup-steps", str(args.warmup_steps), "--steps", str(args.steps), "--threads", str(args.threads),
        "--seed", str(args.seed), "--prompts-per-step", "16", "--samples-per-prompt", "8", "--updates-per-step", "4",
        "--max-new-tokens", "48", "--temperature", "1.0", "--lr", "2e-4", "--weight-decay", "0.01",
    ]  # fmt: skip
    run_child(cmd, work / f"trl-{tag}.log", child_env(args.threads))
    result = json.loads(timings.read_text(encoding="utf-8"))
    result["command"] = cmd
    return result


def summarise(result: dict, warmup_steps: int) -> dict:
    timed = result["cycles"][warmup_steps:]
    seconds = timed[-1]["end"] - timed[0]["start"]
    in_step = sum(c["end"] - c["start"] for c in timed)
    cpu = timed[-1]["cpu_end"] - timed[0]["cpu_start"]
    tokens = sum(c["tokens"] for c in timed)
    return {
        "steps": len(timed),
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_second": tokens / seconds,
        "in_step_tokens_per_second": tokens / in_step,
        "cpu_seconds": cpu,
        "cpu_tokens_per_second": tokens / cpu,
        "seconds_per_step": seconds / len(timed),
        "response_length": tokens / len(timed) / 128,
        "reward_mean": statistics.fmean(result["reward_mean_per_step"][warmup_steps:] or [float("nan")]),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--suite-worker"]:
        if len(argv) < 3 or argv[2] != "--":
            raise SystemExit("usage: --suite-worker TIMINGS.json -- <python -m bandpo.train arguments>")
        return suite_worker(argv[1], argv[3:])

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resources/models/tiny-s", help="Hugging Face model directory")
    ap.add_argument("--data", default="resources/data/tiny-math", help="directory with train.jsonl")
    ap.add_argument(
        "--trl-python",
        default=sys.executable,
        help="python that runs TRL (default: this one); another must import the project and TRL",
    )
    ap.add_argument("--warmup-steps", type=int, default=2, help="rollout batches before timing starts")
    ap.add_argument("--steps", type=int, default=20, help="timed rollout batches")
    ap.add_argument("--repeats", type=int, default=1, help="alternating runs of both trainers")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--suite-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra setting of the suite's trainer, e.g. old_log_probs=\"recompute\" (TRL's extra pass)",
    )
    ap.add_argument("--json", default=None, help="also write all results here")
    ap.add_argument("--keep", default=None, help="keep the run directories and logs in this folder")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup_steps < 0 or args.repeats < 1:
        ap.error("--steps and --repeats must be >= 1, --warmup-steps >= 0")
    try:
        suite_run(args, "-")
    except ValueError as e:
        ap.error(f"--suite-set: {' '.join(str(e).split())}")
    resolve_paths(ap, args)
    trl_python = Path(args.trl_python)
    if not trl_python.is_absolute() and not trl_python.exists():
        trl_python = ROOT / trl_python
    if not trl_python.exists():
        ap.error(f"--trl-python: {trl_python} not found")
    args.trl_python = str(trl_python)
    probe = subprocess.run([args.trl_python, "-c", "import trl"], capture_output=True, text=True)
    if probe.returncode != 0:
        ap.error(
            f"--trl-python {args.trl_python} cannot import trl: install the project as the README does "
            "(pip install -e '.[dev,verl-cpu]', which holds trl), or pass an interpreter that has it "
            "(benchmarks/README.md, Install)"
        )

    if args.keep:
        work = Path(args.keep).resolve()
        work.mkdir(parents=True, exist_ok=True)
        tmp = None
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bench-trainer-vs-trl-")
        work = Path(tmp.name)

    rows = []
    try:
        for r in range(args.repeats):
            order = [("suite", run_suite), ("trl", run_trl)]
            if r % 2:
                order.reverse()
            rep = {}
            for name, fn in order:
                load = os.getloadavg()[0]
                print(f"[repeat {r + 1}/{args.repeats}] {name} ... (load average {load:.2f})", flush=True)
                result = fn(args, work, f"r{r}")
                rep[name] = {"summary": summarise(result, args.warmup_steps), "raw": result, "load_before": load}
            suite, trl = rep["suite"]["summary"], rep["trl"]["summary"]
            rep["ratio"] = suite["tokens_per_second"] / trl["tokens_per_second"]
            rep["cpu_ratio"] = suite["cpu_tokens_per_second"] / trl["cpu_tokens_per_second"]
            rows.append(rep)
    finally:
        if tmp is not None:
            tmp.cleanup()

    versions = rows[0]["trl"]["raw"]["versions"]
    print()
    print(f"model {args.model}")
    suite_tf = rows[0]["suite"]["raw"]["versions"]["transformers"]
    print(f"{args.steps} timed steps after {args.warmup_steps} warm-up, {args.threads} thread(s); "
          f"trl {versions['trl']}, transformers {versions['transformers']} (TRL side) / {suite_tf} (suite), "
          f"torch {versions['torch']}")  # fmt: skip
    branches = {name: {str(((rep[name]["raw"].get("machine") or {}).get("numerics") or {}).get("mkl_branch"))
                       for rep in rows} for name in ("suite", "trl")}  # fmt: skip
    print(f"MKL branch: suite {'/'.join(sorted(branches['suite']))}, TRL {'/'.join(sorted(branches['trl']))}")
    print(f"{'repeat':>6}  {'trainer':<16} {'tokens/s':>9} {'in-step':>8} {'CPU-time':>9} {'s/step':>7} "
          f"{'resp len':>8} {'reward':>7} {'load':>5}")  # fmt: skip
    for r, rep in enumerate(rows):
        for name, label in (("suite", "bandpo.train.loop"), ("trl", "TRL GRPOTrainer")):
            s = rep[name]["summary"]
            print(f"{r + 1:>6}  {label:<16} {s['tokens_per_second']:>9.0f} {s['in_step_tokens_per_second']:>8.0f} "
                  f"{s['cpu_tokens_per_second']:>9.0f} {s['seconds_per_step']:>7.3f} {s['response_length']:>8.1f} "
                  f"{s['reward_mean']:>7.3f} {rep[name]['load_before']:>5.2f}")  # fmt: skip
        print(f"{r + 1:>6}  {'ratio suite/TRL':<16} {rep['ratio']:>8.2f}x {'':>8} {rep['cpu_ratio']:>8.2f}x")
    med = {
        name: statistics.median(rep[name]["summary"]["tokens_per_second"] for rep in rows) for name in ("suite", "trl")
    }
    ratio = statistics.median(rep["ratio"] for rep in rows)
    cpu_ratio = statistics.median(rep["cpu_ratio"] for rep in rows)
    print(f"\nmedian tokens/s (wall): bandpo.train.loop {med['suite']:.0f}, TRL GRPOTrainer {med['trl']:.0f}; "
          f"median ratio {ratio:.2f}x (CPU-time ratio {cpu_ratio:.2f}x; target of #23 and #41: >= 4x)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"args": vars(args), "repeats": rows, "median": {**med, "ratio": ratio, "cpu_ratio": cpu_ratio}},
                indent=2,
            ),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
