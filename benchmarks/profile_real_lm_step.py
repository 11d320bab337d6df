"""Where a real-LM training step's time goes: the suite's fast path under torch's profiler, its time split into
kinds of work, against this machine's matrix-product rate (issue #67, item 5).

    python benchmarks/profile_real_lm_step.py [--model resources/models/smollm2-135m]
        [--data resources/data/tiny-math-answer-line] [--warmup-steps 1] [--steps 1] [--threads 2]
        [--temperature 0.7] [--json FILE]

The run is `bench_real_lm_step.py`'s ``fast`` variant (its settings: 16 prompts x 8 completions, 4 updates of 4
prompt groups, GRPO, AdamW, the sampler's old log-probs, the C attention kernel), in one child process with the
suite's numerics. Its timed steps run under ``torch.profiler`` (CPU ops with their shapes and FLOPs), with the
trainer's background passes in the main thread (`bench_trainer_vs_trl.InlineExecutor`: the profiler sees one
thread; the step's numbers are the same, and it loses the overlap of the first update's forward pass with grading,
so it is slower by that overlap than the trainer's own step). Parts of the step are labelled by wrapping the
trainer's functions (sampling, the optimizer step, gradient clipping, waiting for grades).

Each op's own time (its duration less its children's) goes to one kind:

- ``matrix products``: aten::mm / addmm / bmm / baddbmm (forward and backward);
- ``attention``: PyTorch's scaled-dot-product attention, forward and backward (prompt passes and updates);
- ``vocabulary softmax``: (log-)softmax over the vocabulary and its backward, and the gathers of the sampled
  token's log-probability (with the zeroed vocabulary-wide gradient they scatter into);
- ``embedding backward``: the tied embedding's dense gradient (zeroed, scattered, added to the output layer's);
- ``optimizer`` and ``gradient clipping``: every op under AdamW's step and clip_grad_norm_;
- ``other torch ops``: the rest (norms, rotary embeddings, activations, residual adds, copies, the weights'
  concatenations and their split backward, the loss);
- ``outside torch ops``: the step's wall time covered by no op: the C attention kernel of the sampler (not a torch
  op), waiting for grades, Python.

The ceiling: the matrix products' own rate (their FLOPs, as the profiler counts them, over their time) against the
best float32 matrix-product rate at the model's shapes (`bench_real_lm_step.matmul_rate`). A step can reach at most
that share of the rate even if every other kind of work took no time.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_real_lm_step as step_bench  # noqa: E402  (the run's settings and the matrix-product rate)
import bench_trainer_vs_trl as base  # noqa: E402  (the child's environment)

ROOT = base.ROOT
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
ATTENTION = "scaled_dot_product"
SOFTMAX_OPS = {"aten::_log_softmax", "aten::_softmax", "aten::_log_softmax_backward_data",
               "aten::_softmax_backward_data", "aten::gather"}  # fmt: skip
LABELS = ("optimizer", "gradient clipping", "sampling", "grades")  # record_function labels the child adds
KINDS = ("matrix products", "attention", "vocabulary softmax", "embedding backward", "optimizer", "gradient clipping",
         "other torch ops", "outside torch ops")  # fmt: skip


def kind_of(name: str, ancestors: tuple[str, ...]) -> str:
    """The kind of work (`KINDS`) of an op's own time, from its name and the names of the ops it runs under."""
    if "optimizer" in ancestors:
        return "optimizer"
    if "gradient clipping" in ancestors:
        return "gradient clipping"
    if name in MATMUL_OPS:
        return "matrix products"
    if any(ATTENTION in a.lower() for a in (name, *ancestors)):
        return "attention"
    if name in SOFTMAX_OPS or any(a.endswith(("GatherBackward0", "LogSoftmaxBackward0")) for a in (name, *ancestors)):
        return "vocabulary softmax"
    if any(a.endswith("EmbeddingBackward0") for a in (name, *ancestors)):
        return "embedding backward"
    return "other torch ops"


def breakdown(events: list[dict]) -> dict:
    """Seconds per kind of the profiled ops (chrome-trace events with ``name``, ``ts`` and ``dur`` in us; the
    `LABELS` among them mark parts, not ops): own time by `kind_of`, the wall time the ops cover, and the ten
    largest of the other torch ops by name."""
    events = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
    own: dict[str, float] = collections.defaultdict(float)
    other: dict[str, float] = collections.defaultdict(float)  # the other torch ops' own time by op name
    stack: list[dict] = []
    covered, end = 0.0, float("-inf")
    for e in events:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        ancestors = tuple(s["name"] for s in stack)
        stack.append(e)
        if e["name"] in LABELS:  # a label, not an op: its ops' ancestor; its own time is Python's
            continue
        ops = [s for s in stack[:-1] if s["name"] not in LABELS]
        if ops:  # a child's time is not its parent's own time
            own[ops[-1]["_kind"]] -= e["dur"]
            if ops[-1]["_kind"] == "other torch ops":
                other[ops[-1]["name"]] -= e["dur"]
        e["_kind"] = kind_of(e["name"], ancestors)
        own[e["_kind"]] += e["dur"]
        if e["_kind"] == "other torch ops":
            other[e["name"]] += e["dur"]
        if e["ts"] >= end:  # a top-level op: wall time covered
            covered += e["dur"]
            end = e["ts"] + e["dur"]
        elif e["ts"] + e["dur"] > end:
            covered += e["ts"] + e["dur"] - end
            end = e["ts"] + e["dur"]
    top = sorted(other.items(), key=lambda kv: -kv[1])[:10]
    return {
        "own_seconds": {k: v / 1e6 for k, v in own.items()},
        "covered_seconds": covered / 1e6,
        "other_ops": {k: v / 1e6 for k, v in top},
    }


