"""The local trainer's settings: `TrainConfig`, every field that defines a run, documented once, in the source (the
command line, `bandpo.train.cli`, and docs/protocol-fields.md are generated from it), and the workflow's overrides
of it (``--set key=value``: `apply_overrides`; ``--set-file``: `read_set_file`; checked at DAG start:
`check_overrides`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bandpo import methods
from bandpo.core.options import check_fields, parse_assignments
from bandpo.runtime.ckernel import KERNELS

PROG = "python -m bandpo.train"
# Fields that measure wall-clock time: they differ between two runs of the same seed, everything else is identical.
TIMING_KEYS = (
    "step_seconds",
    "rollout_seconds",
    "update_seconds",
    "bounds_seconds",
    "bounds_frac",
    "tokens_per_second",
)


@dataclass
class TrainConfig:
    """Everything that defines a run. Defaults: the embedded CPU profile (tiny-s model, tiny-math)."""

    model: str = ""
    """Hugging Face model directory (``from_pretrained``)."""
    data: str = ""
    """Directory with ``train.jsonl`` (rows with ``prompt`` and ``answer``), or a JSONL file."""
    out: str = ""
    """Run directory: metrics.jsonl, model/, run.json, checkpoint/."""
    method: str = "grpo"
    """A registered method (`bandpo.methods.list_methods()`)."""
    params: dict[str, Any] = field(default_factory=dict)
    """The method's parameters (validated by its config; defaults are the paper's)."""
    seed: int = 0
    """Seeds initialisation-free randomness: prompt draws, sampling, mini-batch order (each step from (seed, step))."""
    steps: int = 64
    """Rollout batches (= optimizer steps / (updates_per_step x ppo_epochs))."""
    prompts_per_step: int = 32
    """Prompts drawn per rollout batch (each sampled ``samples_per_prompt`` times)."""
    samples_per_prompt: int = 8
    """Group size n of GRPO."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (plain softmax sampling, no top-k / top-p). The old and new log-probs,
    hence the ratio, and the logged entropy are those of the same softmax(logits / temperature), as in verl."""
    max_new_tokens: int = 48
    """Longest completion; a completion without EOS by then is truncated there."""
    chat_template: bool = False
    """Wrap each prompt in the model tokenizer's chat template (one user turn, then the assistant's generation
    prompt), as lm-eval's ``--apply-chat-template`` and verl do: for instruct models (the real-LM experiment). False
    (default): the row's prompt verbatim (the tiny models have no template)."""
    reward: str = "grader"
    """grader: bandpo.grader.grade against the reference (1 or 0). random: Bernoulli(0.5) per completion, seeded by
    (seed, step) - the random-reward control of the protocol, which isolates what clipping alone does to entropy."""
    updates_per_step: int = 4
    """Mini-batches per pass over a rollout batch (paper: 256 prompts / 64 per mini-batch = 4)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch (verl's actor.ppo_epochs; paper: 1). Each pass splits the batch afresh into
    ``updates_per_step`` mini-batches: ppo_epochs x updates_per_step optimizer updates per step, the first on-policy
    and every later one off-policy (``offpolicy/*``). Varies staleness at a fixed mini-batch size."""
    minibatch: str = "random"
    """How a rollout batch is split into its ``updates_per_step`` mini-batches. group: a random partition of the
    prompt groups (all ``samples_per_prompt`` completions of a prompt in one mini-batch; verl's layout, whose
    mini-batches are counted in prompts): each update runs each of its prompts once
    (fastest). random (default): a random partition of the sequences (TRL's layout): a prompt's completions spread
    over the updates, whose advantages then do not cancel within a mini-batch, so the policy drifts further between
    updates and clipping acts more (tiny-s, lr 5e-4: 0.68% of off-policy tokens outside the bounds against 0.44%
    with group)."""
    old_log_probs: str = "recompute"
    """Where the old (rollout-policy) log-probs and the logged entropy come from. recompute (default): a no-grad
    forward pass of the rollout policy over the batch (as verl's actor): the first, on-policy update's ratio is
    exactly 1, so with updates_per_step 1 every bound method gives the same run (the off-policy axis's exact null).
    sampler: the sampler's own, computed while drawing from the same weights and distribution, with no extra pass
    (about 15% less time per step); they equal the recomputed ones up to float rounding (within ~1e-6 in log-prob on
    tiny-s), so the first ratio is 1 within that, not exactly."""
    sampler_kernel: str = "torch"
    """How the rollouts' sampler computes each decoded token's attention (`bandpo.runtime.ckernel`). torch
    (default): PyTorch operations. c: the same arithmetic in one C call per layer and token (compiled once for the
    x86-64 baseline, the same bits on any x86-64 CPU); equal up to float rounding (about 3e-7 relative), so draws
    and numbers differ from torch's: a recipe's choice, checked with benchmarks/bench_recipe_check.py. Needs a C
    compiler and a model the suite's FastLlama covers, on the CPU."""
    lr: float = 5e-4
    """AdamW learning rate (of the first step)."""
    lr_end: float | None = 1e-4
    """Learning rate of the last step, reached by a linear decay from ``lr``; None = constant ``lr``. A high early
    rate makes clipping act while the base model's entropy is high; the decay keeps the late updates from eroding
    what was learned (tiny-s, 70 steps: const 3e-4 +11.4 points, 5e-4 -> 1e-4 +12.5, const or decayed 6e-4 worse)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Gradient clipping: maximum global gradient L2 norm per update."""
    kl_coef: float = 0.0
    """k3 KL-to-reference loss coefficient (paper: 0.001; 0 = off and no reference forward pass)."""
    loss_agg_mode: str = "seq-mean-token-mean"
    """How per-token losses become a scalar (`bandpo.methods.aggregate_loss`; the paper: seq-mean-token-mean)."""
    dual_clip_c: float | None = methods.DEFAULT_DUAL_CLIP_C
    """Dual-clip constant c for negative advantages (paper: 10; None disables)."""
    adv_eps: float = 1e-6
    """Added to the group's reward std in the advantage's denominator."""
    probe_every: int = 0
    """Mechanism probe (a probe data set, bandpo.train.probe): every this many steps (and at the last), log the mean
    probability of the deciding correct token over the probe rows of the data's validation split
    (``probe/p_correct``, with ``probe/p_correct_median`` and ``probe/prefers_decoy``) and the sampled accuracy
    there (``probe/accuracy``, ``probe_k`` samples at T = 1.0). 0 = off. Every step logs the rollouts' accuracy per
    subset (``probe/rollout_accuracy``, ``rest/rollout_accuracy``) when the training rows carry ``subset``."""
    probe_k: int = 4
    """Samples per probe problem of ``probe/accuracy`` (0: the deciding-token probability only)."""
    checkpoint_every: int = 10
    """Write a crash-safety checkpoint every this many steps."""
    keep_checkpoint: bool = False
    """Keep checkpoint/ after a successful run (default: removed, the final model is in model/)."""
    threads: int = 1
    """torch CPU threads (the Snakemake rule passes its ``threads``)."""
    device: str = "auto"
    """auto | cpu | cuda[:i]."""
    progress: bool = True
    """Show a tqdm progress bar on stderr."""

    def validate(self) -> None:
        problems = []
        if not self.model:
            problems.append("model: required (a Hugging Face model directory)")
        if not self.data:
            problems.append("data: required")
        if not self.out:
            problems.append("out: required")
        for name in ("steps", "prompts_per_step", "samples_per_prompt", "max_new_tokens", "updates_per_step",
                     "ppo_epochs"):  # fmt: skip
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                problems.append(f"{name}: must be an integer >= 1, got {getattr(self, name)!r}")
        if self.samples_per_prompt < 2:
            problems.append("samples_per_prompt: must be >= 2 (GRPO normalises within a group)")
        if self.minibatch in ("group", "random") and all(
            isinstance(getattr(self, k), int) for k in ("prompts_per_step", "samples_per_prompt", "updates_per_step")
        ):
            problem = self.minibatch_problem(self.prompts_per_step)
            if problem:
                problems.append(f"updates_per_step: {problem}")
        for name in ("temperature", "lr", "grad_clip", "adv_eps"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                problems.append(f"{name}: must be a finite number > 0, got {value!r}")
        if self.lr_end is not None and (
            not isinstance(self.lr_end, (int, float)) or not math.isfinite(self.lr_end) or self.lr_end < 0
        ):
            problems.append(f"lr_end: must be null or a finite number >= 0, got {self.lr_end!r}")
        for name in ("weight_decay", "kl_coef"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                problems.append(f"{name}: must be a finite number >= 0, got {value!r}")
        if self.sampler_kernel not in KERNELS:
            problems.append(f"sampler_kernel: must be one of {', '.join(KERNELS)}, got {self.sampler_kernel!r}")
        if self.old_log_probs not in ("sampler", "recompute"):
            problems.append(f"old_log_probs: must be 'sampler' or 'recompute', got {self.old_log_probs!r}")
        if self.minibatch not in ("group", "random"):
            problems.append(f"minibatch: must be 'group' or 'random', got {self.minibatch!r}")
        if self.reward not in ("grader", "random"):
            problems.append(f"reward: must be 'grader' or 'random', got {self.reward!r}")
        for name in ("probe_every", "probe_k"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                problems.append(f"{name}: must be an integer >= 0, got {getattr(self, name)!r}")
        if self.checkpoint_every < 1:
            problems.append(f"checkpoint_every: must be >= 1, got {self.checkpoint_every!r}")
        if self.threads < 1:
            problems.append(f"threads: must be >= 1, got {self.threads!r}")
        if self.chat_template and self.probe_every:
            problems.append("chat_template: the probe measures the raw prompt's deciding token; set probe_every 0")
        if problems:
            raise ValueError("invalid training config:\n  " + "\n  ".join(problems))
        self.resolve_method()  # unknown method / bad parameter: ValueError naming it

    def minibatch_problem(self, prompts: int) -> str | None:
        """Why a rollout batch of ``prompts`` prompt groups cannot be split into ``updates_per_step`` mini-batches
        (None: it can): the one range check of updates_per_step, at validation (``prompts_per_step`` prompts) and at
        the start of a run (fewer when the data has fewer rows)."""
        if self.minibatch == "group" and prompts < self.updates_per_step:
            return (f"minibatch=group needs at least one prompt group per mini-batch: {prompts} prompt(s) for "
                    f"{self.updates_per_step} mini-batches")  # fmt: skip
        if prompts * self.samples_per_prompt < self.updates_per_step:
            return (f"more mini-batches ({self.updates_per_step}) than sequences in a rollout batch "
                    f"({prompts} x {self.samples_per_prompt})")  # fmt: skip
        return None

    def resolve_method(self) -> methods.ResolvedMethod:
        """The run's method with its parameters and loss settings, validated (`bandpo.methods.resolve`)."""
        settings = {"loss_agg_mode": self.loss_agg_mode, "dual_clip_c": self.dual_clip_c}
        return methods.resolve(self.method, self.params, settings)

    def identity(self) -> str:
        """Hash of the fields that can change the result: every field but out, progress, keep_checkpoint and
        checkpoint_every (threads and device are hashed: they change float rounding). A checkpoint of another
        identity is not resumed."""
        d = dataclasses.asdict(self)
        for k in ("out", "progress", "keep_checkpoint", "checkpoint_every"):
            d.pop(k)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


# Fields the workflow's train rule sets itself (from the method entry, the run and the rule): not overridable.
RUN_FIELDS = ("model", "data", "out", "method", "params", "seed", "threads", "progress")


def check_overrides(overrides: Mapping[str, Any]) -> None:
    """Validate the workflow's ``train:`` overrides against TrainConfig (keys, types, ranges), as the train rule
    would apply them; ValueError naming the offending key. Used at DAG start (bandpo.config.sweep)."""
    for key in overrides:
        if key in RUN_FIELDS:
            raise ValueError(f"training setting {key!r} is set by the workflow itself, not by train:")
    cfg = TrainConfig(model="<model>", data="<data>", out="<out>")
    for key, value in check_fields(overrides, TrainConfig, "training setting").items():
        setattr(cfg, key, value)
    try:
        cfg.validate()
    except ValueError as e:  # one line: "invalid training config: lr: must be ..."
        raise ValueError(" ".join(str(e).split())) from None


def apply_overrides(cfg: TrainConfig, assignments: list[str]) -> TrainConfig:
    """``key=value`` strings onto the config (`bandpo.core.options.parse_assignments`: JSON values, checked by type)."""
    for key, value in parse_assignments(assignments, TrainConfig).items():
        setattr(cfg, key, value)
    return cfg


def read_set_file(path: str | os.PathLike) -> list[str]:
    """``--set-file``: a JSON object of field values as ``key=value`` assignments; ValueError naming the file."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"--set-file {path}: {e}") from None
    if not isinstance(values, dict):
        raise ValueError(f"--set-file {path}: expected a JSON object of field values, got {type(values).__name__}")
    return [f"{k}={json.dumps(v)}" for k, v in values.items()]
