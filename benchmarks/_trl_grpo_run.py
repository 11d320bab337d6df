"""TRL side of ``bench_trainer_vs_trl.py``: TRL's GRPOTrainer on a local model, timed per rollout batch.

Run as a child process by the python given as ``--trl-python`` (default: the benchmark's own; the ``bench`` extra
installs trl, or a venv that adds trl alone: bench_trainer_vs_trl.py's docstring), not imported::

    python benchmarks/_trl_grpo_run.py --model resources/models/tiny-s \\
        --data resources/data/tiny-math --out /tmp/trl.json [--warmup-steps 2 --steps 20 --threads 1]

One "step" here is what it is in ``bandpo.train.loop``: one rollout batch of ``prompts_per_step x samples_per_prompt``
completions followed by ``updates_per_step`` optimizer updates on disjoint mini-batches. In TRL terms:
``generation_batch_size`` = 128 sequences, ``per_device_train_batch_size`` = 128 / 4 = 32,
``steps_per_generation`` = 4, ``gradient_accumulation_steps`` = 1, ``num_iterations`` = 1, so a rollout batch is
generated every 4 optimizer steps and each of those steps uses one quarter of it (TRL shuffles the batch first, as
``bandpo.train.loop`` does); ``max_steps`` = 4 x (warm-up + timed steps). Rewards: ``bandpo.grader.grade_many`` (the
batched ``grade``), exactly what ``bandpo.train.loop`` calls.

Timing, the same definition as for ``bandpo.train.loop``: the wall time from the start of the first timed rollout batch
(``on_step_begin`` of its first optimizer step, just before generation) to the end of the last one (``on_step_end``
of its last optimizer step), everything in between included; tokens = completion tokens up to and including the
first EOS (``completion_mask``), counted at generation. Writes one JSON object to ``--out``.

``--chat-template``: each prompt as the last user turn of the model's chat template, after its row's worked exchanges
(``shots``, tiny-math's answer-line format) as earlier turns (a conversational data set: TRL applies the template with
the generation prompt, as ``bandpo.train.loop.chat_prompts`` does), the reward graded on the assistant turn's text.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

LOGGED_CONFIG = """per_device_train_batch_size gradient_accumulation_steps steps_per_generation generation_batch_size
num_iterations num_generations max_steps max_completion_length temperature top_k top_p min_p cache_implementation
beta epsilon loss_type scale_rewards learning_rate lr_scheduler_type weight_decay max_grad_norm bf16
gradient_checkpointing use_vllm"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face model directory")
    ap.add_argument("--data", required=True, help="directory with train.jsonl, or a JSONL file")
    ap.add_argument("--out", required=True, help="write the timings here (JSON)")
    ap.add_argument("--warmup-steps", type=int, default=2, help="rollout batches before timing starts")
    ap.add_argument("--steps", type=int, default=20, help="timed rollout batches")
    ap.add_argument("--prompts-per-step", type=int, default=16)
    ap.add_argument("--samples-per-prompt", type=int, default=8)
    ap.add_argument("--updates-per-step", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache-implementation", default=None, help="TRL's generation cache (default: TRL's, None)")
    ap.add_argument("--chat-template", action="store_true", help="chat template prompts (docstring)")
    args = ap.parse_args(argv)

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ["WANDB_DISABLED"] = "true"

    import bandpo.grader

    bandpo.grader.start_workers()  # the grader as a training job of the suite starts it (one worker)

    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from bandpo.core.files import read_jsonl
    from bandpo.core.provenance import machine, versions
    from bandpo.data.tiny_math import chat_messages
    from bandpo.grader import grade_many, warmup

    torch.set_num_threads(args.threads)
    batch = args.prompts_per_step * args.samples_per_prompt
    if batch % args.updates_per_step:
        ap.error("prompts_per_step x samples_per_prompt must be divisible by updates_per_step")
    total_steps = args.warmup_steps + args.steps

    data = Path(args.data)
    data = data / "train.jsonl" if data.is_dir() else data
    rows = read_jsonl(data)
    # a row's worked exchanges (shots) as earlier turns, as the suite's trainer (bandpo.train.loop.chat_prompts)
    prompts = [chat_messages(r["prompt"], r.get("shots")) if args.chat_template else r["prompt"] for r in rows]
    dataset = datasets.Dataset.from_dict({"prompt": prompts, "answer": [str(r["answer"]) for r in rows]})

    def grader_reward(prompts, completions, answer, **kwargs):
        """bandpo.grader.grade (batched) as a TRL reward function: 1.0 / 0.0 per completion (the assistant turn's
        text for a conversational data set)."""
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return grade_many(texts, answer)

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)

    out_dir = tempfile.mkdtemp(prefix="trl-grpo-")
    config = GRPOConfig(
        output_dir=out_dir,
        # batch layout: one rollout batch = generation_batch_size sequences, updates_per_step optimizer steps on it
        per_device_train_batch_size=batch // args.updates_per_step,
        gradient_accumulation_steps=1,
        steps_per_generation=args.updates_per_step,
        num_iterations=1,
        num_generations=args.samples_per_prompt,
        max_steps=args.updates_per_step * total_steps,
        # sampling: plain temperature sampling (TRL passes top_k=0 / top_p=1.0 / min_p=None to GenerationConfig)
        max_completion_length=args.max_new_tokens,
        temperature=args.temperature,
        top_k=0,
        top_p=1.0,
        min_p=None,
        repetition_penalty=1.0,
        cache_implementation=args.cache_implementation,
        use_vllm=False,
        # loss and optimizer: GRPO, eps 0.2, no KL, token-mean per sequence then mean ("grpo" = seq-mean-token-mean)
        beta=0.0,
        epsilon=0.2,
        loss_type="grpo",
        scale_rewards="group",
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=args.weight_decay,
        max_grad_norm=1.0,
        # plain fp32 CPU run, like bandpo.train.loop: no bf16 autocast, no gradient checkpointing (TRL's defaults)
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        disable_dropout=True,
        use_cpu=True,
        dataloader_num_workers=0,
        seed=args.seed,
        report_to=[],
        save_strategy="no",
        logging_steps=args.updates_per_step,
        disable_tqdm=True,
        log_completions=False,
    )

    class Timer(TrainerCallback):
        def __init__(self):
            self.begin: list[tuple[float, float]] = []  # (wall, process CPU) times
            self.end: list[tuple[float, float]] = []

        def on_step_begin(self, args_, state, control, **kwargs):
            self.begin.append((time.perf_counter(), time.process_time()))

        def on_step_end(self, args_, state, control, **kwargs):
            self.end.append((time.perf_counter(), time.process_time()))

    generated_tokens: list[int] = []

    class CountingGRPOTrainer(GRPOTrainer):
        """Counts the completion tokens (up to and including EOS) of every generated rollout batch."""

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            generated_tokens.append(int(output["completion_mask"].sum()))
            return output

    timer = Timer()
    trainer = CountingGRPOTrainer(
        model=model,
        reward_funcs=grader_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    warmup()  # wait for the grader's worker, before training, as bandpo.train.loop does
    t0 = time.perf_counter()
    trainer.train()
    total_seconds = time.perf_counter() - t0
    shutil.rmtree(out_dir, ignore_errors=True)

    u = args.updates_per_step
    if len(timer.begin) != u * total_steps or len(generated_tokens) != total_steps:
        raise RuntimeError(
            f"expected {u * total_steps} optimizer steps and {total_steps} rollout batches, got "
            f"{len(timer.begin)} and {len(generated_tokens)}"
        )
    cycles = []
    for k in range(total_steps):
        (start, cpu_start), (end, cpu_end) = timer.begin[u * k], timer.end[u * k + u - 1]
        cycles.append(
            {"start": start, "end": end, "cpu_start": cpu_start, "cpu_end": cpu_end, "tokens": generated_tokens[k]}
        )
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    result = {
        "trainer": "trl",
        "versions": versions("trl", "transformers", "torch", "datasets"),
        "machine": machine(),
        "threads": torch.get_num_threads(),
        "cycles": cycles,
        "warmup_steps": args.warmup_steps,
        "total_seconds": total_seconds,
        "reward_mean_per_step": rewards,
        "trl_config": {k: getattr(config, k) for k in LOGGED_CONFIG.split()},
    }
    Path(args.out).write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