def worker(spec: str, out: str, warmup_steps: int) -> int:
    """The child: train on ``spec`` with the timed steps profiled; write each step's breakdown to ``out``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    import bandpo.grader

    bandpo.grader.start_workers()  # as ``python -m bandpo.train`` does before its imports
    import bandpo.train.loop as bt
    from bandpo.runtime.optim import AdamW

    bt.ThreadPoolExecutor = base.InlineExecutor  # the background passes in the profiled thread

    def labelled(fn, label):
        def wrapper(*args, **kwargs):
            with record_function(label):
                return fn(*args, **kwargs)

        return wrapper

    AdamW.step = labelled(AdamW.step, "optimizer")
    torch.nn.utils.clip_grad_norm_ = labelled(torch.nn.utils.clip_grad_norm_, "gradient clipping")
    bt.Grades.advantages = labelled(bt.Grades.advantages, "grades")
    bt.rollout = labelled(bt.rollout, "sampling")
    original, steps = bt.train_step, []

    def profiled_step(*args, **kwargs):
        if len(steps) < warmup_steps:
            steps.append(None)
            return original(*args, **kwargs)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
            t0 = time.perf_counter()
            metrics = original(*args, **kwargs)
            wall = time.perf_counter() - t0
        trace = Path(out).with_suffix(f".trace{len(steps)}.json")
        prof.export_chrome_trace(str(trace))
        events = [e for e in json.loads(trace.read_text())["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]  # fmt: skip
        trace.unlink()
        result = breakdown(events)
        result["matmul_flops"] = sum(e.flops for e in prof.key_averages() if e.key in MATMUL_OPS)
        phases = {label: sum(e["dur"] for e in events if e["name"] == label) / 1e6 for label in LABELS}
        steps.append({"wall_seconds": wall, "phases": phases, "response_length": metrics["response_length"],
                      **result})  # fmt: skip
        return metrics

    bt.train_step = profiled_step
    from bandpo.train.cli import main as train_main

    rc = train_main(["--spec", spec])
    Path(out).write_text(json.dumps([s for s in steps if s is not None], indent=1), encoding="utf-8")
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    step_bench.add_step_arguments(ap, "resources/data/tiny-math-answer-line", 0.7, "profiled steps")
    ap.add_argument("--json", default=None, help="also write the result here")
    ap.add_argument("--worker", nargs=3, metavar=("SPEC", "OUT", "WARMUP"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker[0], args.worker[1], int(args.worker[2]))
    if args.steps < 1 or args.warmup_steps < 0:
        ap.error("--steps must be >= 1, --warmup-steps >= 0")
    base.resolve_paths(ap, args)

    with tempfile.TemporaryDirectory(prefix="profile-real-lm-step-") as tmp:
        work = Path(tmp)
        run = step_bench.suite_run(args, str(work / "run"), "fast")
        spec, out = work / "spec.json", work / "profile.json"
        spec.write_text(json.dumps(dataclasses.asdict(run), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(spec), str(out),
               str(args.warmup_steps)]  # fmt: skip
        print(f"profiling {args.steps} step(s) after {args.warmup_steps} warm-up ...", flush=True)
        base.run_child(cmd, work / "child.log", step_bench.env_of(args, "fast"))
        steps = json.loads(out.read_text(encoding="utf-8"))
    rate = step_bench.matmul_rate(args)
    peak = max(rate["gflops"]) * 1e9

    print(f"\nmodel {args.model}; data {args.data}; {args.threads} thread(s), T = {args.temperature}")
    print(f"best float32 matrix-product rate at the model's shapes: {peak / 1e9:.0f} GFLOP/s")
    summary = []
    for i, s in enumerate(steps):
        wall = s["wall_seconds"]
        kinds = dict(s["own_seconds"])
        kinds["outside torch ops"] = max(wall - s["covered_seconds"], 0.0)
        mm = kinds.get("matrix products", 0.0)
        step_rate, mm_rate = s["matmul_flops"] / wall, s["matmul_flops"] / mm if mm else 0.0
        print(f"\nstep {args.warmup_steps + i + 1}: {wall:.1f} s (profiled, background passes inline), "
              f"{s['matmul_flops'] / 1e12:.2f} TFLOP of matrix products, mean completion {s['response_length']:.1f} "
              f"tokens")  # fmt: skip
        print(f"  the step: {step_rate / 1e9:.0f} GFLOP/s, {step_rate / peak:.0%} of the rate; its matrix products "
              f"alone: {mm_rate / 1e9:.0f} GFLOP/s, {mm_rate / peak:.0%} of the rate (the ceiling)")  # fmt: skip
        print(f"  {'kind':<20} {'seconds':>8} {'share':>6}")
        for kind in KINDS:
            print(f"  {kind:<20} {kinds.get(kind, 0.0):>8.2f} {kinds.get(kind, 0.0) / wall:>6.1%}")
        print("  the other torch ops' largest: " + ", ".join(f"{k} {v:.2f} s" for k, v in s["other_ops"].items()))
        print("  labelled parts (inclusive): " + ", ".join(f"{k} {v:.2f} s" for k, v in s["phases"].items()))
        summary.append({**s, "kinds": kinds, "share_of_rate": step_rate / peak, "matmul_share_of_rate": mm_rate / peak})
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "matmul": rate, "steps": summary}, indent=2),
                                   encoding="utf-8")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
