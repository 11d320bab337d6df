"""The local trainer's settings: `TrainConfig`, the shared protocol (`bandpo.core.protocol.Protocol`) extended with
the fields only this trainer has, every field documented once, in the source (the command line, `bandpo.train.cli`,
and docs/protocol-fields.md are generated from it). A run of the workflow is one spec file of these fields, written
by the run plan (`bandpo.plan.runs`) and read by the job (`read_spec`). Imports nothing heavy: the run plan checks
every run with `TrainConfig.validate` at DAG start."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bandpo.core import files
from bandpo.core.options import check_fields
from bandpo.core.protocol import SAMPLER_DRAWS, SAMPLER_KERNELS, Protocol, raise_problems, spec_fields

PROG = "python -m bandpo.train"
# Fields that measure wall-clock time, or count what a time budget decided: they may differ between two runs of the
# same seed, everything else is identical. ``grader_retries`` counts the grading items that spent the grader's first
# budget and were graded again with a longer one (bandpo.grader.api): the grades are the same, and the count follows
# the CPU's speed (the budgets count CPU seconds since issue #72; before, wall seconds, and it followed the load).
TIMING_KEYS = (
    "step_seconds",
    "rollout_seconds",
    "update_seconds",
    "bounds_seconds",
    "bounds_frac",
    "tokens_per_second",
    "grader_retries",
    "val/seconds",
    "val/seconds_before",
)


@dataclass(kw_only=True)
class TrainConfig(Protocol):
    """Everything that defines a run of the local trainer: the run (model, data, method, seed, out), the shared
    protocol (`bandpo.core.protocol.Protocol`: steps, batch, learning rate, ...) and the settings only this trainer
    has (below). Defaults: the embedded CPU profile (tiny-s model, tiny-math)."""

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
    chat_template: bool = False
    """Wrap each prompt in the model tokenizer's chat template (one user turn, then the assistant's generation
    prompt), as lm-eval's ``--apply-chat-template`` and verl do: for instruct models (the real-LM experiment). False
    (default): the row's prompt verbatim (the tiny models have no template)."""
    reward: str = "grader"
    """grader: bandpo.grader.grade against the reference (1 or 0). random: Bernoulli(0.5) per completion, seeded by
    (seed, step) - the random-reward control of the protocol, which isolates what clipping alone does to entropy."""
    minibatch: str = "random"
    """How a rollout batch is split into its ``updates_per_step`` mini-batches. group: a random partition of the
    prompt groups (all ``samples_per_prompt`` completions of a prompt in one mini-batch; verl's layout, whose
    mini-batches are counted in prompts): each update runs each of its prompts once (fastest). random (default): a
    random partition of the sequences (TRL's layout): a prompt's completions spread over the updates, whose
    advantages then do not cancel within a mini-batch, so the policy drifts further between updates and clipping
    acts more."""
    old_log_probs: str = "recompute"
    """Where the old (rollout-policy) log-probs and the logged entropy come from. recompute (default): a no-grad
    forward pass of the rollout policy over the batch (as verl's actor): the first, on-policy update's ratio is
    exactly 1, so with updates_per_step 1 every bound method gives the same run (the off-policy axis's exact null).
    sampler: the sampler's own, computed while drawing from the same weights and distribution, with no extra pass;
    they equal the recomputed ones up to float rounding, so the first ratio is 1 within that, not exactly."""
    sampler_kernel: str = "torch"
    """How the rollouts' sampler computes each decoded token's attention (`bandpo.runtime.ckernel`). torch
    (default): PyTorch operations. c: the same arithmetic in one C call per layer and token (compiled once for the
    x86-64 baseline, the same bits on any x86-64 CPU); equal up to float rounding, so draws and numbers differ from
    torch's: a recipe's choice, checked with benchmarks/bench_recipe_check.py. Needs a C compiler and a model the
    suite's FastLlama covers, on the CPU."""
    sampler_draws: str = "stream"
    """Where the rollouts' sampler takes its random numbers (`bandpo.runtime.sampling.draw`). stream (default, every
    published run): torch's generator, seeded from (seed, step) each step, one number after another as the rows ask
    (``torch.multinomial``'s exponentials for a small vocabulary, one uniform per row for a large one), so two runs of
    a pair part ways from the first row that stops at another token. keyed: common random numbers, one uniform per
    (seed, step, prompt, sample, position) from a counter-based hash (`bandpo.runtime.sampling.keyed_uniforms`) and
    the inverse distribution function, so two runs of a pair (the same seed, other methods) draw the same number
    wherever they sample the same position: an exact sampler too, and the same bits on any CPU; other draws than
    stream, so a recipe's choice (issue #67)."""
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
    val_every: int = 0
    """The held-out curve: every this many steps (and at the last), and once before the first update, the policy's
    mean@k and pass@k on the data's validation split (``val_k`` samples per problem, sampled as the rollouts are and
    graded by the same grader; `bandpo.train.loop.validation_metrics`): ``val/mean``, ``val/pass`` (and
    ``val/mean_before``, ``val/pass_before`` on the first step's line). 0 = off. Its samples come from a stream of
    their own: a run's training is the same with or without it."""
    val_k: int = 8
    """Samples per validation problem of ``val_every`` (k of mean@k and pass@k)."""
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
        """Every field checked, all problems in one ValueError (`problems`)."""
        raise_problems("training config", self.problems())

    def problems(self) -> list[str]:
        """What is wrong with the settings, one ``field: why`` line each (empty: nothing). The method's name and
        parameters are the method registry's to check (`bandpo.methods.resolve`, where the run starts)."""
        problems = [f"{name}: required" for name in ("model", "data", "out") if not getattr(self, name)]
        problems += self.protocol_problems()
        if self.steps is None:
            problems.append("steps: must be an integer >= 1 (the local trainer counts steps, not epochs)")
        if self.minibatch in ("group", "random") and all(
            isinstance(getattr(self, k), int) for k in ("prompts_per_step", "samples_per_prompt", "updates_per_step")
        ):
            problem = self.minibatch_problem(self.prompts_per_step)
            if problem:
                problems.append(f"updates_per_step: {problem}")
        if not isinstance(self.adv_eps, (int, float)) or not math.isfinite(self.adv_eps) or self.adv_eps <= 0:
            problems.append(f"adv_eps: must be a finite number > 0, got {self.adv_eps!r}")
        choices = {"sampler_kernel": SAMPLER_KERNELS, "sampler_draws": SAMPLER_DRAWS,
                   "old_log_probs": ("sampler", "recompute"), "minibatch": ("group", "random"),
                   "reward": ("grader", "random")}  # fmt: skip
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                problems.append(f"{name}: must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        for name in ("probe_every", "probe_k", "val_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                problems.append(f"{name}: must be an integer >= 0, got {getattr(self, name)!r}")
        for name in ("checkpoint_every", "threads", "val_k"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                problems.append(f"{name}: must be an integer >= 1, got {getattr(self, name)!r}")
        if self.chat_template and self.probe_every:
            problems.append("chat_template: the probe measures the raw prompt's deciding token; set probe_every 0")
        return problems

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

    def loss_settings(self) -> dict[str, Any]:
        """The shared loss settings of `bandpo.methods.resolve` (``resolve(cfg.method, cfg.params, ...)``)."""
        return {"loss_agg_mode": self.loss_agg_mode, "dual_clip_c": self.dual_clip_c}

    def identity(self) -> str:
        """Hash of the fields that can change the result: every field but out, progress, keep_checkpoint,
        checkpoint_every and trackers (threads and device are hashed: they change float rounding), as the spec file
        holds them (`spec_fields`: a field added later is left out at its default, so the identity of every run that
        was possible before it stays the same). A checkpoint of another identity is not resumed."""
        d = spec_fields(self)
        for k in ("out", "progress", "keep_checkpoint", "checkpoint_every", "trackers"):
            d.pop(k, None)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


# Fields the run plan sets itself for every run (from the run's model, data, method entry, seed, folder and the
# rule's threads): not settings of the config's ``train:``.
RUN_FIELDS = ("model", "data", "out", "method", "params", "seed", "threads", "progress")


def typed_fields(values: Mapping[str, Any], what: str = "training setting") -> dict[str, Any]:
    """``values`` checked against TrainConfig's fields (names with a did-you-mean hint, types; ints widened to
    floats): ValueError naming the key. Ranges are `TrainConfig.validate`'s."""
    return check_fields(values, TrainConfig, what)


def from_dict(values: Mapping[str, Any], what: str = "training setting") -> TrainConfig:
    """A validated TrainConfig from field values (a run's spec, a config's settings); ValueError naming the field."""
    cfg = TrainConfig(**typed_fields(values, what))
    cfg.validate()
    return cfg


def read_spec(path: str | os.PathLike, set_files: Sequence[str | os.PathLike] = ()) -> TrainConfig:
    """The run a spec file describes (written by the run plan, `bandpo.plan.runs.Plan.write_specs`: every
    TrainConfig field), with the settings of each ``set_files`` JSON object applied over it, validated
    (`bandpo.core.files.read_spec` with `from_dict`); ValueError naming the file and field."""
    return files.read_spec(path, from_dict, set_files)
